//! Services from an etcd prefix (`discovery.etcd`, `discovery.etcd_prefix`), for
//! fleets that already keep theirs there, read as APISIX and Traefik read theirs:
//!
//! | key                                   | value                                       |
//! |---------------------------------------|---------------------------------------------|
//! | `<prefix>services/<name>`             | a service: the keys of a watched file, JSON  |
//! |                                       | (or YAML)                                   |
//! | `<prefix>instances/<service>/<name>`  | an instance: `"host:port"`, or JSON          |
//! |                                       | `{"addr":…, "hosts":[…], "paths":[…]}`       |
//!
//! Instances are meant to be written on leases: when a lease expires, etcd deletes the
//! key and the instance drains here. The v3 API is spoken through etcd's JSON gateway
//! (`/v3/kv/range`, then `/v3/watch` from the next revision), over HTTP with `reqwest`:
//! no gRPC stack for two calls. Every minute, and whenever the watch ends, the prefix
//! is read whole again (a compaction, a restart of etcd, a missed event are all
//! covered). When etcd cannot be reached, the services last read keep serving.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Deserialize;
use tracing::{info, warn};

use super::sources::{registration, Registration};
use super::state::EtcdState;
use super::ServiceSet;
use crate::config::{parse_service_file, FileFormat};

/// How long one watch runs before the prefix is read whole again.
const REREAD: Duration = Duration::from_secs(60);

/// Follow the prefix on the first endpoint that answers, until `set` stops.
pub async fn follow(set: Arc<ServiceSet>, endpoints: Vec<String>, prefix: String) {
    let http = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "etcd client not available: no services from etcd");
            return;
        }
    };
    let mut backoff = Duration::from_millis(250);
    let mut n = 0usize;
    let mut reachable = true;
    loop {
        let endpoint = &endpoints[n % endpoints.len()];
        let run = follow_once(&set, &http, endpoint, &prefix);
        let result = tokio::select! {
            _ = set.stop.cancelled() => return,
            r = run => r,
        };
        match result {
            Ok(()) => backoff = Duration::from_millis(250),
            Err(e) => {
                if reachable {
                    warn!(%endpoint, error = %e, "etcd not reachable: the services last read keep serving");
                }
                reachable = false;
                n += 1;
                tokio::select! {
                    _ = set.stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        }
        reachable = true;
    }
}

/// Read the prefix, apply it, then watch it for [`REREAD`].
async fn follow_once(
    set: &ServiceSet,
    http: &reqwest::Client,
    endpoint: &str,
    prefix: &str,
) -> Result<(), String> {
    let range = serde_json::json!({
        "key": B64.encode(prefix),
        "range_end": B64.encode(prefix_end(prefix)),
    });
    let resp: RangeResponse = http
        .post(format!("{endpoint}/v3/kv/range"))
        .timeout(Duration::from_secs(5))
        .json(&range)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| format!("range answer: {e}"))?;
    let mut kvs: BTreeMap<String, String> = BTreeMap::new();
    for kv in resp.kvs {
        if let Some((k, v)) = kv.decode() {
            kvs.insert(k, v);
        }
    }
    let revision: i64 = resp.header.revision.parse().unwrap_or(0);
    set.set_etcd(parse_all(&kvs, prefix)).await;
    info!(%endpoint, keys = kvs.len(), revision, "services read from etcd");

    let watch = serde_json::json!({ "create_request": {
        "key": B64.encode(prefix),
        "range_end": B64.encode(prefix_end(prefix)),
        "start_revision": (revision + 1).to_string(),
    }});
    let mut resp = http
        .post(format!("{endpoint}/v3/watch"))
        .json(&watch)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| e.to_string())?;
    let until = tokio::time::Instant::now() + REREAD;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = tokio::time::sleep_until(until) => return Ok(()),
            c = resp.chunk() => c.map_err(|e| e.to_string())?,
        };
        let Some(chunk) = chunk else {
            return Err("the watch ended".into());
        };
        buf.extend_from_slice(&chunk);
        // Complete JSON messages off the front; a partial one waits for more bytes.
        let mut stream = serde_json::Deserializer::from_slice(&buf).into_iter::<WatchMessage>();
        let mut changed = false;
        let mut used = 0;
        while let Some(msg) = stream.next() {
            let msg = match msg {
                Ok(m) => m,
                Err(e) if e.is_eof() => break,
                Err(e) => return Err(format!("watch message: {e}")),
            };
            used = stream.byte_offset();
            let Some(result) = msg.result else { continue };
            if result.compact_revision.is_some() || result.canceled == Some(true) {
                return Err("the watch was compacted or cancelled: reading again".into());
            }
            for ev in result.events {
                let Some((key, value)) = ev.kv.decode_key_value() else {
                    continue;
                };
                if ev.kind.as_deref() == Some("DELETE") {
                    changed |= kvs.remove(&key).is_some();
                } else {
                    kvs.insert(key, value.unwrap_or_default());
                    changed = true;
                }
            }
        }
        buf.drain(..used);
        if changed {
            set.set_etcd(parse_all(&kvs, prefix)).await;
        }
    }
}

/// The end of the range of keys under `prefix` (the prefix with its last byte + 1).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The services and instances of the prefix's keys; a key that does not parse is
/// skipped with a warning naming it.
pub fn parse_all(kvs: &BTreeMap<String, String>, prefix: &str) -> EtcdState {
    let mut state = EtcdState::default();
    for (key, value) in kvs {
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        if let Some(name) = rest.strip_prefix("services/") {
            match parse_service_file(FileFormat::Yaml, value) {
                Ok(s) if s.name == name => {
                    state.services.insert(key.clone(), s);
                }
                Ok(s) => {
                    warn!(%key, "etcd service refused: it names service {:?}, its key {name:?}", s.name)
                }
                Err(e) => warn!(%key, "etcd service refused: {e}"),
            }
        } else if let Some(inst) = rest.strip_prefix("instances/") {
            match parse_instance(inst, value) {
                Ok(r) => {
                    state.instances.insert(key.clone(), r);
                }
                Err(why) => warn!(%key, "etcd instance refused: {why}"),
            }
        }
    }
    state
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Instance {
    addr: String,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    compatible: Vec<String>,
}

/// `<service>/<name>` and its value.
fn parse_instance(key: &str, value: &str) -> Result<Registration, String> {
    let (service, backend) = key
        .split_once('/')
        .ok_or("the key must be instances/<service>/<name>")?;
    let v = value.trim();
    let inst = if v.starts_with('{') {
        serde_json::from_str::<Instance>(v).map_err(|e| format!("not an instance: {e}"))?
    } else {
        Instance {
            addr: v.trim_matches('"').to_string(),
            hosts: vec![],
            paths: vec![],
            version: None,
            compatible: vec![],
        }
    };
    registration(
        service.to_string(),
        backend.to_string(),
        &inst.addr,
        inst.hosts,
        inst.paths,
        Duration::from_secs(60),
    )
    .and_then(|r| r.with_version(inst.version, inst.compatible))
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    revision: String,
}

#[derive(Deserialize)]
struct RangeResponse {
    header: Header,
    #[serde(default)]
    kvs: Vec<Kv>,
}

#[derive(Deserialize)]
struct Kv {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

impl Kv {
    fn decode(&self) -> Option<(String, String)> {
        let (k, v) = self.decode_key_value()?;
        Some((k, v.unwrap_or_default()))
    }

    fn decode_key_value(&self) -> Option<(String, Option<String>)> {
        let key = String::from_utf8(B64.decode(&self.key).ok()?).ok()?;
        let value = match &self.value {
            None => None,
            Some(v) => Some(String::from_utf8(B64.decode(v).ok()?).ok()?),
        };
        Some((key, value))
    }
}

#[derive(Deserialize)]
struct WatchMessage {
    result: Option<WatchResult>,
}

#[derive(Deserialize)]
struct WatchResult {
    #[serde(default)]
    events: Vec<Event>,
    #[serde(default)]
    compact_revision: Option<String>,
    #[serde(default)]
    canceled: Option<bool>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    kv: Kv,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_services_and_instances() {
        let kvs = BTreeMap::from([
            (
                "/gl/services/api".to_string(),
                r#"{"name":"api","hosts":["api.example.com"],"paths":["/v1"]}"#.to_string(),
            ),
            (
                "/gl/services/bad".to_string(),
                r#"{"name":"other"}"#.to_string(),
            ),
            (
                "/gl/instances/api/i1".to_string(),
                "10.0.0.1:80".to_string(),
            ),
            (
                "/gl/instances/api/i2".to_string(),
                r#"{"addr":"10.0.0.2:80","hosts":["api.example.com"]}"#.to_string(),
            ),
            ("/gl/instances/api/i3".to_string(), "nowhere".to_string()),
            ("/gl/other".to_string(), "x".to_string()),
        ]);
        let st = parse_all(&kvs, "/gl/");
        assert_eq!(st.services.len(), 1);
        assert_eq!(st.services["/gl/services/api"].paths, ["/v1"]);
        let names: Vec<&str> = st.instances.values().map(|r| r.backend.as_str()).collect();
        assert_eq!(names, ["i1", "i2"]);
        assert_eq!(
            st.instances["/gl/instances/api/i2"].hosts,
            ["api.example.com"]
        );
        assert_eq!(prefix_end("/gl/"), b"/gl0");
    }
}
