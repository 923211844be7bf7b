//! Routers of one cluster and their tables. Each consumes its own subscription; by
//! gossip (key `spi`) each publishes what its table routes (a digest), how many events
//! it took in, and where its status listener is; each compares its table with its live
//! peers' and says when one differs for longer than events take to arrive
//! ([`share`]).
//!
//! Routers share health the same way: each publishes the backends of its applications
//! its checks found down (keys `sd:<bb>`, bucketed as the gears' `hd:`), and a backend
//! a peer newly reports down is taken out here at once (one passive ejection per
//! report: this router's own checks bring it back if it answers here, and it is not
//! taken out again until a peer reports it anew), unless it is the last one of its
//! service up here (a router cut off from the gears finds them all down).
//!
//! A router that starts with no table (a new router, a lost state directory) takes a
//! live peer's ([`bootstrap`]): `GET /routing-spi/table` on that peer's status listener
//! ([`serve_table`]), authenticated with the cluster's secret (an HMAC of the time and
//! a fresh nonce; a request more than a minute off is refused) and answered sealed
//! (ChaCha20-Poly1305 under a key derived from the secret, bound to the request's
//! nonce): the table holds private keys. Without `cluster.secret` no table is given or
//! taken.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use gearlb_core::spi::Table;

use super::parts::Spi;
use crate::cluster::Cluster;
use crate::report::spi::PeerTable;

/// Where a router gives its table.
pub const TABLE_PATH: &str = "/routing-spi/table";
/// The gossip key.
pub const KEY: &str = "spi";
/// A table differing from a peer's longer than this is said to (events reach routers
/// within a second of each other).
const DIFFERS_AFTER: Duration = Duration::from_secs(10);
/// How far a request's time may be from ours.
const SKEW_S: u64 = 60;

/// What a router publishes of its table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Shared {
    /// The digest of what it routes.
    d: String,
    /// Events taken in.
    n: u64,
    /// Its status listener (where its table is given).
    s: String,
}

fn keys(secret: &str) -> ([u8; 32], [u8; 32]) {
    let hk = hkdf::Hkdf::<Sha256>::new(Some(b"gearlb routing table"), secret.as_bytes());
    let (mut auth, mut seal) = ([0u8; 32], [0u8; 32]);
    hk.expand(b"auth", &mut auth)
        .expect("32 bytes is a valid length");
    hk.expand(b"seal", &mut seal)
        .expect("32 bytes is a valid length");
    (auth, seal)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn mac(auth: &[u8; 32], secs: u64, nonce: &str) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(auth).expect("any key length");
    m.update(format!("table|{secs}|{nonce}").as_bytes());
    m
}

/// The `Authorization` value of a table request now.
fn authorization(secret: &str) -> (String, String) {
    let (auth, _) = keys(secret);
    let nonce = hex(&fastrand::u128(..).to_be_bytes());
    let secs = crate::time::unix_secs();
    let tag = hex(&mac(&auth, secs, &nonce).finalize().into_bytes());
    (format!("Gearlb-HMAC {secs}.{nonce}.{tag}"), nonce)
}

/// The nonce of a valid `Authorization` value, else why not.
fn check(secret: &str, value: &[u8]) -> Result<String, &'static str> {
    let v = std::str::from_utf8(value).map_err(|_| "not text")?;
    let v = v.strip_prefix("Gearlb-HMAC ").ok_or("not Gearlb-HMAC")?;
    let mut parts = v.split('.');
    let (Some(secs), Some(nonce), Some(tag), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed");
    };
    let secs: u64 = secs.parse().map_err(|_| "malformed time")?;
    if crate::time::unix_secs().abs_diff(secs) > SKEW_S {
        return Err("time too far from this router's");
    }
    if nonce.len() != 32 || unhex(nonce).is_none() {
        return Err("malformed nonce");
    }
    let tag = unhex(tag).ok_or("malformed tag")?;
    let (auth, _) = keys(secret);
    mac(&auth, secs, nonce)
        .verify_slice(&tag)
        .map_err(|_| "wrong secret")?;
    Ok(nonce.to_string())
}

fn seal(secret: &str, nonce_hex: &str, plain: &[u8]) -> Vec<u8> {
    let (_, key) = keys(secret);
    let cipher = ChaCha20Poly1305::new(Key::from_slice(&key));
    let n: [u8; 12] = std::array::from_fn(|_| fastrand::u8(..));
    let mut out = n.to_vec();
    let sealed = cipher
        .encrypt(
            Nonce::from_slice(&n),
            Payload {
                msg: plain,
                aad: nonce_hex.as_bytes(),
            },
        )
        .expect("sealing a buffer in memory does not fail");
    out.extend_from_slice(&sealed);
    out
}

fn open(secret: &str, nonce_hex: &str, sealed: &[u8]) -> Result<Vec<u8>, String> {
    if sealed.len() < 12 + 16 {
        return Err("answer too short".into());
    }
    let (_, key) = keys(secret);
    let cipher = ChaCha20Poly1305::new(Key::from_slice(&key));
    cipher
        .decrypt(
            Nonce::from_slice(&sealed[..12]),
            Payload {
                msg: &sealed[12..],
                aad: nonce_hex.as_bytes(),
            },
        )
        .map_err(|_| "the answer does not open with this cluster's secret".to_string())
}

/// Answer a table request: `(status, body)`.
pub async fn serve_table(
    spi: &Spi,
    secret: Option<&str>,
    authorization: Option<&[u8]>,
) -> (u16, Vec<u8>) {
    let Some(secret) = secret else {
        return (404, b"no table is given without cluster.secret\n".to_vec());
    };
    let nonce = match authorization.map(|a| check(secret, a)) {
        Some(Ok(n)) => n,
        Some(Err(why)) => {
            warn!(reason = why, "routing table request refused");
            return (401, format!("refused: {why}\n").into_bytes());
        }
        None => return (401, b"refused: no authorization\n".to_vec()),
    };
    let table = spi.table.lock().await.clone();
    match serde_json::to_vec(&table) {
        Ok(plain) => {
            info!(
                applications = table.apps.len(),
                "routing table given to a peer router"
            );
            (200, seal(secret, &nonce, &plain))
        }
        Err(_) => (500, b"table not encoded\n".to_vec()),
    }
}

/// Take the table of the router whose status listener is `addr`.
async fn fetch(addr: &str, secret: &str) -> Result<Table, String> {
    let (auth, nonce) = authorization(secret);
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client
        .get(format!("http://{addr}{TABLE_PATH}"))
        .header("authorization", auth)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
        ));
    }
    let plain = open(secret, &nonce, &body)?;
    serde_json::from_slice(&plain).map_err(|e| format!("not a routing table: {e}"))
}

/// The live peers' shared keys: (peer id, what it shares).
async fn peers(cluster: &Cluster) -> Vec<(String, Shared)> {
    cluster
        .peer_keys(KEY)
        .await
        .into_iter()
        .filter(|(_, k, _)| k == KEY)
        .filter_map(|(id, _, v)| Some((id, serde_json::from_str(&v).ok()?)))
        .collect()
}

/// Whether a peer's status listener as it publishes it (`theirs`) is another router's
/// that this one can reach: not this router's own (`ours`, as it publishes it), and
/// not a loopback address when this router gossips on another (that peer is on
/// another host, whose loopback here is this host's). Taking "a peer's" table from
/// one's own listener would start a new router on its own empty table.
fn reachable(theirs: &str, ours: &str, gossip: std::net::SocketAddr) -> bool {
    if theirs == ours {
        return false;
    }
    match theirs.parse::<std::net::SocketAddr>() {
        Ok(a) => !a.ip().is_loopback() || gossip.ip().is_loopback(),
        Err(_) => true,
    }
}

/// A router with no table takes a live peer's: waits up to `within` for a peer that
/// has one (the one with the most events first), takes it, serves and saves it. True
/// when it did. `status`: this router's status listener as it publishes it.
pub async fn bootstrap(
    spi: &Spi,
    cluster: &Cluster,
    secret: Option<&str>,
    status: &str,
    within: Duration,
) -> bool {
    let Some(secret) = secret else {
        info!("no routing table and no cluster.secret to take a peer's with: starting empty");
        return false;
    };
    let deadline = tokio::time::Instant::now() + within;
    let mut tried = std::collections::HashSet::new();
    loop {
        let mut candidates = peers(cluster).await;
        candidates.retain(|(_, s)| s.n > 0);
        candidates.sort_by(|a, b| b.1.n.cmp(&a.1.n).then(a.0.cmp(&b.0)));
        for (id, shared) in candidates {
            if !tried.insert((id.clone(), shared.n)) {
                continue;
            }
            if !reachable(&shared.s, status, cluster.advertise()) {
                warn!(peer = %id, at = %shared.s, "peer router's table not taken: its status listener cannot be reached from here (listen.status on loopback?); set listen.status to an address the routers reach");
                continue;
            }
            match fetch(&shared.s, secret).await {
                Ok(mut t) => {
                    t.current_ms = t.current_ms.max(crate::time::unix_ms());
                    let mut mine = spi.table.lock().await;
                    *mine = t;
                    if let Err(e) = spi.write_snapshot(&mine).await {
                        warn!(error = %e, "routing table taken from a peer not saved");
                    }
                    spi.publish(&mine).await;
                    spi.source.store(Arc::new(format!("peer {id}")));
                    info!(peer = %id, applications = mine.apps.len(), events = mine.applied, "routing table taken from a peer router");
                    return true;
                }
                Err(e) => {
                    warn!(peer = %id, at = %shared.s, error = %e, "peer router's table not taken")
                }
            }
        }
        if tokio::time::Instant::now() >= deadline || spi.stop.is_cancelled() {
            info!(waited = ?within, "no peer router gave a routing table: starting empty");
            return false;
        }
        tokio::select! {
            _ = spi.stop.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// Publish this router's table summary and compare it with the live peers' until
/// `stop`.
pub async fn share(spi: Arc<Spi>, cluster: Arc<Cluster>, status: String, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published: Option<Shared> = None;
    let mut down_published: std::collections::BTreeMap<String, String> = Default::default();
    // What peers reported down last round: `(peer, service/backend)`.
    let mut peer_down: std::collections::BTreeSet<(String, String)> = Default::default();
    // Since when each peer's table differs, and whether that was said.
    let mut differs: std::collections::HashMap<String, (tokio::time::Instant, bool)> =
        Default::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mine = Shared {
            d: spi.digest.load().to_string(),
            n: spi.applied.load(Ordering::Relaxed),
            s: status.clone(),
        };
        if published.as_ref() != Some(&mine) {
            if let Ok(v) = serde_json::to_string(&mine) {
                cluster.publish(KEY, v).await;
            }
            published = Some(mine.clone());
        }
        let now = tokio::time::Instant::now();
        let list = peers(&cluster).await;
        let mut seen = Vec::new();
        for (id, s) in &list {
            let agrees = s.d == mine.d;
            seen.push(PeerTable {
                id: id.clone(),
                digest: s.d.clone(),
                applied: s.n,
                agrees,
            });
            if agrees {
                if let Some((_, true)) = differs.remove(id) {
                    info!(peer = %id, digest = %mine.d, "routing table agrees with the peer router's again");
                }
                continue;
            }
            let e = differs.entry(id.clone()).or_insert((now, false));
            if !e.1 && now.duration_since(e.0) >= DIFFERS_AFTER {
                e.1 = true;
                warn!(peer = %id, mine = %mine.d, theirs = %s.d, my_events = mine.n, their_events = s.n, "routing table differs from the peer router's (missed events on one side? reconciliation with the broker's REST API repairs it)");
            }
        }
        differs.retain(|id, _| list.iter().any(|(p, _)| p == id));
        spi.peers.store(Arc::new(seen));
        share_down(&spi, &cluster, &mut down_published, &mut peer_down).await;
    }
}

/// Publish the routed backends this router found down; eject here those a peer newly
/// reports down.
async fn share_down(
    spi: &Spi,
    cluster: &Cluster,
    published: &mut std::collections::BTreeMap<String, String>,
    last: &mut std::collections::BTreeSet<(String, String)>,
) {
    use crate::cluster::keys::{buckets, SPI_DOWN_PREFIX};
    let mut down = Vec::new();
    for v in spi.services.views() {
        if !matches!(v.origin, crate::services::sources::Origin::Spi(_)) {
            continue;
        }
        for (e, _) in v.router.snapshot().iter().filter(|(e, _)| !e.up) {
            down.push(format!("{}/{}", v.name, e.backend.spec.name));
        }
    }
    let mut keys = buckets(SPI_DOWN_PREFIX, down.iter().map(String::as_str));
    // A bucket that empties says so (`[]`), as `hd:` does.
    for k in published.keys() {
        keys.entry(k.clone()).or_insert_with(|| "[]".into());
    }
    for (k, v) in &keys {
        if published.get(k) != Some(v) {
            cluster.publish(k, v.clone()).await;
        }
    }
    *published = keys;
    let mut now = std::collections::BTreeSet::new();
    for (peer, _, value) in cluster.peer_keys(SPI_DOWN_PREFIX).await {
        for label in crate::cluster::keys::parse_down(&value) {
            now.insert((peer.clone(), label));
        }
    }
    // A peer's word never takes out a service's last backend up here: a peer that lost
    // its own link finds every gear down, and believing it would turn its trouble into
    // an outage here. This router's own checks take that one out if it is down.
    let mut up_left: std::collections::HashMap<String, usize> = Default::default();
    for (peer, label) in now.difference(last) {
        let Some((service, backend)) = label.split_once('/') else {
            continue;
        };
        let Some(router) = spi.services.router_of(service) else {
            continue;
        };
        let snapshot = router.snapshot();
        let here_up = snapshot
            .iter()
            .any(|(e, _)| e.backend.spec.name == backend && e.up);
        if !here_up {
            continue;
        }
        let left = up_left
            .entry(service.to_string())
            .or_insert_with(|| snapshot.iter().filter(|(e, _)| e.up).count());
        if *left <= 1 {
            info!(%peer, %service, %backend, "a peer router found this backend down, but it is the last one up here: left to this router's checks");
            continue;
        }
        if spi.services.eject(service, backend) {
            *left -= 1;
            info!(%peer, %service, %backend, "a peer router found this backend down: taken out until its checks pass here");
        }
    }
    *last = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_authenticated_and_its_answer_sealed_to_it() {
        let (auth, nonce) = authorization("s3cret-of-the-cluster");
        assert_eq!(
            check("s3cret-of-the-cluster", auth.as_bytes()).unwrap(),
            nonce
        );
        assert_eq!(
            check("another-secret", auth.as_bytes()).unwrap_err(),
            "wrong secret"
        );
        let old = format!("Gearlb-HMAC {}.{nonce}.00", crate::time::unix_secs() - 3600);
        assert!(check("s3cret-of-the-cluster", old.as_bytes()).is_err());
        for bad in ["", "Bearer x", "Gearlb-HMAC 1.2", "Gearlb-HMAC x.y.z"] {
            assert!(check("s", bad.as_bytes()).is_err(), "{bad}");
        }
        let sealed = seal("s3cret-of-the-cluster", &nonce, b"the table");
        assert!(!sealed.windows(9).any(|w| w == b"the table"));
        assert_eq!(
            open("s3cret-of-the-cluster", &nonce, &sealed).unwrap(),
            b"the table"
        );
        // Another request's answer, or another secret, does not open.
        assert!(open("s3cret-of-the-cluster", "0".repeat(32).as_str(), &sealed).is_err());
        assert!(open("another-secret", &nonce, &sealed).is_err());
    }

    #[test]
    fn a_table_is_taken_only_from_a_listener_of_another_router_that_can_be_reached() {
        let lan: std::net::SocketAddr = "192.0.2.11:7001".parse().unwrap();
        let local: std::net::SocketAddr = "127.0.0.1:7001".parse().unwrap();
        // Two hosts, each router's status on its loopback: "the peer's" is one's own.
        assert!(!reachable("127.0.0.1:8081", "127.0.0.1:8081", lan));
        assert!(!reachable("127.0.0.1:9091", "127.0.0.1:8081", lan));
        assert!(!reachable("[::1]:8081", "192.0.2.11:8081", lan));
        assert!(reachable("192.0.2.12:8081", "192.0.2.11:8081", lan));
        // Routers of one host (tests), on loopback ports of their own.
        assert!(reachable("127.0.0.1:9091", "127.0.0.1:8081", local));
        assert!(!reachable("127.0.0.1:8081", "127.0.0.1:8081", local));
    }
}
