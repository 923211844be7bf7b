//! The local control API: a unix socket (mode 0600) used by `gearlb ctl`, the cartridge's
//! `bin/control` and its hooks.
//!
//! Owns the wire protocol (one JSON request line in, one JSON reply line out), the
//! socket's life (stale socket files replaced, a live one never stolen, removed on stop),
//! access control (only the balancer's own user, or root, may connect: checked with the
//! peer's credentials, on top of the file mode), and the client side used by `gearlb ctl`.
//! What a command does is up to the [`Handler`]; this module only carries it.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Largest request accepted, in bytes.
const MAX_REQUEST: u64 = 1 << 20;
/// Time a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Exit code of a command refused because the caller is another user (sysexits
/// `EX_NOPERM`).
pub const EXIT_REFUSED: i32 = 77;

/// A command sent to the balancer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    Status,
    /// The complete list of web gears, as `update-cluster` arguments.
    UpdateCluster {
        args: Vec<String>,
    },
    /// The cluster view.
    Peers,
    /// Replace the known peer balancers (the subscriber hook's full list).
    SetPeers {
        args: Vec<String>,
    },
    /// One manual scale event: `up` or `down`.
    Scale {
        event: String,
    },
    /// Rotate a gear out (drain on every balancer) or in.
    Rotate {
        gear: String,
        op: crate::rotation::Op,
        /// Drain deadline (rotate-out), milliseconds; default `rotate.timeout`.
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// The node platform's call (`bin/control`): the outcome is this balancer's
        /// own, and no quorum is needed (see `App::rotate`).
        #[serde(default)]
        node: bool,
        /// The service `gear` is a backend of (default: the top-level backends).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        service: Option<String>,
    },
    /// Re-read the config file, with this environment (the caller's: in cartridge mode
    /// `bin/control reload` runs with the gear's current variables).
    Reload {
        env: BTreeMap<String, String>,
    },
    /// The services, their routes and backends.
    Services,
    /// A router's routing SPI: broker, events, failures, table, peers.
    Spi,
    /// A router: reconcile the table with the broker's REST API now.
    SpiReconcile,
    /// An instance of a service announces itself (or renews its lease).
    Register {
        service: String,
        backend: String,
        addr: String,
        #[serde(default)]
        hosts: Vec<String>,
        #[serde(default)]
        paths: Vec<String>,
        /// Lease, milliseconds; default `discovery.ttl`.
        #[serde(default)]
        ttl_ms: Option<u64>,
        /// The version it runs, and those it is compatible with.
        #[serde(default)]
        version: Option<String>,
        #[serde(default)]
        compatible: Vec<String>,
    },
    /// Make a version's group of a service active now (the older ones drain).
    Cutover {
        service: String,
        version: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
    /// Hold a version's group of a service back, or release it.
    Hold {
        service: String,
        version: String,
        #[serde(default)]
        release: bool,
    },
    /// An instance leaves: it drains, then goes.
    Deregister {
        service: String,
        backend: String,
    },
}

/// The balancer's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Exit code for `gearlb ctl`: 0 success, 22 bad update-cluster entries,
    /// 64 bad configuration, 1 other failure.
    pub exit_code: i32,
    /// Text for a person (may be empty).
    pub message: String,
    /// Structured result (command specific).
    #[serde(default)]
    pub data: serde_json::Value,
}

impl Reply {
    pub fn ok(message: impl Into<String>, data: serde_json::Value) -> Self {
        Reply {
            exit_code: 0,
            message: message.into(),
            data,
        }
    }

    pub fn error(exit_code: i32, message: impl Into<String>) -> Self {
        Reply {
            exit_code,
            message: message.into(),
            data: serde_json::Value::Null,
        }
    }
}

/// Where a long command reports progress (one line of text per message).
pub type Progress = tokio::sync::mpsc::UnboundedSender<String>;

/// One line on the wire: progress while a command runs, then the reply.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Progress { progress: String },
    Reply(Reply),
}

/// Carries out commands.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request, progress: Progress) -> impl Future<Output = Reply> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another gearlb is already running with {what} {path}")]
    InUse { what: &'static str, path: PathBuf },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Create the control socket: parent directory created if missing, a stale socket file
/// replaced, permissions 0600.
pub async fn bind(path: &Path) -> Result<UnixListener, BindError> {
    bind_socket(path, "control socket").await
}

/// Create a local socket (`what` names it in errors) the way the control socket is: the
/// parent directory created if missing, a stale socket file replaced, a live one (another
/// balancer's) never stolen, permissions 0600.
pub async fn bind_socket(path: &Path, what: &'static str) -> Result<UnixListener, BindError> {
    let io = |source| BindError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(BindError::InUse {
                what,
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    Ok(listener)
}

/// Serve commands until `shutdown`; then remove the socket file.
pub async fn serve<H: Handler>(
    listener: UnixListener,
    path: PathBuf,
    handler: Arc<H>,
    shutdown: CancellationToken,
) {
    let me = rustix::process::geteuid().as_raw();
    while let Some(accepted) = accept_local(&listener, me, &shutdown, "control").await {
        let stream = match accepted {
            Ok(stream) => stream,
            Err((stream, uid)) => {
                tokio::spawn(refuse(stream, uid, me));
                continue;
            }
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_one(stream, &*handler).await {
                debug!(error = %e, "control connection failed");
            }
        });
    }
    drop(listener);
    let _ = std::fs::remove_file(&path);
}

/// The access rule of gearlb's local sockets: the balancer's own user (`me`) or root.
pub fn peer_allowed(uid: u32, me: u32) -> bool {
    uid == me || uid == 0
}

/// The next connection on one of gearlb's local sockets (`what`: `control`, `stats
/// socket`), or `None` at `shutdown`: `Ok` from the balancer's own user or root
/// ([`peer_allowed`]), `Err` with the caller's uid from any other user (logged; the
/// caller answers it). Accept errors (after a short pause) and connections without
/// credentials are logged and skipped.
pub async fn accept_local(
    listener: &UnixListener,
    me: u32,
    shutdown: &CancellationToken,
    what: &str,
) -> Option<Result<UnixStream, (UnixStream, u32)>> {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return None,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    warn!(error = %e, "{what} accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match stream.peer_cred() {
            Ok(cred) if peer_allowed(cred.uid(), me) => return Some(Ok(stream)),
            Ok(cred) => {
                warn!(
                    uid = cred.uid(),
                    "{what} connection from another user refused"
                );
                return Some(Err((stream, cred.uid())));
            }
            Err(e) => warn!(error = %e, "{what} connection without credentials refused"),
        }
    }
}

/// Tell a caller of another user why nothing was done: its request is read (briefly,
/// and never looked at) so that it sees the answer rather than a broken pipe.
async fn refuse(stream: UnixStream, uid: u32, me: u32) {
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read.take(64 * 1024));
    let _ = tokio::time::timeout(Duration::from_secs(1), reader.read_until(b'\n', &mut line)).await;
    let reply = Reply::error(
        EXIT_REFUSED,
        format!(
            "permission denied: uid {uid} may not control this balancer (only uid {me} or root)"
        ),
    );
    if let Ok(mut out) = serde_json::to_vec(&Line::Reply(reply)) {
        out.push(b'\n');
        let _ = tokio::time::timeout(Duration::from_secs(1), write.write_all(&out)).await;
    }
}

async fn serve_one<H: Handler>(stream: UnixStream, handler: &H) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_REQUEST));
    let read = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line)).await;
    let (progress, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let work = async {
        match read {
            Err(_) => Reply::error(1, "no request received in time"),
            Ok(Err(e)) => Reply::error(1, format!("could not read request: {e}")),
            Ok(Ok(_)) if !line.ends_with('\n') => Reply::error(
                1,
                format!("request missing or larger than {MAX_REQUEST} bytes"),
            ),
            Ok(Ok(_)) => match serde_json::from_str::<Request>(&line) {
                Ok(req) => handler.handle(req, progress).await,
                Err(e) => Reply::error(1, format!("invalid request: {e}")),
            },
        }
    };
    tokio::pin!(work);
    let mut pending: Vec<String> = Vec::new();
    let reply = loop {
        tokio::select! {
            reply = &mut work => break reply,
            Some(p) = progress_rx.recv() => pending.push(p),
        }
        for p in pending.drain(..) {
            let mut out = serde_json::to_vec(&Line::Progress { progress: p })
                .map_err(std::io::Error::other)?;
            out.push(b'\n');
            // A client that went away does not stop the command.
            let _ = write.write_all(&out).await;
        }
    };
    // Progress sent just before the reply still goes out, in order.
    while let Ok(p) = progress_rx.try_recv() {
        pending.push(p);
    }
    for p in pending {
        let mut out =
            serde_json::to_vec(&Line::Progress { progress: p }).map_err(std::io::Error::other)?;
        out.push(b'\n');
        let _ = write.write_all(&out).await;
    }
    let mut out = serde_json::to_vec(&Line::Reply(reply)).map_err(std::io::Error::other)?;
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach gearlb on {path} (is it running?): {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("control socket {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("control socket {path}: unreadable reply: {reason}")]
    Reply { path: PathBuf, reason: String },
}

/// Send one command and wait for the reply.
pub async fn call(path: &Path, req: &Request) -> Result<Reply, ClientError> {
    call_with_progress(path, req, |_| {}).await
}

/// Send one command; `on_progress` gets each progress line until the reply comes.
pub async fn call_with_progress(
    path: &Path,
    req: &Request,
    mut on_progress: impl FnMut(&str),
) -> Result<Reply, ClientError> {
    let io = |source| ClientError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut stream = UnixStream::connect(path)
        .await
        .map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
    let mut line = serde_json::to_vec(req).map_err(|e| io(std::io::Error::other(e)))?;
    line.push(b'\n');
    stream.write_all(&line).await.map_err(io)?;
    let mut lines = BufReader::new(stream).lines();
    while let Some(l) = lines.next_line().await.map_err(io)? {
        match serde_json::from_str::<Line>(&l) {
            Ok(Line::Progress { progress }) => on_progress(&progress),
            Ok(Line::Reply(r)) => return Ok(r),
            Err(e) => {
                return Err(ClientError::Reply {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })
            }
        }
    }
    Err(ClientError::Reply {
        path: path.to_path_buf(),
        reason: "connection closed without a reply".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    struct Echo;

    impl Handler for Echo {
        async fn handle(&self, req: Request, progress: Progress) -> Reply {
            let _ = progress.send("working".into());
            Reply::ok("echo", serde_json::to_value(req).unwrap())
        }
    }

    #[tokio::test]
    async fn round_trip_permissions_and_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/control.sock");
        let listener = bind(&path).await.unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);

        // A second balancer must not steal a live socket.
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, path.clone(), Arc::new(Echo), stop.clone()));
        assert!(matches!(bind(&path).await, Err(BindError::InUse { .. })));

        let req = Request::UpdateCluster {
            args: vec!["a b".into()],
        };
        let mut seen = Vec::new();
        let reply = call_with_progress(&path, &req, |p| seen.push(p.to_string()))
            .await
            .unwrap();
        assert_eq!(seen, vec!["working"]);
        assert_eq!(reply.exit_code, 0);
        assert_eq!(reply.data["cmd"], "update-cluster");
        assert_eq!(reply.data["args"][0], "a b");

        stop.cancel();
        task.await.unwrap();
        assert!(!path.exists(), "socket file removed on stop");
        assert!(matches!(
            call(&path, &Request::Status).await,
            Err(ClientError::Connect { .. })
        ));
    }

    #[tokio::test]
    async fn stale_socket_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        bind(&path).await.unwrap();
    }

    #[tokio::test]
    async fn garbage_requests_get_an_error_reply() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let listener = bind(&path).await.unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, path.clone(), Arc::new(Echo), stop.clone()));
        let mut s = UnixStream::connect(&path).await.unwrap();
        s.write_all(b"{\"cmd\":\"format-disk\"}\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let reply: Reply = serde_json::from_str(out.trim_end()).unwrap();
        assert_eq!(reply.exit_code, 1);
        assert!(reply.message.contains("invalid request"));
        stop.cancel();
    }
}
