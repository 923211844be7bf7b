//! A backend's host name, resolved once per `proxy.dns_ttl` for its connections and
//! its health checks alike.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::io::coarse_ms;
use gearlb_core::gear::Addr;

/// A backend's host name, resolved: its addresses and when they were looked up.
#[derive(Debug)]
struct Resolved {
    addrs: Vec<std::net::SocketAddr>,
    at_ms: u64,
}

/// Longest a looked-up address list is used, until `proxy.dns_ttl` says otherwise.
const DEFAULT_DNS_TTL: Duration = Duration::from_secs(10);

/// Resolves one backend's host name, for its connections and its health checks alike:
/// once, then again in the background once the answer is older than `proxy.dns_ttl`
/// (HAProxy's resolvers `hold valid`), and at once when connecting to every address
/// failed (the gear may have moved). Each lookup is `getaddrinfo` on the blocking pool:
/// once per TTL per backend, not once per connection or health check.
#[derive(Debug)]
pub struct Resolver {
    cached: arc_swap::ArcSwapOption<Resolved>,
    /// A background refresh is under way.
    refreshing: AtomicBool,
    ttl_ms: AtomicU64,
    lookups: AtomicU64,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver {
            cached: arc_swap::ArcSwapOption::empty(),
            refreshing: AtomicBool::new(false),
            ttl_ms: AtomicU64::new(DEFAULT_DNS_TTL.as_millis() as u64),
            lookups: AtomicU64::new(0),
        }
    }
}

impl Resolver {
    /// How long an answer is used (`proxy.dns_ttl`; the proxy sets it as it connects).
    pub fn set_ttl(&self, ttl: Duration) {
        self.ttl_ms.store(ttl.as_millis() as u64, Ordering::Relaxed);
    }

    /// Lookups made so far.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// The addresses of `host`: the cached answer (refreshed in the background when it
    /// is older than the TTL), or a lookup now when there is none.
    async fn addrs(self: &Arc<Self>, host: &str, port: u16) -> io::Result<Arc<Resolved>> {
        let Some(r) = self.cached.load_full() else {
            return self.lookup(host, port).await;
        };
        let old = coarse_ms().saturating_sub(r.at_ms) >= self.ttl_ms.load(Ordering::Relaxed);
        if old && !self.refreshing.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            let host = host.to_string();
            tokio::spawn(async move {
                if let Err(e) = me.lookup(&host, port).await {
                    tracing::debug!(%host, error = %e, "backend name lookup failed; the last answer is kept");
                }
                me.refreshing.store(false, Ordering::Release);
            });
        }
        Ok(r)
    }

    async fn lookup(&self, host: &str, port: u16) -> io::Result<Arc<Resolved>> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let addrs: Vec<std::net::SocketAddr> =
            tokio::net::lookup_host((host, port)).await?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{host}: no address"),
            ));
        }
        let r = Arc::new(Resolved {
            addrs,
            at_ms: coarse_ms(),
        });
        self.cached.store(Some(r.clone()));
        Ok(r)
    }

    /// A TCP connection to `addr`: an IP address as is; a name through the cache, each
    /// of its addresses in turn, and, when none answers, looked up again at once and
    /// tried again if the answer changed.
    pub async fn dial(self: &Arc<Self>, addr: &Addr) -> io::Result<TcpStream> {
        if let Some(sa) = addr.socket_addr() {
            return TcpStream::connect(sa).await;
        }
        let (host, port) = (addr.host(), addr.port());
        let known = self.addrs(&host, port).await?;
        let first = connect_any(&known.addrs).await;
        if first.is_ok() {
            return first;
        }
        match self.lookup(&host, port).await {
            Ok(fresh) if fresh.addrs != known.addrs => connect_any(&fresh.addrs).await,
            _ => first,
        }
    }
}

/// Connect to the first of `addrs` that accepts (the last error otherwise).
async fn connect_any(addrs: &[std::net::SocketAddr]) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}
