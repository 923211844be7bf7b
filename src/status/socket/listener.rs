//! The stats socket's listener: accepting connections (the balancer's own user or
//! root only, at most [`MAX_CLIENTS`] at once), reading command lines within their
//! bounds, and writing the answers back until the connection ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::command::Mode;
use super::exec::{run_line, Source};

/// Longest command line, in bytes (HAProxy's default `tune.bufsize`).
pub const MAX_LINE: usize = 16 * 1024;
/// Time to send a command line (HAProxy's default `stats timeout`).
pub const LINE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to send the next line at a prompt (the guide's suggested `stats timeout 2m`).
pub const PROMPT_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a client has to take an answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once.
pub const MAX_CLIENTS: usize = 16;

/// Serve the stats socket until `shutdown`; then remove the socket file. `listener` is
/// bound with [`crate::control::bind_socket`].
pub async fn serve<S: Source>(
    listener: UnixListener,
    path: PathBuf,
    source: Arc<S>,
    shutdown: CancellationToken,
) {
    let me = rustix::process::geteuid().as_raw();
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    while let Some(accepted) =
        crate::control::accept_local(&listener, me, &shutdown, "stats socket").await
    {
        let stream = match accepted {
            Ok(stream) => stream,
            Err((stream, _)) => {
                tokio::spawn(refuse(stream));
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!("stats socket: {MAX_CLIENTS} connections already, one closed");
            continue;
        };
        let source = source.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = serve_one(stream, &*source, &shutdown) => if let Err(e) = r {
                    debug!(error = %e, "stats socket connection failed");
                },
                _ = shutdown.cancelled() => {}
            }
            drop(slot);
        });
    }
    drop(listener);
    let _ = std::fs::remove_file(&path);
}

/// HAProxy's answer to a client without the level: "Permission denied". The line is read
/// (briefly, never looked at) so the caller sees the answer rather than a broken pipe.
async fn refuse(stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read.take(MAX_LINE as u64));
    let _ = tokio::time::timeout(Duration::from_secs(1), reader.read_until(b'\n', &mut line)).await;
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        write.write_all(b"Permission denied\n\n"),
    )
    .await;
}

/// One line from the client: `None` at the end of input; `Err` for a line too long or
/// late. A last line without its newline still counts (`printf 'show stat' | socat`).
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: Duration,
) -> Result<Option<String>, &'static str> {
    let mut buf = Vec::new();
    let mut bounded = reader.take(MAX_LINE as u64 + 1);
    match tokio::time::timeout(limit, bounded.read_until(b'\n', &mut buf)).await {
        Err(_) => Err("timed out waiting for a command"),
        Ok(Err(_)) => Ok(None),
        Ok(Ok(0)) => Ok(None),
        Ok(Ok(_)) if buf.len() > MAX_LINE => Err("command line too long"),
        Ok(Ok(_)) => Ok(Some(String::from_utf8_lossy(&buf).into_owned())),
    }
}

async fn serve_one<S: Source>(
    stream: UnixStream,
    source: &S,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut mode = Mode::NonInteractive;
    loop {
        let limit = if mode == Mode::Prompt {
            PROMPT_TIMEOUT
        } else {
            LINE_TIMEOUT
        };
        let line = match read_line(&mut reader, limit).await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(why) => {
                let msg = format!(
                    "gearlb: {why} (at most {MAX_LINE} bytes, within {}s).\n\n",
                    limit.as_secs()
                );
                let _ = tokio::time::timeout(WRITE_TIMEOUT, write.write_all(msg.as_bytes())).await;
                break;
            }
        };
        let (out, next, quit) = run_line(&line, mode, source, shutdown).await;
        mode = next;
        match tokio::time::timeout(WRITE_TIMEOUT, write.write_all(out.as_bytes())).await {
            Ok(r) => r?,
            Err(_) => return Err(std::io::Error::other("client did not take the answer")),
        }
        if quit || mode == Mode::NonInteractive {
            break;
        }
    }
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write.shutdown()).await;
    Ok(())
}
