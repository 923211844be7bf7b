//! The checks of TCP backends: HAProxy's `ssl-hello-chk` ([`tls_hello`]: the probe of
//! `gearlb_core::wire::hello_check`, a TLS record back is up) and a plain connect
//! ([`connect`]). Each opens a new connection (nothing is kept between checks) and
//! sends a PROXY v2 `LOCAL` header first to a backend that wants the protocol, as
//! HAProxy's checks of a `send-proxy` server do. Results read as HAProxy's
//! `check_status`: `L6OK`, `L6RSP`, `L6TOUT`, `L4OK`, `L4CON`.

use std::time::Duration;

use gearlb_core::routing::CheckReport;
use gearlb_core::wire::hello_check::{probe, verdict, Verdict};
use gearlb_core::wire::proxy_protocol;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::router::Target;
use gearlb_core::config::TcpCheck;
use gearlb_core::time::unix_secs;

/// One check of a TCP backend, within `timeout`.
pub(super) async fn check(
    kind: TcpCheck,
    backend: &Target,
    port: Option<u16>,
    timeout: Duration,
) -> CheckReport {
    let started = Instant::now();
    let (ok, result) = match tokio::time::timeout(timeout, run(kind, backend, port)).await {
        Ok(r) => r,
        Err(_) => match kind {
            TcpCheck::TlsHello => (false, format!("L6TOUT: timed out after {timeout:?}")),
            TcpCheck::Connect => (false, format!("connect: timed out after {timeout:?}")),
        },
    };
    CheckReport {
        ok,
        result,
        ms: started.elapsed().as_millis() as u64,
        at: unix_secs(),
        version: None,
    }
}

async fn run(kind: TcpCheck, backend: &Target, port: Option<u16>) -> (bool, String) {
    let addr = match port {
        Some(p) => backend.spec.addr.with_port(p),
        None => backend.spec.addr.clone(),
    };
    let mut stream = match backend.pool.resolver().dial(&addr).await {
        Ok(s) => s,
        Err(e) => return (false, format!("connect: {e}")),
    };
    if backend.spec.send_proxy.is_some() {
        if let Err(e) = stream.write_all(&proxy_protocol::encode_local()).await {
            return (false, format!("L4CON: {e}"));
        }
    }
    match kind {
        TcpCheck::Connect => (true, "L4OK".into()),
        TcpCheck::TlsHello => tls_hello(&mut stream).await,
    }
}

/// Send the probe; read until the verdict (at most five bytes matter).
async fn tls_hello(stream: &mut TcpStream) -> (bool, String) {
    let _ = stream.set_nodelay(true);
    if let Err(e) = stream.write_all(&probe(unix_secs() as u32)).await {
        return (false, format!("L6RSP: {e}"));
    }
    let mut got = [0u8; 5];
    let mut n = 0;
    loop {
        match verdict(&got[..n]) {
            Verdict::Up => return (true, "L6OK".into()),
            Verdict::Down => {
                return (
                    false,
                    format!("L6RSP: not a TLS record ({})", hex(&got[..n])),
                )
            }
            Verdict::Incomplete => {}
        }
        match stream.read(&mut got[n..]).await {
            Ok(0) => return (false, "L6RSP: closed before a TLS record".into()),
            Ok(k) => n += k,
            Err(e) => return (false, format!("L6RSP: {e}")),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
