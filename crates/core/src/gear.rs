//! Gear naming and the platform's text formats for gears.
//!
//! Owns: backend addresses (`host:port`), the `update-cluster` entry format
//! `<gear-dns>|<host>:<port>` and how the node hands it over (one shell word holding
//! spaces, or many words, or the legacy `'uuid'='dns|host:port'` form), and the names
//! derived from a gear: server name `gear-<gearname>-<ns>` and sticky value
//! `<gearname>-<ns>`. Everything here is pure and validating: nothing that fails these
//! checks ever becomes a backend, so forged input cannot route traffic anywhere.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest DNS name we accept (RFC 1035).
const MAX_DNS_NAME: usize = 253;
/// Longest DNS label we accept (RFC 1035).
const MAX_DNS_LABEL: usize = 63;

/// Where a backend listens: an IP literal or a DNS name, and a port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Addr {
    host: Host,
    port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Addr {
    /// The socket address when the host is an IP literal (no resolution needed).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self.host {
            Host::Ip(ip) => Some(SocketAddr::new(ip, self.port)),
            Host::Name(_) => None,
        }
    }

    /// Host part as written (IPv6 without brackets).
    pub fn host(&self) -> String {
        match &self.host {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The same host on another port (a health check's own port).
    pub fn with_port(&self, port: u16) -> Addr {
        Addr {
            host: self.host.clone(),
            port,
        }
    }
}

impl From<SocketAddr> for Addr {
    fn from(sa: SocketAddr) -> Self {
        Addr {
            host: Host::Ip(sa.ip()),
            port: sa.port(),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            Host::Ip(ip) => write!(f, "{ip}:{}", self.port),
            Host::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

impl FromStr for Addr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(sa) = s.parse::<SocketAddr>() {
            if sa.port() == 0 {
                return Err(format!("{s:?}: port must be 1-65535"));
            }
            return Ok(sa.into());
        }
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?}: expected host:port"))?;
        let port: u16 = match port.parse() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(format!("{s:?}: port must be 1-65535")),
        };
        if host.starts_with('[') || host.contains(':') {
            return Err(format!("{s:?}: invalid IPv6 address"));
        }
        if !is_dns_name(host) {
            return Err(format!(
                "{s:?}: {host:?} is not a valid host name or IP address"
            ));
        }
        Ok(Addr {
            host: Host::Name(host.to_ascii_lowercase()),
            port,
        })
    }
}

impl Serialize for Addr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// True for a syntactically valid DNS host name (letters, digits, hyphens; dot-separated
/// labels of 1-63 characters that neither start nor end with a hyphen).
pub fn is_dns_name(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    !s.is_empty() && s.len() <= MAX_DNS_NAME && s.split('.').all(is_dns_label)
}

fn is_dns_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= MAX_DNS_LABEL
        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// True for a name usable as a backend name (config `[[backends]] name`): what can
/// appear in a server name, a cookie value, a CSV cell and a log line without quoting.
pub fn is_backend_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// One web gear as the platform announces it in `update-cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GearEntry {
    /// The gear's DNS name, `<gearname>-<ns>.<domain>` (lower-cased).
    pub gear_dns: String,
    /// First DNS label of `gear_dns`: `<gearname>-<ns>`. The sticky cookie value.
    pub label: String,
    /// Where the node's port proxy forwards to the gear's web port.
    pub addr: Addr,
}

impl GearEntry {
    /// HAProxy-compatible server name, `gear-<gearname>-<ns>`.
    pub fn server_name(&self) -> String {
        format!("gear-{}", self.label)
    }
}

/// Exit code of `update-cluster` when some entries were invalid (as the old cartridge).
pub const EXIT_BAD_ENTRIES: i32 = 22;

/// A rejected `update-cluster` entry and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadEntry {
    pub entry: String,
    pub reason: String,
}

/// The outcome of parsing a whole `update-cluster` argument list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedEntries {
    pub valid: Vec<GearEntry>,
    pub invalid: Vec<BadEntry>,
}

/// Longest argument we look at; longer ones are rejected, not truncated.
const MAX_ENTRY_LEN: usize = 1024;

/// Parse one entry `<gear-dns>|<host>:<port>`.
pub fn parse_entry(raw: &str) -> Result<GearEntry, String> {
    if raw.len() > MAX_ENTRY_LEN {
        return Err(format!("entry longer than {MAX_ENTRY_LEN} bytes"));
    }
    // Legacy connection-hook form 'uuid'='dns|host:port': keep what follows the first
    // '=' and drop the quotes, as the old cartridge's script did.
    let s = match raw.split_once('=') {
        Some((_, v)) => v,
        None => raw,
    };
    let s = s.trim_matches(|c| c == '\'' || c == '"');
    let (dns, addr) = s
        .split_once('|')
        .ok_or_else(|| "expected <gear-dns>|<host>:<port>".to_string())?;
    if !is_dns_name(dns) {
        return Err(format!("{dns:?} is not a valid gear DNS name"));
    }
    let addr: Addr = addr.parse()?;
    let gear_dns = dns.trim_end_matches('.').to_ascii_lowercase();
    let label = gear_dns
        .split('.')
        .next()
        .unwrap_or_default() // split always yields at least one item
        .to_string();
    Ok(GearEntry {
        gear_dns,
        label,
        addr,
    })
}

/// Parse the arguments of `update-cluster` as the node passes them: any number of
/// words, each of which may hold several whitespace-separated entries. Invalid entries
/// are returned with a reason and never applied. A gear named twice with different
/// addresses is ambiguous: both are rejected.
pub fn parse_entries<S: AsRef<str>>(args: &[S]) -> ParsedEntries {
    let mut out = ParsedEntries::default();
    for word in args.iter().flat_map(|a| a.as_ref().split_whitespace()) {
        match parse_entry(word) {
            Ok(e) => out.valid.push(e),
            Err(reason) => out.invalid.push(BadEntry {
                entry: printable(word),
                reason,
            }),
        }
    }
    // Resolve duplicates: identical repeats collapse, conflicting ones are rejected.
    // Indexed by label: a list of tens of thousands of entries stays linear.
    let mut seen: Vec<GearEntry> = Vec::with_capacity(out.valid.len());
    let mut index: HashMap<String, usize> = HashMap::with_capacity(out.valid.len());
    let mut conflicted: Vec<usize> = Vec::new();
    let mut is_conflicted: HashSet<usize> = HashSet::new();
    for e in out.valid.drain(..) {
        match index.get(&e.label) {
            Some(&i) if seen[i].addr == e.addr && seen[i].gear_dns == e.gear_dns => {}
            Some(&i) => {
                if is_conflicted.insert(i) {
                    conflicted.push(i);
                }
            }
            None => {
                index.insert(e.label.clone(), seen.len());
                seen.push(e);
            }
        }
    }
    for &i in &conflicted {
        let e = &seen[i];
        out.invalid.push(BadEntry {
            entry: format!("{}|{}", e.gear_dns, e.addr),
            reason: format!(
                "gear {} is listed more than once with different addresses",
                e.label
            ),
        });
    }
    out.valid = seen
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !is_conflicted.contains(i))
        .map(|(_, e)| e)
        .collect();
    out
}

/// True for a balancer id (a gear uuid, or `cluster.node_id`).
pub fn is_peer_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// One balancer peer as the subscriber hook lists it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PeerSpec {
    /// The peer's gear uuid, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Its gossip address (the node's port proxy in a gear).
    pub addr: Addr,
    /// The id was learnt from gossip at this address (an address-only peer of
    /// `cluster.peers`), not listed by `set-peers`: the peer keeps its identity when it
    /// dies, and address-only counting rules still apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learned: bool,
}

/// Parse the peer list the subscriber hook receives: entries `'uuid'='uuid|host:port'`
/// (quotes optional), or plain `uuid|host:port` / `host:port`, in one word or many.
/// Returns the peers, or every problem; nothing partial.
pub fn parse_peers<S: AsRef<str>>(args: &[S]) -> Result<Vec<PeerSpec>, Vec<BadEntry>> {
    let mut peers: Vec<PeerSpec> = Vec::new();
    let mut listed: HashSet<PeerSpec> = HashSet::new();
    let mut bad = Vec::new();
    for word in args.iter().flat_map(|a| a.as_ref().split_whitespace()) {
        match parse_peer(word) {
            Ok(p) => {
                if listed.insert(p.clone()) {
                    peers.push(p);
                }
            }
            Err(reason) => bad.push(BadEntry {
                entry: printable(word),
                reason,
            }),
        }
    }
    let mut ids = HashSet::new();
    for p in &peers {
        if let Some(id) = &p.id {
            if !ids.insert(id.as_str()) {
                bad.push(BadEntry {
                    entry: id.clone(),
                    reason: "listed twice with different addresses".into(),
                });
            }
        }
    }
    if bad.is_empty() {
        Ok(peers)
    } else {
        Err(bad)
    }
}

fn parse_peer(raw: &str) -> Result<PeerSpec, String> {
    if raw.len() > MAX_ENTRY_LEN {
        return Err(format!("entry longer than {MAX_ENTRY_LEN} bytes"));
    }
    let unquote = |s: &str| s.trim_matches(|c| c == '\'' || c == '"').to_string();
    let (key, value) = match raw.split_once('=') {
        Some((k, v)) => (Some(unquote(k)), unquote(v)),
        None => (None, unquote(raw)),
    };
    let (id, addr) = match value.split_once('|') {
        Some((id, addr)) => (Some(id.to_string()), addr.to_string()),
        None => (key.clone(), value.clone()),
    };
    if let (Some(k), Some(i)) = (&key, &id) {
        if k != i {
            return Err(format!("key {k:?} and id {i:?} differ"));
        }
    }
    if let Some(i) = &id {
        if !is_peer_id(i) {
            return Err(format!("{:?} is not a valid gear id", printable(i)));
        }
    }
    Ok(PeerSpec {
        id,
        addr: addr.parse()?,
        learned: false,
    })
}

/// The gear label (`<gearname>-<ns>`) named by an entry whose address part may be
/// invalid, if its gear DNS part is valid.
pub fn entry_label(raw: &str) -> Option<String> {
    let s = raw.split_once('=').map_or(raw, |(_, v)| v);
    let s = s.trim_matches(|c| c == '\'' || c == '"');
    let dns = s.split_once('|')?.0;
    is_dns_name(dns).then(|| {
        dns.split('.')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase()
    })
}

/// Render untrusted text for an error message: control characters escaped, long input cut.
pub fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(120).flat_map(char::escape_default).collect();
    if s.chars().count() > 120 {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addr_forms() {
        assert_eq!(
            "127.0.0.1:80".parse::<Addr>().unwrap().to_string(),
            "127.0.0.1:80"
        );
        assert_eq!(
            "[::1]:8080".parse::<Addr>().unwrap().to_string(),
            "[::1]:8080"
        );
        let a: Addr = "Node1.Example.com:35561".parse().unwrap();
        assert_eq!(a.to_string(), "node1.example.com:35561");
        assert_eq!(a.socket_addr(), None);
        for bad in [
            "",
            "host",
            "host:",
            "host:0",
            "host:65536",
            "host:+80",
            ":80",
            "-bad.example:80",
            "a b:80",
            "ex$ample.com:80",
            "::1:80",
            "127.0.0.1:0",
            "host;rm -rf /:80",
        ] {
            assert!(bad.parse::<Addr>().is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn entry_names() {
        let e = parse_entry("myapp-ns.example.com|node1.example.com:35561").unwrap();
        assert_eq!(e.label, "myapp-ns");
        assert_eq!(e.server_name(), "gear-myapp-ns");
        assert_eq!(e.addr.to_string(), "node1.example.com:35561");
        let legacy = parse_entry("'5256abc'='5256abc-ns.example.com|10.0.0.1:35566'").unwrap();
        assert_eq!(legacy.label, "5256abc-ns");
        assert_eq!(legacy.addr.to_string(), "10.0.0.1:35566");
    }

    #[test]
    fn one_word_and_many_words_are_the_same() {
        let one = parse_entries(&["a-ns.x.com|127.0.0.1:9001 b-ns.x.com|127.0.0.1:9002"]);
        let many = parse_entries(&["a-ns.x.com|127.0.0.1:9001", "b-ns.x.com|127.0.0.1:9002"]);
        assert_eq!(one, many);
        assert_eq!(one.valid.len(), 2);
        assert!(one.invalid.is_empty());
    }

    #[test]
    fn bad_entries_are_reported_and_good_ones_kept() {
        let p = parse_entries(&[
            "a-ns.x.com|127.0.0.1:9001 garbage $(reboot)|1.2.3.4:80 c-ns.x.com|127.0.0.1:99999",
        ]);
        assert_eq!(p.valid.len(), 1);
        assert_eq!(p.invalid.len(), 3);
        assert!(p.invalid[0].reason.contains("expected"));
    }

    #[test]
    fn conflicting_duplicates_rejected_identical_collapsed() {
        let p = parse_entries(&["a-ns.x.com|127.0.0.1:9001 a-ns.x.com|127.0.0.1:9001"]);
        assert_eq!(p.valid.len(), 1);
        let p = parse_entries(&["a-ns.x.com|127.0.0.1:9001 a-ns.x.com|127.0.0.1:9002"]);
        assert!(p.valid.is_empty());
        assert_eq!(p.invalid.len(), 1);
    }

    #[test]
    fn peer_lists_in_the_hook_format() {
        let one =
            parse_peers(&["'5256a'='5256a|node1.example.com:40001' 'b77'='b77|10.0.0.2:40002'"])
                .unwrap();
        let many = parse_peers(&[
            "'5256a'='5256a|node1.example.com:40001'",
            "b77|10.0.0.2:40002",
        ])
        .unwrap();
        assert_eq!(one, many);
        assert_eq!(one[0].id.as_deref(), Some("5256a"));
        assert_eq!(one[1].addr.to_string(), "10.0.0.2:40002");
        assert_eq!(parse_peers(&["127.0.0.1:7001"]).unwrap()[0].id, None);
        assert!(parse_peers::<&str>(&[]).unwrap().is_empty());
        for bad in [
            "'a'='b|h:1'",
            "'a;rm'='a;rm|h:1'",
            "x|host:0",
            "x|$(reboot):80",
            "a|h:1 a|h:2",
        ] {
            assert!(parse_peers(&[bad]).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn label_of_a_bad_entry() {
        assert_eq!(
            entry_label("web1-ns.x.com|127.0.0.1:0").as_deref(),
            Some("web1-ns")
        );
        assert_eq!(entry_label("bad$dns|127.0.0.1:80"), None);
        assert_eq!(entry_label("no-pipe"), None);
    }

    #[test]
    fn huge_lists_parse_whole() {
        // A control request may be 1 MiB: ~50k entries. Duplicate detection used to be
        // quadratic (about a minute with the control-plane lock held); it is a hash set
        // now. Time is not asserted here (tests run on loaded machines).
        let words: Vec<String> = (0..50_000)
            .map(|i| format!("g{i}-ns.x.com|127.0.0.1:{}", 1 + i % 60_000))
            .collect();
        let p = parse_entries(&[words.join(" ")]);
        assert_eq!(p.valid.len(), 50_000);
        let peers: Vec<String> = (0..50_000)
            .map(|i| format!("p{i}|127.0.0.1:{}", 1 + i % 60_000))
            .collect();
        assert_eq!(parse_peers(&[peers.join(" ")]).unwrap().len(), 50_000);
        // Conflicts are still found, reported once, and both sides dropped.
        let p = parse_entries(&["a-ns.x|127.0.0.1:1 b-ns.x|127.0.0.1:2 a-ns.x|127.0.0.1:3 a-ns.x|127.0.0.1:4 b-ns.x|127.0.0.1:2"]);
        assert_eq!(p.valid.len(), 1);
        assert_eq!(p.valid[0].label, "b-ns");
        assert_eq!(p.invalid.len(), 1);
        assert!(p.invalid[0].entry.starts_with("a-ns.x|127.0.0.1:1"));
    }

    #[test]
    fn printable_escapes() {
        assert_eq!(printable("a\u{1b}[2J"), "a\\u{1b}[2J");
        assert!(printable(&"x".repeat(500)).ends_with("..."));
    }
}
