//! One routing SPI event, parsed ([`parse`] → [`Event`]): the YAML body origin-server's
//! ActiveMQ routing plugin publishes (`plugins/routing/activemq`): a Ruby hash with
//! symbol keys dumped by `to_yaml`, so a YAML parser sees string keys `":action"` and
//! symbol values `":add_alias"`; one leading `:` is taken off both. Ports are integers,
//! PEM blocks `|` literals, `nil` an empty value.
//!
//! Checked here, before anything is applied: the action, the application's name and
//! namespace (letters and digits, as the broker allows them; lower-cased: names are
//! unique by their lower-case form), an endpoint's address and port, an alias (a DNS
//! name, lower-cased as the broker sends it). A body that is not such an event is
//! refused with every reason at once.

use serde_json::Value;

/// The largest body taken (an `add_ssl` with a certificate chain is a few KiB).
pub const MAX_BODY: usize = 256 * 1024;

/// What an event asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    CreateApplication,
    DeleteApplication,
    AddPublicEndpoint,
    RemovePublicEndpoint,
    AddAlias,
    RemoveAlias,
    AddSsl,
    RemoveSsl,
    /// Anything else: `add_gear` and `delete_gear` (removed from the plugin in 2014),
    /// or an action of a later plugin. Acknowledged and left alone.
    Other(String),
}

impl Action {
    fn of(name: &str) -> Action {
        match name {
            "create_application" => Action::CreateApplication,
            "delete_application" => Action::DeleteApplication,
            "add_public_endpoint" => Action::AddPublicEndpoint,
            "remove_public_endpoint" => Action::RemovePublicEndpoint,
            "add_alias" => Action::AddAlias,
            "remove_alias" => Action::RemoveAlias,
            "add_ssl" => Action::AddSsl,
            "remove_ssl" => Action::RemoveSsl,
            other => Action::Other(other.to_string()),
        }
    }

    /// The action's name as the plugin sends it.
    pub fn name(&self) -> &str {
        match self {
            Action::CreateApplication => "create_application",
            Action::DeleteApplication => "delete_application",
            Action::AddPublicEndpoint => "add_public_endpoint",
            Action::RemovePublicEndpoint => "remove_public_endpoint",
            Action::AddAlias => "add_alias",
            Action::RemoveAlias => "remove_alias",
            Action::AddSsl => "add_ssl",
            Action::RemoveSsl => "remove_ssl",
            Action::Other(n) => n,
        }
    }
}

/// A public endpoint of a gear (`add_public_endpoint`; `remove_public_endpoint` carries
/// only the gear, address and port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The gear's id (`gear._id`).
    pub gear_id: String,
    /// The node's public address (`PUBLIC_IP`), lower-cased.
    pub address: String,
    pub port: u16,
    /// `public_port_name`: the cartridge's name (`haproxy-1.4`, `gearlb-0.1`).
    pub cartridge: Option<String>,
    pub protocols: Vec<String>,
    pub types: Vec<String>,
}

impl Endpoint {
    /// `address:port` (IPv6 in brackets): the endpoint's key in the table.
    pub fn key(&self) -> String {
        endpoint_key(&self.address, self.port)
    }
}

/// `address:port`, IPv6 in brackets.
pub fn endpoint_key(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// An alias's certificate as sent (`add_ssl`): checked and decrypted before it is
/// applied, by whoever can parse keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Ssl {
    pub cert: String,
    pub key: String,
    pub pass_phrase: Option<String>,
}

impl std::fmt::Debug for Ssl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ssl")
            .field("cert_bytes", &self.cert.len())
            .field("key", &"<secret>")
            .finish()
    }
}

/// One event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub action: Action,
    /// Lower-cased.
    pub app: String,
    /// Lower-cased.
    pub namespace: String,
    pub scalable: Option<bool>,
    pub ha: Option<bool>,
    pub endpoint: Option<Endpoint>,
    /// Lower-cased.
    pub alias: Option<String>,
    pub ssl: Option<Ssl>,
    /// The plugin marked it `deprecated`.
    pub deprecated: bool,
}

impl Event {
    /// The service it concerns: `<app>-<namespace>`.
    pub fn service(&self) -> String {
        service_name(&self.app, &self.namespace)
    }
}

/// The service of an application: `<app>-<namespace>`.
pub fn service_name(app: &str, namespace: &str) -> String {
    format!("{app}-{namespace}")
}

/// Take one leading `:` off (a Ruby symbol).
fn unsym(s: &str) -> &str {
    s.strip_prefix(':').unwrap_or(s)
}

/// A scalar as text (YAML may have typed a name made of digits as a number).
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(unsym(s).to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Application names and namespaces: letters and digits (the broker's rule).
fn is_plain_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Parse an event body; every problem listed.
pub fn parse(body: &[u8]) -> Result<Event, String> {
    if body.len() > MAX_BODY {
        return Err(format!(
            "body of {} bytes, more than the {MAX_BODY} an event may have",
            body.len()
        ));
    }
    let text_body = std::str::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())?;
    let doc: Value = serde_saphyr::from_str(text_body).map_err(|e| {
        let e = e.to_string();
        let e = e.lines().next().unwrap_or("").to_string();
        format!("body is not YAML: {e}")
    })?;
    let Value::Object(map) = doc else {
        return Err("body is not a YAML mapping of an event".into());
    };
    let mut fields = serde_json::Map::new();
    for (k, v) in map {
        fields.insert(unsym(&k).to_string(), v);
    }
    let get = |k: &str| fields.get(k).filter(|v| !v.is_null());
    let mut problems = Vec::new();
    let action = match get("action").and_then(text) {
        Some(a) => Action::of(&a),
        None => return Err("no action".into()),
    };
    let mut name = |key: &str| -> String {
        match get(key).and_then(text) {
            Some(v) if is_plain_name(&v) => v.to_ascii_lowercase(),
            Some(v) => {
                problems.push(format!("{key} {v:?}: letters and digits only"));
                String::new()
            }
            None => {
                problems.push(format!("no {key}"));
                String::new()
            }
        }
    };
    let (app, namespace) = match action {
        Action::Other(_) => (
            get("app_name").and_then(text).unwrap_or_default(),
            get("namespace").and_then(text).unwrap_or_default(),
        ),
        _ => (name("app_name"), name("namespace")),
    };
    let flag = |k: &str| get(k).and_then(Value::as_bool);
    let strings = |k: &str| -> Vec<String> {
        match get(k) {
            Some(Value::Array(a)) => a.iter().filter_map(text).collect(),
            Some(v) => text(v).into_iter().collect(),
            None => Vec::new(),
        }
    };
    let endpoint = match action {
        Action::AddPublicEndpoint | Action::RemovePublicEndpoint => {
            let gear_id = get("gear_id").and_then(text).unwrap_or_default();
            let address = get("public_address").and_then(text).unwrap_or_default();
            let address = address
                .trim_matches(|c| c == '[' || c == ']')
                .to_ascii_lowercase();
            let addr_ok =
                address.parse::<std::net::IpAddr>().is_ok() || crate::gear::is_dns_name(&address);
            if !addr_ok {
                problems.push(format!("public_address {address:?} is not an address"));
            }
            let port = match get("public_port") {
                Some(Value::Number(n)) => n.as_u64(),
                Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
                _ => None,
            };
            let port = match port {
                Some(p) if (1..=65_535).contains(&p) => p as u16,
                _ => {
                    problems.push(format!(
                        "public_port {:?} is not a port",
                        get("public_port")
                            .map(|v| v.to_string())
                            .unwrap_or_default()
                    ));
                    0
                }
            };
            Some(Endpoint {
                gear_id,
                address,
                port,
                cartridge: get("public_port_name").and_then(text),
                protocols: strings("protocols"),
                types: strings("types"),
            })
        }
        _ => None,
    };
    let alias = match action {
        Action::AddAlias | Action::RemoveAlias | Action::AddSsl | Action::RemoveSsl => {
            match get("alias").and_then(text) {
                Some(a) if crate::gear::is_dns_name(&a) => {
                    Some(a.trim_end_matches('.').to_ascii_lowercase())
                }
                Some(a) => {
                    problems.push(format!("alias {a:?} is not a DNS name"));
                    None
                }
                None => {
                    problems.push("no alias".into());
                    None
                }
            }
        }
        _ => None,
    };
    let ssl = match action {
        Action::AddSsl => {
            let cert = get("ssl").and_then(Value::as_str).unwrap_or_default();
            let key = get("private_key")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if cert.trim().is_empty() {
                problems.push("no ssl certificate".into());
            }
            if key.trim().is_empty() {
                problems.push("no private_key".into());
            }
            let pass_phrase = match get("pass_phrase") {
                // The broker's op field is typed as a list: take its one value.
                Some(Value::Array(a)) => a.iter().find_map(text),
                Some(v) => text(v),
                None => None,
            }
            .filter(|p| !p.is_empty());
            Some(Ssl {
                cert: cert.to_string(),
                key: key.to_string(),
                pass_phrase,
            })
        }
        _ => None,
    };
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(Event {
        action,
        app,
        namespace,
        scalable: flag("scalable"),
        ha: flag("ha"),
        endpoint,
        alias,
        ssl,
        deprecated: get("deprecated").is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies exactly as the plugin sends them (research note, run against the real
    /// plugin under Ruby 3.1).
    const ENDPOINT: &str = "---\n:action: :add_public_endpoint\n:app_name: myapp\n:namespace: ns1\n\
        :gear_id: 53f7c8a5e4b0a1b2c3d4e5f6\n:public_port_name: haproxy-1.4\n:public_address: 10.0.0.11\n\
        :public_port: 35541\n:protocols:\n- http\n- ws\n:types:\n- load_balancer\n:mappings:\n\
        - frontend: ''\n  backend: ''\n- frontend: \"/health\"\n  backend: configuration/health\n";

    #[test]
    fn the_plugins_bodies() {
        let e = parse(ENDPOINT.as_bytes()).unwrap();
        assert_eq!(e.action, Action::AddPublicEndpoint);
        assert_eq!((e.app.as_str(), e.namespace.as_str()), ("myapp", "ns1"));
        assert_eq!(e.service(), "myapp-ns1");
        let ep = e.endpoint.unwrap();
        assert_eq!(ep.key(), "10.0.0.11:35541");
        assert_eq!(ep.types, ["load_balancer"]);
        assert_eq!(ep.protocols, ["http", "ws"]);
        assert_eq!(ep.cartridge.as_deref(), Some("haproxy-1.4"));
        let e = parse(b"---\n:action: :create_application\n:app_name: MyApp\n:namespace: ns1\n:scalable: true\n:ha: false\n").unwrap();
        assert_eq!(e.action, Action::CreateApplication);
        assert_eq!(e.app, "myapp");
        assert_eq!((e.scalable, e.ha), (Some(true), Some(false)));
        let e = parse(b"---\n:action: :remove_public_endpoint\n:app_name: myapp\n:namespace: ns1\n:gear_id: g1\n:public_address: 10.0.0.11\n:public_port: 35541\n").unwrap();
        assert!(e.endpoint.unwrap().types.is_empty());
        let e = parse(b"---\n:action: :add_alias\n:app_name: myapp\n:namespace: ns1\n:alias: WWW.Example.org\n").unwrap();
        assert_eq!(e.alias.as_deref(), Some("www.example.org"));
        let ssl =
            "---\n:action: :add_ssl\n:app_name: myapp\n:namespace: ns1\n:alias: www.example.org\n\
            :ssl: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n\
            :private_key: |\n  -----BEGIN RSA PRIVATE KEY-----\n  Proc-Type: 4,ENCRYPTED\n  \
            DEK-Info: DES-EDE3-CBC,B6FFDDE852F37B90\n\n  5dli\n  -----END RSA PRIVATE KEY-----\n\
            :pass_phrase: s3cret\n";
        let e = parse(ssl.as_bytes()).unwrap();
        let s = e.ssl.unwrap();
        assert!(s.cert.starts_with("-----BEGIN CERTIFICATE-----\nMIIB\n"));
        assert!(s
            .key
            .contains("Proc-Type: 4,ENCRYPTED\nDEK-Info: DES-EDE3-CBC,B6FFDDE852F37B90\n\n5dli\n"));
        assert_eq!(s.pass_phrase.as_deref(), Some("s3cret"));
        let nil = ssl.replace(":pass_phrase: s3cret\n", ":pass_phrase:\n");
        assert_eq!(
            parse(nil.as_bytes()).unwrap().ssl.unwrap().pass_phrase,
            None
        );
        let quoted = ssl.replace(":pass_phrase: s3cret\n", ":pass_phrase: '1234'\n");
        assert_eq!(
            parse(quoted.as_bytes())
                .unwrap()
                .ssl
                .unwrap()
                .pass_phrase
                .as_deref(),
            Some("1234")
        );
        let e = parse(
            b"---\n:action: :add_gear\n:app_name: myapp\n:namespace: ns1\n:deprecated: true\n",
        )
        .unwrap();
        assert_eq!(e.action, Action::Other("add_gear".into()));
        assert!(e.deprecated);
    }

    #[test]
    fn what_is_refused_and_why() {
        for (body, why) in [
            (&b"\xff\xfe"[..], "UTF-8"),
            (b"---\n:action: [unclosed\n", "not YAML"),
            (b"--- just text\n", "mapping"),
            (b"---\n:app_name: a\n", "no action"),
            (b"---\n:action: :add_alias\n:app_name: my-app\n:namespace: ns1\n:alias: a.b\n", "app_name"),
            (b"---\n:action: :add_alias\n:app_name: a\n:namespace: ns1\n", "no alias"),
            (b"---\n:action: :add_alias\n:app_name: a\n:namespace: ns1\n:alias: \"a b\"\n", "not a DNS name"),
            (b"---\n:action: :remove_public_endpoint\n:app_name: a\n:namespace: n\n:public_address: 10.0.0.1\n:public_port: 70000\n", "not a port"),
            (b"---\n:action: :add_public_endpoint\n:app_name: a\n:namespace: n\n:public_address: \"x y\"\n:public_port: 1\n", "not an address"),
            (b"---\n:action: :add_ssl\n:app_name: a\n:namespace: n\n:alias: a.b\n", "no ssl"),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(why), "{body:?}: {e}");
        }
        let big = vec![b' '; MAX_BODY + 1];
        assert!(parse(&big).unwrap_err().contains("more than"));
    }
}
