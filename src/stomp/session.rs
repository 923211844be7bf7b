//! One connection to one broker, from TCP connect to its end: CONNECT and the heart-beat
//! agreement, SUBSCRIBE, each MESSAGE handed to the handler and ACKed when it returns,
//! heart-beats both ways all along (also while the handler runs), and on a stop a
//! DISCONNECT with a receipt.
//!
//! The handler's future is polled by this task's loop beside the reads and the
//! heart-beat timers: a slow handler never starves the connection. When the connection
//! breaks while the handler runs, the handler is let finish (the message is not ACKed:
//! the broker delivers it again) and only then does the session end, so that two
//! handlers never run at once.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::codec::{Limits, StompCodec};
use super::error::{error_text, SessionError};
use super::frame::{Command, Frame, Version};
use super::settings::{Delivery, Handled, Handler, Settings};
use super::status::Status;

/// The receipt asked for with SUBSCRIBE, and with DISCONNECT.
const SUBSCRIBED: &str = "gearlb-subscribed";
const BYE: &str = "gearlb-bye";
/// The subscription's id on its connection.
const SUBSCRIPTION_ID: &str = "0";
/// How long a stop waits for DISCONNECT's receipt, at most.
const BYE_WAIT: Duration = Duration::from_secs(2);
/// MESSAGEs waiting for the handler beyond the prefetch before the broker is taken for
/// broken (it does not respect the prefetch): bounds what it can make us hold.
const QUEUE_SLACK: usize = 8;

/// What the broker agreed to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    pub version: Version,
    /// How often we send an EOL when nothing else was sent (`None`: never).
    pub send_every: Option<Duration>,
    /// The broker's promise: silence for 2.5 times this ends the connection.
    pub expect_every: Option<Duration>,
    /// CONNECTED's `server` header.
    pub server: Option<String>,
}

/// How a session ended.
pub enum End {
    /// `stop` was cancelled.
    Stopped,
    Failed(SessionError),
}

pub struct Outcome {
    /// When the subscription was confirmed (its receipt, or a first MESSAGE).
    pub subscribed_at: Option<Instant>,
    pub end: End,
}

/// The longest heart-beat interval taken from either side: a broker's `heart-beat` of
/// `u64::MAX` ms must not overflow a deadline.
const MAX_BEAT_MS: u64 = 24 * 3600 * 1000;

/// The heart-beat agreement (STOMP 1.1 §Heart-beating): we send `cx` and want `cy`
/// (both `ours`); the broker answers `sx,sy`. We send every `max(cx, sy)` unless either
/// is 0; the broker every `max(sx, cy)` unless either is 0. Intervals are capped at a
/// day.
pub fn negotiate(
    ours: Duration,
    theirs: Option<&str>,
) -> Result<(Option<Duration>, Option<Duration>), String> {
    let (sx, sy) = match theirs.map(str::trim) {
        None | Some("") => (0, 0),
        Some(v) => {
            let parsed = v.split_once(',').and_then(|(a, b)| {
                Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?))
            });
            parsed.ok_or_else(|| {
                format!(
                    "bad heart-beat header {:?}",
                    v.chars().take(40).collect::<String>()
                )
            })?
        }
    };
    let c = ours.as_millis().min(MAX_BEAT_MS as u128) as u64;
    let every = |a: u64, b: u64| {
        (a != 0 && b != 0).then(|| Duration::from_millis(a.max(b).min(MAX_BEAT_MS)))
    };
    Ok((every(c, sy), every(sx, c)))
}

/// `d` from now, or a year from now when that would overflow (a setting of `u64::MAX`
/// seconds).
fn later(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// The socket, the codec and the clocks of one connection.
struct Conn {
    stream: TcpStream,
    codec: StompCodec,
    rbuf: BytesMut,
    wbuf: BytesMut,
    last_read: Instant,
    last_write: Instant,
    write_timeout: Duration,
}

impl Conn {
    async fn send(&mut self, frame: &Frame) -> Result<(), SessionError> {
        self.wbuf.clear();
        self.codec
            .encode(frame, &mut self.wbuf)
            .map_err(SessionError::Encode)?;
        self.write_out().await
    }

    async fn send_eol(&mut self) -> Result<(), SessionError> {
        self.wbuf.clear();
        self.wbuf.extend_from_slice(b"\n");
        self.write_out().await
    }

    async fn write_out(&mut self) -> Result<(), SessionError> {
        match timeout(self.write_timeout, self.stream.write_all(&self.wbuf)).await {
            Err(_) => Err(SessionError::WriteTimeout(self.write_timeout)),
            Ok(Err(e)) => Err(SessionError::Io(e)),
            Ok(Ok(())) => {
                self.last_write = Instant::now();
                Ok(())
            }
        }
    }

    /// Read what is there (cancel-safe: nothing read is lost).
    async fn read_more(&mut self) -> Result<(), SessionError> {
        self.rbuf.reserve(8192);
        match self.stream.read_buf(&mut self.rbuf).await {
            Ok(0) => Err(SessionError::Closed),
            Ok(_) => {
                self.last_read = Instant::now();
                Ok(())
            }
            Err(e) => Err(SessionError::Io(e)),
        }
    }

    fn next_frame(&mut self) -> Result<Option<Frame>, SessionError> {
        self.codec
            .decode(&mut self.rbuf)
            .map_err(SessionError::Frame)
    }
}

/// A MESSAGE waiting for the handler, and the ACK to send once it is handled.
struct Pending {
    delivery: Delivery,
    ack: Frame,
}

type Handling = Pin<Box<dyn Future<Output = Handled> + Send>>;

/// Connect to `broker`, subscribe, and consume until the connection breaks or `stop`.
/// `on_subscribed` is called once the subscription is confirmed.
pub async fn run(
    broker: &str,
    s: &Settings,
    handler: &Arc<dyn Handler>,
    status: &Status,
    stop: &CancellationToken,
    on_subscribed: &mut (dyn FnMut(&Negotiated) + Send),
) -> Outcome {
    let mut subscribed_at = None;
    let end = match session(
        broker,
        s,
        handler,
        status,
        stop,
        on_subscribed,
        &mut subscribed_at,
    )
    .await
    {
        Ok(()) => End::Stopped,
        Err(e) => End::Failed(e),
    };
    Outcome { subscribed_at, end }
}

/// `Ok` on a stop.
async fn session(
    broker: &str,
    s: &Settings,
    handler: &Arc<dyn Handler>,
    status: &Status,
    stop: &CancellationToken,
    on_subscribed: &mut (dyn FnMut(&Negotiated) + Send),
    subscribed_at: &mut Option<Instant>,
) -> Result<(), SessionError> {
    let stream = tokio::select! {
        c = timeout(s.connect_timeout, TcpStream::connect(broker)) => match c {
            Err(_) => return Err(SessionError::ConnectTimeout(s.connect_timeout)),
            Ok(Err(e)) => return Err(SessionError::Connect(e)),
            Ok(Ok(stream)) => stream,
        },
        _ = stop.cancelled() => return Ok(()),
    };
    let _ = stream.set_nodelay(true);
    let now = Instant::now();
    let mut conn = Conn {
        stream,
        codec: StompCodec::new(Limits::default()),
        rbuf: BytesMut::with_capacity(8192),
        wbuf: BytesMut::with_capacity(512),
        last_read: now,
        last_write: now,
        write_timeout: s.connect_timeout.max(Duration::from_secs(1)),
    };
    let Some(neg) = handshake(&mut conn, broker, s, stop).await? else {
        return Ok(());
    };
    conn.codec.set_version(neg.version);
    let mut subscribe = Frame::new(Command::Subscribe)
        .header("id", SUBSCRIPTION_ID)
        .header("destination", s.destination.as_str())
        .header("ack", "client-individual")
        .header("activemq.prefetchSize", s.prefetch.to_string());
    if let Some(name) = &s.subscription_name {
        subscribe = subscribe.header("activemq.subscriptionName", name.as_str());
    }
    conn.send(&subscribe.header("receipt", SUBSCRIBED)).await?;
    consume_loop(&mut conn, &neg, s, handler, status, stop, &mut || {
        if subscribed_at.is_none() {
            *subscribed_at = Some(Instant::now());
            status.set_connected(broker);
            on_subscribed(&neg);
        }
    })
    .await
}

/// CONNECT, then CONNECTED (or ERROR) within the connect timeout. `None` on a stop.
async fn handshake(
    conn: &mut Conn,
    broker: &str,
    s: &Settings,
    stop: &CancellationToken,
) -> Result<Option<Negotiated>, SessionError> {
    let host = match broker.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => broker,
    };
    let ms = s.heartbeat.as_millis();
    let mut connect = Frame::new(Command::Connect)
        .header("accept-version", "1.2,1.1")
        .header("host", host)
        .header("client-id", s.client_id.as_str())
        .header("heart-beat", format!("{ms},{ms}"));
    if let Some(login) = &s.login {
        connect = connect.header("login", login.as_str());
    }
    if let Some(passcode) = &s.passcode {
        connect = connect.header("passcode", passcode.as_str());
    }
    conn.send(&connect).await?;
    let deadline = later(s.connect_timeout);
    let frame = loop {
        if let Some(frame) = conn.next_frame()? {
            break frame;
        }
        tokio::select! {
            r = conn.read_more() => r?,
            _ = sleep_until(deadline) => return Err(SessionError::HandshakeTimeout(s.connect_timeout)),
            _ = stop.cancelled() => return Ok(None),
        }
    };
    match frame.command {
        Command::Connected => {}
        Command::Error => return Err(SessionError::Refused(error_text(&frame))),
        other => {
            return Err(SessionError::Protocol(format!(
                "{} frame in answer to CONNECT",
                other.as_str()
            )))
        }
    }
    let version = match Version::parse(frame.get("version")) {
        Some(v @ (Version::V1_1 | Version::V1_2)) => v,
        _ => {
            return Err(SessionError::Protocol(format!(
                "broker speaks STOMP {:?}; 1.2 or 1.1 is needed",
                frame.get("version").unwrap_or("1.0")
            )))
        }
    };
    let (send_every, expect_every) =
        negotiate(s.heartbeat, frame.get("heart-beat")).map_err(SessionError::Protocol)?;
    Ok(Some(Negotiated {
        version,
        send_every,
        expect_every,
        server: frame.get("server").map(str::to_string),
    }))
}

/// A MESSAGE as a [`Pending`]: its delivery and its ACK.
fn pending(frame: Frame, version: Version) -> Result<Pending, SessionError> {
    let missing = |h: &str| SessionError::Protocol(format!("MESSAGE without {h} header"));
    let message_id = frame
        .get("message-id")
        .ok_or_else(|| missing("message-id"))?;
    let ack = match version {
        Version::V1_2 => {
            let id = frame.get("ack").ok_or_else(|| missing("ack"))?;
            Frame::new(Command::Ack).header("id", id)
        }
        _ => Frame::new(Command::Ack)
            .header("message-id", message_id)
            .header(
                "subscription",
                frame.get("subscription").unwrap_or(SUBSCRIPTION_ID),
            ),
    };
    let delivery = Delivery {
        message_id: message_id.to_string(),
        destination: frame.get("destination").unwrap_or("").to_string(),
        timestamp_ms: frame.get("timestamp").and_then(|t| t.trim().parse().ok()),
        redelivered: frame.get("redelivered") == Some("true"),
        headers: frame.headers,
        body: frame.body,
    };
    Ok(Pending { delivery, ack })
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn poll_handling(h: &mut Option<Handling>) -> Handled {
    match h {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Until a stop (`Ok`) or a break. Frames are handled as they come; the handler runs
/// one message at a time.
async fn consume_loop(
    conn: &mut Conn,
    neg: &Negotiated,
    s: &Settings,
    handler: &Arc<dyn Handler>,
    status: &Status,
    stop: &CancellationToken,
    subscribed: &mut (dyn FnMut() + Send),
) -> Result<(), SessionError> {
    let dead_after = neg.expect_every.map(|e| e.mul_f64(2.5));
    let beat_every = neg.send_every.map(|e| e / 2);
    let max_queued = s.prefetch.max(1) as usize + QUEUE_SLACK;
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut handling: Option<Handling> = None;
    let mut ack: Option<Frame> = None;
    let mut stopping = false;
    let mut broken: Option<SessionError> = None;
    loop {
        if handling.is_none() {
            if stopping {
                return match broken {
                    Some(_) => Ok(()),
                    None => {
                        disconnect(conn).await;
                        Ok(())
                    }
                };
            }
            if let Some(e) = broken.take() {
                return Err(e);
            }
            if let Some(p) = queue.pop_front() {
                let h = handler.clone();
                handling = Some(Box::pin(async move { h.handle(p.delivery).await }));
                ack = Some(p.ack);
            }
        }
        let live = broken.is_none();
        if !live {
            // Not connected any more, even while the handler finishes.
            status.set_disconnected();
        }
        let dead_at = dead_after.map(|d| conn.last_read + d);
        let beat_at = beat_every.map(|b| conn.last_write + b);
        tokio::select! {
            biased;
            handled = poll_handling(&mut handling), if handling.is_some() => {
                handling = None;
                let frame = ack.take();
                match (frame, handled) {
                    (Some(frame), Handled::Ack) if live => match conn.send(&frame).await {
                        Ok(()) => status.acked(),
                        Err(e) => broken = Some(e),
                    },
                    // Unacknowledged: the broker has it again once this session ends.
                    (_, Handled::Keep) if live && !stopping => {
                        broken = Some(SessionError::Kept);
                    }
                    _ => {}
                }
            }
            _ = stop.cancelled(), if !stopping => stopping = true,
            r = conn.read_more(), if live => {
                if let Err(e) = r.and_then(|()| take_frames(conn, &mut queue, max_queued, status, subscribed)) {
                    broken = Some(e);
                }
            }
            _ = sleep_opt(dead_at), if live && dead_at.is_some() => {
                let promised = neg.expect_every.unwrap_or_default();
                broken = Some(SessionError::Silent(conn.last_read.elapsed(), promised));
            }
            _ = sleep_opt(beat_at), if live && beat_at.is_some() => {
                if let Err(e) = conn.send_eol().await {
                    broken = Some(e);
                }
            }
        }
    }
}

/// Every complete frame read so far: MESSAGEs queued for the handler, the
/// subscription's RECEIPT noted, an ERROR or anything unexpected an error.
fn take_frames(
    conn: &mut Conn,
    queue: &mut VecDeque<Pending>,
    max_queued: usize,
    status: &Status,
    subscribed: &mut (dyn FnMut() + Send),
) -> Result<(), SessionError> {
    while let Some(frame) = conn.next_frame()? {
        match frame.command {
            Command::Message => {
                status.received();
                subscribed();
                if queue.len() >= max_queued {
                    return Err(SessionError::Protocol(format!(
                        "broker sent more than {max_queued} messages ahead of ACKs"
                    )));
                }
                queue.push_back(pending(frame, conn.codec.version())?);
            }
            Command::Receipt => {
                if frame.get("receipt-id") == Some(SUBSCRIBED) {
                    subscribed();
                }
            }
            Command::Error => {
                debug!(body = %frame.body_excerpt(1024), "ERROR frame");
                return Err(SessionError::ErrorFrame(error_text(&frame)));
            }
            other => {
                return Err(SessionError::Protocol(format!(
                    "unexpected {} frame",
                    other.as_str()
                )))
            }
        }
    }
    Ok(())
}

/// DISCONNECT with a receipt, and a short wait for it. MESSAGEs that come meanwhile are
/// not handled nor ACKed: the broker keeps them.
async fn disconnect(conn: &mut Conn) {
    let bye = Frame::new(Command::Disconnect).header("receipt", BYE);
    if conn.send(&bye).await.is_err() {
        return;
    }
    let deadline = later(BYE_WAIT);
    loop {
        match conn.next_frame() {
            Ok(Some(f)) if f.command == Command::Receipt && f.get("receipt-id") == Some(BYE) => {
                return
            }
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(_) => return,
        }
        tokio::select! {
            r = conn.read_more() => if r.is_err() { return },
            _ = sleep_until(deadline) => {
                debug!("no receipt for DISCONNECT within {BYE_WAIT:?}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
