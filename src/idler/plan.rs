//! The keep-seen decisions, pure: which peer gears to request ([`targets`]), when a
//! round is due ([`Pacer`]), the request itself ([`request`], [`status_of`]), and how
//! often a failure may be logged ([`LogLimit`]). No I/O and no clock of their own: the
//! task in `super::task` passes the time and what it read.

use std::time::{Duration, Instant};

use crate::cartridge::registry::Registry;
use crate::gear::is_dns_name;

/// The path requested: the manifest maps `/health` of the gear's DNS name with the
/// `health` option, which the node frontend answers itself from
/// `/var/www/html/health.txt` (origin-server's apache-vhost and apache-mod-rewrite
/// frontends): the request is logged under the gear's name and never reaches the gear.
pub const PATH: &str = "/health";

/// One peer gear to keep seen: requested as `dns` on the node frontend of `host`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub uuid: String,
    /// The gear's DNS name (the application's for the head gear): the node frontend's
    /// virtual host, which the idler maps to the gear.
    pub dns: String,
    /// The node the gear lives on (the registry's `proxy_hostname`).
    pub host: String,
}

/// A name or address usable as a host to connect to and to compare.
fn is_host(s: &str) -> bool {
    is_dns_name(s) || s.parse::<std::net::IpAddr>().is_ok()
}

/// Lower-cased, without a trailing dot.
fn norm(s: &str) -> String {
    s.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The balancer gears to request: every proxy gear of the registry but this one
/// (`own_uuid`), on a node that is not this balancer's own. Its own node is the one its
/// registry entry names, and any of `own_names` (the node's public name and address
/// from its configuration): the idler ignores requests from the node's own addresses,
/// so a request to a gear on the same node would be wasted. Entries whose name or host
/// is not a plain DNS name or address are left out (they go into a request line);
/// sorted by uuid, each (gear name, node) once.
pub fn targets(registry: &Registry, own_uuid: Option<&str>, own_names: &[String]) -> Vec<Target> {
    let is_own = |uuid: &str| own_uuid.is_some_and(|o| o.eq_ignore_ascii_case(uuid));
    let mut own: Vec<String> = own_names.iter().map(|n| norm(n)).collect();
    if let Some(e) = registry.proxy.values().find(|e| is_own(&e.uuid)) {
        own.push(norm(&e.proxy_hostname));
    }
    let mut out: Vec<Target> = registry
        .proxy
        .values()
        .filter(|e| !is_own(&e.uuid))
        .map(|e| Target {
            uuid: e.uuid.clone(),
            dns: norm(&e.dns),
            host: norm(&e.proxy_hostname),
        })
        .filter(|t| is_dns_name(&t.dns) && is_host(&t.host) && !own.contains(&t.host))
        .collect();
    out.sort();
    let mut seen = std::collections::HashSet::new();
    out.retain(|t| seen.insert((t.dns.clone(), t.host.clone())));
    out
}

/// The node's public name and address in its configuration (`PUBLIC_HOSTNAME`,
/// `PUBLIC_IP` of `/etc/openshift/node.conf`, shell `KEY="value"` lines).
pub fn node_names(node_conf: &str) -> Vec<String> {
    node_conf
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let v = line
                .strip_prefix("PUBLIC_HOSTNAME=")
                .or_else(|| line.strip_prefix("PUBLIC_IP="))?;
            let v = v.split('#').next()?.trim();
            let v = v.trim_matches(|c| c == '"' || c == '\'').trim();
            (!v.is_empty()).then(|| norm(v))
        })
        .collect()
}

/// What says the application serves, as sampled once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// This balancer's client requests and connections so far (only ever grows).
    pub served: u64,
    /// Its upgraded connections (WebSockets) open now.
    pub open: u64,
    /// A live peer balancer published requests of its own in its last load report:
    /// traffic that reaches the head gear's balancer only still keeps it seen, by
    /// the peers on other nodes.
    pub peers_serving: bool,
}

/// When rounds are due: one `interval` after the last decision, and only if the
/// application served in between (a sample saw a new request or connection, an open
/// tunnel, or a peer serving). An idle application is left to the idler.
#[derive(Clone, Debug)]
pub struct Pacer {
    interval: Duration,
    next: Instant,
    last_served: u64,
    served: bool,
}

impl Pacer {
    /// The first decision comes one interval after `now`.
    pub fn new(now: Instant, interval: Duration) -> Self {
        Pacer {
            interval,
            next: now + interval,
            last_served: 0,
            served: false,
        }
    }

    /// How often to sample: every second, or every interval when that is shorter.
    pub fn sample_every(&self) -> Duration {
        self.interval.min(Duration::from_secs(1))
    }

    /// Take in a sample made at `now`; true when a round is due now.
    pub fn sample(&mut self, now: Instant, s: Sample) -> bool {
        if s.served != self.last_served || s.open > 0 || s.peers_serving {
            self.served = true;
        }
        self.last_served = s.served;
        if now < self.next {
            return false;
        }
        self.next = now + self.interval;
        std::mem::take(&mut self.served)
    }
}

/// The request: `HEAD /health` for the gear's name, the connection closed after it.
/// `HEAD` asks for no body; the frontend answers it from a file.
pub fn request(dns: &str) -> String {
    format!(
        "HEAD {PATH} HTTP/1.1\r\nHost: {dns}\r\nUser-Agent: gearlb/{} (idler keep-seen)\r\n\
         Accept: */*\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// The status code of a response's first line (`HTTP/1.x NNN …`), once it is whole.
pub fn status_of(head: &[u8]) -> Option<u16> {
    let end = head.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&head[..end]).ok()?;
    let mut parts = line.split(' ');
    let version = parts.next()?;
    let code = parts.next()?;
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return None;
    }
    code.parse().ok().filter(|c| (100..600).contains(c))
}

/// Whether a status means the frontend served the gear's name: a 2xx or 3xx. (Any
/// answer was logged; another status may be a name the frontend does not know, which
/// the idler cannot map to the gear.)
pub fn answered(status: u16) -> bool {
    (200..400).contains(&status)
}

/// At most one log line per `every`; the lines held back are counted.
#[derive(Clone, Debug)]
pub struct LogLimit {
    every: Duration,
    last: Option<Instant>,
    held: u64,
}

impl LogLimit {
    pub fn new(every: Duration) -> Self {
        LogLimit {
            every,
            last: None,
            held: 0,
        }
    }

    /// `Some(n)` when a line may be logged at `now` (`n` lines were held back since
    /// the last one), else `None` (this one is held back).
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the node writes it: the head gear's balancer (its DNS name is the
    /// application's) on node1, two more balancers on node2 and node3, and web gears.
    const REGISTRY: &str = r#"{"web":{"5a1e0000000000000000aaaa":{"namespace":"ns","dns":"myapp-ns.example.com","proxy_hostname":"node1.example.com","proxy_port":"35561"},"5a1e0000000000000000eeee":{"namespace":"ns","dns":"5a1e0000000000000000eeee-ns.example.com","proxy_hostname":"node3.example.com","proxy_port":"35570"}},"proxy":{"5a1e0000000000000000aaaa":{"namespace":"ns","dns":"myapp-ns.example.com","proxy_hostname":"node1.example.com","proxy_port":0},"5a1e0000000000000000bbbb":{"namespace":"ns","dns":"5a1e0000000000000000bbbb-ns.example.com","proxy_hostname":"Node2.example.com.","proxy_port":0},"5a1e0000000000000000cccc":{"namespace":"ns","dns":"5a1e0000000000000000cccc-ns.example.com","proxy_hostname":"node1.example.com","proxy_port":0},"5a1e0000000000000000dddd":{"namespace":"ns","dns":"bad name\r\nX: y","proxy_hostname":"node3.example.com","proxy_port":0}}}"#;

    fn reg() -> Registry {
        Registry::parse(REGISTRY).unwrap()
    }

    fn hosts(t: &[Target]) -> Vec<(&str, &str)> {
        t.iter()
            .map(|t| (t.dns.as_str(), t.host.as_str()))
            .collect()
    }

    #[test]
    fn a_secondary_balancer_keeps_the_head_gear_seen() {
        // On node2: the head gear (node1) is the one that matters to the idler; the
        // other balancer on node1 is requested too. The bad name never is.
        let t = targets(&reg(), Some("5a1e0000000000000000bbbb"), &[]);
        assert_eq!(
            hosts(&t),
            vec![
                ("myapp-ns.example.com", "node1.example.com"),
                (
                    "5a1e0000000000000000cccc-ns.example.com",
                    "node1.example.com"
                ),
            ]
        );
        assert_eq!(t[0].uuid, "5a1e0000000000000000aaaa");
    }

    #[test]
    fn no_request_to_a_gear_on_the_same_node() {
        // The head gear's balancer on node1: the other balancer on node1 is skipped
        // (the idler ignores the node's own addresses), node2's is requested.
        let t = targets(&reg(), Some("5a1e0000000000000000AAAA"), &[]);
        assert_eq!(
            hosts(&t),
            vec![(
                "5a1e0000000000000000bbbb-ns.example.com",
                "node2.example.com"
            )]
        );
        // Its own node known from the node's configuration too, under another name.
        let t = targets(
            &reg(),
            Some("5a1e0000000000000000ffff"),
            &node_names(
                "PUBLIC_HOSTNAME=\"node2.example.com\" # this node\nPUBLIC_IP='10.0.0.2'\n",
            ),
        );
        assert_eq!(
            hosts(&t),
            vec![
                ("myapp-ns.example.com", "node1.example.com"),
                (
                    "5a1e0000000000000000cccc-ns.example.com",
                    "node1.example.com"
                ),
            ]
        );
        // One balancer, or none registered: nothing to send.
        let one = Registry::parse(r#"{"proxy":{"5a1e0000000000000000aaaa":{"namespace":"ns","dns":"myapp-ns.example.com","proxy_hostname":"node1.example.com"}}}"#).unwrap();
        assert!(targets(&one, Some("5a1e0000000000000000aaaa"), &[]).is_empty());
        assert!(targets(&Registry::default(), None, &[]).is_empty());
    }

    #[test]
    fn node_names_of_a_node_configuration() {
        assert_eq!(
            node_names("# c\nPUBLIC_IP=\"10.0.0.5\"\nPUBLIC_HOSTNAME=Node1.Example.com\nCLOUD_DOMAIN=x\nPUBLIC_IP=\n"),
            vec!["10.0.0.5".to_string(), "node1.example.com".to_string()]
        );
    }

    #[test]
    fn rounds_only_while_the_application_serves() {
        let t0 = Instant::now();
        let i = Duration::from_secs(600);
        let mut p = Pacer::new(t0, i);
        assert_eq!(p.sample_every(), Duration::from_secs(1));
        let s = |served, open, peers_serving| Sample {
            served,
            open,
            peers_serving,
        };
        // Requests early in the interval: the round comes at its end.
        assert!(!p.sample(t0 + Duration::from_secs(1), s(5, 0, false)));
        assert!(!p.sample(t0 + Duration::from_secs(599), s(5, 0, false)));
        assert!(p.sample(t0 + i, s(5, 0, false)));
        // A quiet interval: no round.
        assert!(!p.sample(t0 + i * 2, s(5, 0, false)));
        // An open WebSocket is serving; so is a peer that serves.
        assert!(p.sample(t0 + i * 3, s(5, 1, false)));
        assert!(p.sample(t0 + i * 4, s(5, 0, true)));
        // Served between two samples, then quiet at the decision: still a round.
        assert!(!p.sample(t0 + i * 4 + Duration::from_secs(10), s(6, 0, false)));
        assert!(p.sample(t0 + i * 5, s(6, 0, false)));
        // A late sample decides at once and the next decision is an interval later.
        assert!(!p.sample(t0 + i * 6 + Duration::from_secs(30), s(6, 0, false)));
        assert!(!p.sample(t0 + i * 7, s(7, 0, false)));
        assert!(p.sample(t0 + i * 7 + Duration::from_secs(30), s(7, 0, false)));
        // A short interval samples as often.
        assert_eq!(
            Pacer::new(t0, Duration::from_millis(200)).sample_every(),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn the_request_and_its_answer() {
        let r = request("myapp-ns.example.com");
        assert!(r.starts_with("HEAD /health HTTP/1.1\r\nHost: myapp-ns.example.com\r\n"));
        assert!(r.contains("\r\nConnection: close\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\nDate: x\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.0 302 Found\r\n"), Some(302));
        assert_eq!(status_of(b"HTTP/1.1 200 OK"), None, "not whole yet");
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 2000 OK\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 099 x\r\n"), None);
        assert!(answered(200) && answered(301) && !answered(404) && !answered(503));
    }

    #[test]
    fn failures_are_logged_at_most_once_a_minute() {
        let t0 = Instant::now();
        let mut l = LogLimit::new(Duration::from_secs(60));
        assert_eq!(l.allow(t0), Some(0));
        assert_eq!(l.allow(t0 + Duration::from_secs(1)), None);
        assert_eq!(l.allow(t0 + Duration::from_secs(59)), None);
        assert_eq!(l.allow(t0 + Duration::from_secs(60)), Some(2));
        assert_eq!(l.allow(t0 + Duration::from_secs(200)), Some(0));
    }
}
