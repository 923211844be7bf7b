//! TCP mode: a client connection forwarded to a backend as bytes, as HAProxy's `mode
//! tcp` does (TLS passed through to the gears, which hold the certificates).
//!
//! Owns one TCP connection's way, in order:
//! 1. From a trusted front (`[tcp] accept_proxy`), its PROXY header (v1 or v2), read
//!    whole within `inspect_timeout` before anything else; the client's address is
//!    then the header's. Anything else from such a front is closed.
//! 2. Where the balancer's own protocol shares the port (gossip in a gear), the first
//!    byte decides: a TLS handshake record (0x16) is forwarded, anything else goes to
//!    the HTTP parser, which answers only that protocol (a gear speaks TLS here).
//! 3. Where the listener has several services, the ClientHello is read (bounded in
//!    size and `inspect_timeout`) and its server name routes the connection, as
//!    HAProxy's `req.ssl_sni`; a hello with no known name goes to the service claiming
//!    every host, or is closed (`[tcp] unknown_sni`). The bytes read are replayed
//!    untouched: nothing is ever answered to the client.
//! 4. A backend: the one with fewest connections, or by the client's address
//!    (`[tcp] balance = "source"`, the same on every balancer); one that cannot be
//!    reached within `timeouts.connect` is replaced by another, up to `proxy.retries`,
//!    and counted toward its passive ejection. A backend with `max_connections` is
//!    waited for in its queue.
//! 5. The relay ([`relay`]): the PROXY header first to a backend that wants one, the
//!    bytes read so far, then both ways until either side closes, no byte moves for
//!    `timeouts.tunnel`, the balancer stops, or the drain deadline cuts the backend's
//!    connections.
//!
//! A connection is one session from accept to close (FRONTEND `scur`, a
//! `max_connections` permit), and once connected one session on its backend (`scur`,
//! `stot`, what `leastconn` and the drain see) and one tunnel (the scaler's load).

mod copy;
mod relay;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use gearlb_core::config::{Balance, UnknownSni};
use gearlb_core::routing::{BackendId, SendProxy};
use gearlb_core::wire::client_hello::{self, Hello};
use gearlb_core::wire::proxy_protocol::{self, Parsed, Version};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::dispatch::take_slot;
use crate::downstream::conn::serve_connection;
use crate::health::EjectSender;
use crate::router::{Router, Target};
use crate::session::Session;
use crate::shared::{InFlight, ProxyCtx, Settings};

/// Serve one accepted connection of a TCP listener until it closes.
pub(crate) async fn serve(
    ctx: Arc<ProxyCtx>,
    session: Session,
    mut stream: TcpStream,
    peer: SocketAddr,
    local_port: u16,
    shutdown: CancellationToken,
) {
    let settings = ctx.settings.load_full();
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + settings.tcp.inspect_timeout;
    let mut buf = Vec::new();
    let mut client = peer;
    // The front's address, from a trusted PROXY header; else asked of the socket, only
    // when a backend wants a PROXY header.
    let mut front = None;
    if settings
        .tcp
        .accept_proxy
        .iter()
        .any(|c| c.contains(peer.ip()))
    {
        match read_proxy_header(&mut stream, &mut buf, deadline).await {
            Ok(Some((src, dst))) => (client, front) = (src, Some(dst)),
            Ok(None) => {}
            Err(why) => {
                debug!(%peer, why, "PROXY header refused: connection closed");
                return;
            }
        }
    }
    if ctx.endpoint.is_some() && buf.is_empty() {
        match first_byte(&stream, deadline).await {
            // Past max_connections, only a peer's gossip is let in.
            Some(b) if client_hello::starts_tls(b) && session.reserved => return,
            Some(b) if client_hello::starts_tls(b) => {}
            Some(_) => {
                return serve_connection(&ctx, session, stream, peer, local_port, shutdown).await
            }
            None => return,
        }
    }
    let services = ctx.services.load_full();
    let (router, ejections, settings, sni) = match &services {
        None => (ctx.router.clone(), ctx.ejections.clone(), settings, None),
        Some(services) => {
            let sni = read_server_name(&mut stream, &mut buf, deadline).await;
            let default = settings.tcp.unknown_sni == UnknownSni::Default;
            match services.lookup_sni(sni.as_deref(), default) {
                Some(s) => (
                    s.router.clone(),
                    s.ejections.clone(),
                    s.settings.clone(),
                    sni,
                ),
                None => {
                    debug!(%peer, server_name = ?sni, "no service for this server name: closed");
                    ctx.stats.no_backend.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    };
    let Some((target, server)) = connect(&ctx, &router, &ejections, &settings, client.ip()).await
    else {
        ctx.stats.no_backend.fetch_add(1, Ordering::Relaxed);
        debug!(%peer, "no backend could take the connection: closed");
        return;
    };
    if let Some(slots) = &target.slots {
        if !take_slot(slots, &target, settings.queue_timeout).await {
            debug!(%peer, backend = %target.name(), "queue timeout: closed");
            return;
        }
    }
    let flight = InFlight::start(target);
    if let Some(v) = flight.backend().spec.send_proxy {
        let version = match v {
            SendProxy::V1 => Version::V1,
            SendProxy::V2 => Version::V2,
        };
        let front = front.unwrap_or_else(|| {
            stream
                .local_addr()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], local_port)))
        });
        let mut header = proxy_protocol::encode(version, client, front, sni.as_deref());
        header.extend_from_slice(&buf);
        buf = header;
    }
    relay::run(
        &ctx,
        session,
        stream,
        server,
        buf,
        flight,
        settings.timeouts.tunnel,
    )
    .await;
}

/// A backend, connected: the least busy (or the client address's), another one for
/// each that cannot be reached, up to `retries`.
async fn connect(
    ctx: &ProxyCtx,
    router: &Router,
    ejections: &EjectSender,
    settings: &Settings,
    client: IpAddr,
) -> Option<(Arc<Target>, TcpStream)> {
    // The client's address as bytes (an IPv4-mapped address as IPv4), on the stack.
    let (v4, v6);
    let key: &[u8] = match client {
        IpAddr::V4(a) => {
            v4 = a.octets();
            &v4
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(m) => {
                v4 = m.octets();
                &v4
            }
            None => {
                v6 = a.octets();
                &v6
            }
        },
    };
    let mut tried: Vec<Arc<Target>> = Vec::new();
    loop {
        let target = {
            let snap = router.load();
            match settings.tcp.balance {
                Balance::LeastConn => snap.select_excluding(&tried).cloned(),
                Balance::Source => {
                    let ids: Vec<BackendId> = tried.iter().map(|t| t.backend.id).collect();
                    snap.select_by_key(key, &ids)
                        .map(|i| snap.targets()[i].clone())
                }
            }
        }?;
        let dial = target.pool.resolver().dial(&target.spec.addr);
        match tokio::time::timeout(settings.timeouts.connect, dial).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                target
                    .stats
                    .connections_opened
                    .fetch_add(1, Ordering::Relaxed);
                ctx.passive_success(&target);
                return Some((target, s));
            }
            r => {
                debug!(backend = %target.name(), error = ?r.ok().and_then(|r| r.err()), "connect failed");
                target.stats.connect_errors.fetch_add(1, Ordering::Relaxed);
                ctx.passive_failure(ejections, &target, settings.eject_after);
                if tried.len() >= settings.retries as usize {
                    return None;
                }
                target.stats.redispatches.fetch_add(1, Ordering::Relaxed);
                tried.push(target);
            }
        }
    }
}

/// Read into `buf` until `deadline`: `Ok(false)` at the end of the stream or the
/// deadline.
async fn read_more(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
) -> bool {
    use bytes::BufMut;
    let room = max.saturating_sub(buf.len()).clamp(1, 16 * 1024);
    buf.reserve(room);
    // Into the spare capacity, never zeroed, at most `room`.
    let mut limited = (&mut *buf).limit(room);
    matches!(
        tokio::time::timeout_at(deadline, stream.read_buf(&mut limited)).await,
        Ok(Ok(n)) if n > 0
    )
}

/// A trusted front's PROXY header: the client's and the front's addresses (`None`:
/// a `LOCAL` or `UNKNOWN` header, the connection's own stand). What follows it stays
/// in `buf`.
async fn read_proxy_header(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<Option<(SocketAddr, SocketAddr)>, &'static str> {
    loop {
        match proxy_protocol::parse(buf) {
            Parsed::Complete { header, len } => {
                buf.drain(..len);
                return Ok(header.addresses);
            }
            Parsed::Invalid(why) => return Err(why),
            Parsed::Incomplete => {
                if !read_more(stream, buf, proxy_protocol::MAX_HEADER, deadline).await {
                    return Err("no complete PROXY header in time");
                }
            }
        }
    }
}

/// The first byte the client sends, without taking it (`None`: closed or silent
/// until `deadline`).
async fn first_byte(stream: &TcpStream, deadline: Instant) -> Option<u8> {
    let mut one = [0u8; 1];
    match tokio::time::timeout_at(deadline, stream.peek(&mut one)).await {
        Ok(Ok(1)) => Some(one[0]),
        _ => None,
    }
}

/// The ClientHello's server name, read into `buf` (which keeps every byte for the
/// backend). `None`: not a hello, no name, or no complete hello by `deadline`.
async fn read_server_name(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Option<String> {
    loop {
        match client_hello::parse(buf) {
            Hello::Complete { sni } => return sni,
            Hello::NotHello(why) => {
                debug!(why, "not a TLS ClientHello");
                return None;
            }
            Hello::Incomplete => {
                if !read_more(stream, buf, client_hello::MAX_HELLO, deadline).await {
                    return None;
                }
            }
        }
    }
}
