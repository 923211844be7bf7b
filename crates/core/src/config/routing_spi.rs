//! `[routing_spi]`: a balancer that is a **router** in front of a platform's highly
//! available applications, fed by the broker's routing SPI (origin-server's ActiveMQ
//! routing plugin publishes one YAML event per change over STOMP). Plain data
//! ([`RoutingSpiConfig`]); its keys are read in `spi_keys`; the password may
//! come from the environment (`GEARLB_ROUTING_SPI_PASSWORD`, and
//! `GEARLB_ROUTING_SPI_REST_PASSWORD` for the broker's REST API) rather than the file.
//!
//! Each application with an endpoint whose `types` meet `endpoint_types` becomes the
//! service `<app>-<namespace>`, routed for `<ha_dns_prefix><app>-<namespace>
//! <ha_dns_suffix>.<cloud_domain>` and its aliases (see `crate::spi`).

use std::path::PathBuf;
use std::time::Duration;

/// The environment variable that holds the STOMP password (over the file's).
pub const PASSWORD_ENV: &str = "GEARLB_ROUTING_SPI_PASSWORD";
/// The environment variable that holds the broker REST API's password.
pub const REST_PASSWORD_ENV: &str = "GEARLB_ROUTING_SPI_REST_PASSWORD";

/// `[routing_spi]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingSpiConfig {
    /// STOMP brokers, `host:port`, tried in order (at least one).
    pub brokers: Vec<String>,
    /// What to consume: a topic (`/topic/routinginfo`, the plugin's default in its
    /// example configuration: then a durable subscription named `client_id`), or a
    /// queue of this router's own (`/queue/Consumer.<router>.VirtualTopic.routinginfo`
    /// with the plugin publishing to `/topic/VirtualTopic.routinginfo`).
    pub destination: String,
    pub username: Option<String>,
    /// Env `GEARLB_ROUTING_SPI_PASSWORD` when set.
    pub password: Option<String>,
    /// The STOMP `client-id` and the durable subscription's name: one per router, the
    /// same across its restarts (default `cluster.node_id`, else the host name).
    pub client_id: Option<String>,
    /// The platform's domain (`CLOUD_DOMAIN`): HA names end in it. Required.
    pub cloud_domain: String,
    /// Default `ha-` (the broker's `HA_DNS_PREFIX`).
    pub ha_dns_prefix: String,
    /// Default empty (the broker's `HA_DNS_SUFFIX`).
    pub ha_dns_suffix: String,
    /// An endpoint is a backend when one of its `types` is listed. Default
    /// `["load_balancer"]`.
    pub endpoint_types: Vec<String>,
    /// Request each served application's head gear through its node's frontend while
    /// it serves traffic, so that the node's idler never idles it. Default true.
    pub keep_seen: bool,
    /// STOMP heart-beats, both ways: a broker silent for about 2.5 times this is
    /// taken for dead. Default 5s.
    pub heartbeat: Duration,
    /// `/health` answers 200 while a broker is connected, or while the table was
    /// current this recently (the last moment a broker was connected, or a peer or the
    /// REST API gave it). Default 10m.
    pub max_table_age: Duration,
    /// The broker's REST API (`https://broker.example.com/broker/rest`), to reconcile
    /// the table with at start and every `reconcile_interval`. Default none.
    pub rest_url: Option<String>,
    pub rest_user: Option<String>,
    /// Env `GEARLB_ROUTING_SPI_REST_PASSWORD` when set.
    pub rest_password: Option<String>,
    /// A PEM CA bundle the REST API's certificate is checked against (besides the
    /// system's). Default none.
    pub rest_ca: Option<PathBuf>,
    /// Default 5m.
    pub reconcile_interval: Duration,
    /// How long a router that starts with no table waits for a live peer router to
    /// give it one. Default 10s.
    pub peer_table_timeout: Duration,
}

impl Default for RoutingSpiConfig {
    fn default() -> Self {
        RoutingSpiConfig {
            brokers: Vec::new(),
            destination: "/topic/routinginfo".into(),
            username: None,
            password: None,
            client_id: None,
            cloud_domain: String::new(),
            ha_dns_prefix: "ha-".into(),
            ha_dns_suffix: String::new(),
            endpoint_types: vec!["load_balancer".into()],
            keep_seen: true,
            heartbeat: Duration::from_secs(5),
            max_table_age: Duration::from_secs(600),
            rest_url: None,
            rest_user: None,
            rest_password: None,
            rest_ca: None,
            reconcile_interval: Duration::from_secs(300),
            peer_table_timeout: Duration::from_secs(10),
        }
    }
}

impl RoutingSpiConfig {
    /// Whether the destination is a topic (then the subscription is durable).
    pub fn is_topic(&self) -> bool {
        self.destination.starts_with("/topic/")
    }

    /// The HA name of an application.
    pub fn ha_name(&self, app: &str, namespace: &str) -> String {
        format!(
            "{}{app}-{namespace}{}.{}",
            self.ha_dns_prefix, self.ha_dns_suffix, self.cloud_domain
        )
        .to_ascii_lowercase()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_toml;
    use std::collections::HashMap;
    use std::time::Duration;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_router_with_its_defaults() {
        let c = from_toml(
            "[routing_spi]\nbrokers = [\"127.0.0.1:61613\", \"mq2.example.com:61613\"]\n\
             cloud_domain = \"Example.COM.\"\nclient_id = \"router1\"\npassword = \"file\"\n",
            &env(&[("GEARLB_ROUTING_SPI_PASSWORD", "from-env")]),
        )
        .unwrap();
        let s = c.routing_spi.clone().unwrap();
        assert_eq!(s.brokers.len(), 2);
        assert_eq!(s.destination, "/topic/routinginfo");
        assert!(s.is_topic());
        assert_eq!(s.cloud_domain, "example.com");
        assert_eq!(s.password.as_deref(), Some("from-env"));
        assert_eq!(s.endpoint_types, ["load_balancer"]);
        assert!(s.keep_seen);
        assert_eq!(s.ha_name("MyApp", "ns1"), "ha-myapp-ns1.example.com");
        assert_eq!(s.heartbeat, Duration::from_secs(5));
        assert!(!c.default_service(), "a router serves no default service");
        assert!(from_toml("", &env(&[])).unwrap().routing_spi.is_none());
    }

    #[test]
    fn every_problem_is_listed() {
        let e = from_toml(
            "[routing_spi]\nbrokers = [\"nope\", 7]\ndestination = \"routinginfo\"\n\
             client_id = \"a b\"\ncloud_domain = \"exa mple\"\nendpoint_types = []\n\
             rest_url = \"ftp://x\"\nha_dns_prefix = \"h a\"\nfrobnicate = 1\n",
            &env(&[]),
        )
        .unwrap_err();
        let paths: Vec<&str> = e.0.iter().map(|p| p.path.as_str()).collect();
        for want in [
            "routing_spi.brokers[0]",
            "routing_spi.brokers[1]",
            "routing_spi.destination",
            "routing_spi.client_id",
            "routing_spi.cloud_domain",
            "routing_spi.endpoint_types",
            "routing_spi.rest_url",
            "routing_spi.ha_dns_prefix",
            "routing_spi.frobnicate",
        ] {
            assert!(paths.contains(&want), "{want} not in {paths:?}");
        }
        let e = from_toml(
            "[listen]\nmode = \"tcp\"\n[routing_spi]\nbrokers = [\"127.0.0.1:61613\"]\ncloud_domain = \"example.com\"\n",
            &env(&[]),
        )
        .unwrap_err();
        assert!(
            e.0.iter()
                .any(|p| p.path == "routing_spi" && p.message.contains("http")),
            "{e:?}"
        );
        let e = from_toml("[routing_spi]\n", &env(&[])).unwrap_err();
        let paths: Vec<&str> = e.0.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"routing_spi.brokers"), "{paths:?}");
        assert!(paths.contains(&"routing_spi.cloud_domain"), "{paths:?}");
    }
}
