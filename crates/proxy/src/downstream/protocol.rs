//! Which HTTP a plain connection speaks (its first bytes, peeked), and the HTTP/2
//! server settings its connection objects are built with.

use std::io;

use hyper_util::rt::TokioTimer;
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;

use super::watchdog::StreamExec;
use crate::shared::Settings;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the connection's first bytes say.
pub(super) enum Detected {
    Http1,
    /// The HTTP/2 preface, or a prefix of it too short to tell.
    Other,
    Closed,
}

pub(super) async fn detect(stream: &TcpStream) -> io::Result<Detected> {
    let mut buf = [0u8; 24];
    let n = stream.peek(&mut buf).await?;
    Ok(if n == 0 {
        Detected::Closed
    } else if buf[..n] == H2_PREFACE[..n] {
        Detected::Other
    } else {
        Detected::Http1
    })
}

/// HTTP/2 server settings: hyper's timer, the head size limit, and the streams a
/// connection may have open at once (`proxy.h2_max_concurrent_streams`, HAProxy's
/// `tune.h2.max-concurrent-streams`).
pub(super) fn h2_settings(mut b: auto::Http2Builder<'_, StreamExec>, settings: &Settings) {
    b.timer(TokioTimer::new())
        .max_header_list_size(settings.max_header_size as u32)
        .max_concurrent_streams(settings.h2_max_concurrent_streams);
}
