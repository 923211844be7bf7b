//! Registration over HTTP, for instances on other hosts: `POST /services/register`
//! and `POST /services/deregister` on the status listener, with a JSON body and
//! `Authorization: Bearer <discovery.token>`. Without the token (or with another) the
//! answer is 401 and nothing changes; without `discovery.token` the endpoint is off
//! (404).
//!
//! ```text
//! POST /services/register   {"service":"api","backend":"i1","addr":"10.0.0.5:8080",
//!                            "hosts":["api.example.com"],"paths":["/v1"],"ttl":"30s"}
//! POST /services/deregister {"service":"api","backend":"i1"}
//! ```

use serde::Deserialize;

use super::sources::registration;
use super::ServiceSet;
use crate::config::parse_duration;

/// The most a request body may hold.
pub const MAX_BODY: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Register {
    service: String,
    backend: String,
    addr: String,
    #[serde(default)]
    hosts: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    ttl: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    compatible: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Deregister {
    service: String,
    backend: String,
}

/// Whether `path` is this endpoint's.
pub fn is_api_path(path: &str) -> bool {
    matches!(path, "/services/register" | "/services/deregister")
}

/// The answer (status, text) to one request of the endpoint.
pub async fn handle(
    set: &ServiceSet,
    path: &str,
    authorization: Option<&[u8]>,
    body: &[u8],
) -> (u16, String) {
    let cfg = set.cfg.load_full();
    let Some(token) = cfg.discovery.token.as_deref() else {
        return (
            404,
            "registration over HTTP is off (set discovery.token)\n".into(),
        );
    };
    let given = authorization.and_then(|a| a.strip_prefix(b"Bearer "));
    if !given.is_some_and(|g| same(g, token.as_bytes())) {
        return (
            401,
            "a bearer token is required (Authorization: Bearer <discovery.token>)\n".into(),
        );
    }
    match path {
        "/services/register" => {
            let r: Register = match serde_json::from_slice(body) {
                Ok(r) => r,
                Err(e) => return (400, format!("invalid registration: {e}\n")),
            };
            let ttl = match r.ttl.as_deref().map(parse_duration) {
                None => cfg.discovery.ttl,
                Some(Ok(d)) => d,
                Some(Err(e)) => return (400, format!("ttl: {e}\n")),
            };
            let reg = match registration(r.service, r.backend, &r.addr, r.hosts, r.paths, ttl)
                .and_then(|reg| reg.with_version(r.version, r.compatible))
            {
                Ok(reg) => reg,
                Err(why) => return (400, format!("{why}\n")),
            };
            match set.register(reg, ttl).await {
                Ok(m) => (200, format!("{m}\n")),
                Err(why) => (409, format!("{why}\n")),
            }
        }
        _ => {
            let d: Deregister = match serde_json::from_slice(body) {
                Ok(d) => d,
                Err(e) => return (400, format!("invalid deregistration: {e}\n")),
            };
            match set.deregister(&d.service, &d.backend).await {
                Ok(m) => (200, format!("{m}\n")),
                Err(why) => (404, format!("{why}\n")),
            }
        }
    }
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
