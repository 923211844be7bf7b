//! origin-server's own ActiveMQ routing plugin, run under Debian's `ruby` with
//! `ruby-stomp` by `tests/support/routing_plugin.rb`: [`Plugin::send`] an [`Event`] and
//! the plugin publishes it, as the broker would on `OpenShift::RoutingService.notify_*`.
//!
//! The plugin's two files (`controller/lib/openshift/routing_service.rb` and
//! `plugins/routing/activemq/lib/openshift/activemq_routing_plugin.rb`) come from
//! `$ORIGIN_SERVER_DIR`, else from the origin-server mirror (`git show HEAD:<path>`);
//! where neither is there, [`Plugin::start`] says so loudly and returns `None`, and the
//! caller publishes [`super::yaml_of`] itself.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

/// origin-server's source, as a bare git mirror.
pub const MIRROR: &str = "/work/.mirror/openshift+origin-server/repo";
const SERVICE: &str = "controller/lib/openshift/routing_service.rb";
const PLUGIN: &str = "plugins/routing/activemq/lib/openshift/activemq_routing_plugin.rb";
const RUNNER: &str = include_str!("../routing_plugin.rb");

/// A routing SPI event: one `notify_*` of `OpenShift::RoutingService`, named by the
/// `:action` the plugin publishes it as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Event {
    CreateApplication {
        app: String,
        namespace: String,
        scalable: bool,
        ha: bool,
    },
    DeleteApplication {
        app: String,
        namespace: String,
        scalable: bool,
        ha: bool,
    },
    /// `notify_create_public_endpoint`.
    AddPublicEndpoint {
        app: String,
        namespace: String,
        gear_id: String,
        /// The cartridge's name (`haproxy-1.4`).
        public_port_name: String,
        public_address: String,
        public_port: u16,
        protocols: Vec<String>,
        types: Vec<String>,
        mappings: Vec<Mapping>,
    },
    /// `notify_delete_public_endpoint`.
    RemovePublicEndpoint {
        app: String,
        namespace: String,
        gear_id: String,
        public_address: String,
        public_port: u16,
    },
    AddAlias {
        app: String,
        namespace: String,
        alias: String,
    },
    RemoveAlias {
        app: String,
        namespace: String,
        alias: String,
    },
    /// `notify_ssl_cert_add`.
    AddSsl {
        app: String,
        namespace: String,
        alias: String,
        ssl: String,
        private_key: String,
        pass_phrase: Option<String>,
    },
    /// `notify_ssl_cert_remove`.
    RemoveSsl {
        app: String,
        namespace: String,
        alias: String,
    },
}

/// One of an endpoint's mappings (the broker passes them as string-keyed hashes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mapping {
    pub frontend: String,
    pub backend: String,
}

impl Mapping {
    pub fn new(frontend: &str, backend: &str) -> Mapping {
        Mapping {
            frontend: frontend.into(),
            backend: backend.into(),
        }
    }
}

/// The Ruby process running the plugin; killed on drop.
pub struct Plugin {
    child: Child,
    stdin: ChildStdin,
    answers: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

/// One file of origin-server's source.
fn source(path: &str) -> Option<Vec<u8>> {
    if let Ok(dir) = std::env::var("ORIGIN_SERVER_DIR") {
        let p = std::path::Path::new(&dir).join(path);
        return Some(
            std::fs::read(&p).unwrap_or_else(|e| panic!("ORIGIN_SERVER_DIR: {}: {e}", p.display())),
        );
    }
    let out = Command::new("git")
        .args(["-C", MIRROR, "show", &format!("HEAD:{path}")])
        .output()
        .ok()?;
    (out.status.success() && !out.stdout.is_empty()).then_some(out.stdout)
}

impl Plugin {
    /// The plugin publishing to `destination` at `hosts` (its `ACTIVEMQ_HOST` list) with
    /// `credentials` (`ACTIVEMQ_USERNAME`/`PASSWORD`). `None`, after a loud message,
    /// where origin-server's source cannot be had. Ruby and ruby-stomp must be there.
    pub fn start(
        hosts: &[SocketAddr],
        credentials: Option<(&str, &str)>,
        destination: &str,
    ) -> Option<Plugin> {
        Plugin::start_in(&[], hosts, credentials, destination)
    }

    /// As [`Plugin::start`], run through a command `prefix` (`ip netns exec NAME`: where
    /// the brokers can be reached).
    pub fn start_in(
        prefix: &[String],
        hosts: &[SocketAddr],
        credentials: Option<(&str, &str)>,
        destination: &str,
    ) -> Option<Plugin> {
        let (Some(service), Some(plugin)) = (source(SERVICE), source(PLUGIN)) else {
            eprintln!(
                "\n==========================================================================\n\
                 origin-server's routing plugin is not available (set ORIGIN_SERVER_DIR or\n\
                 provide the mirror at {MIRROR}): publishing its YAML directly instead.\n\
                 ==========================================================================\n"
            );
            return None;
        };
        let ruby = Command::new("ruby")
            .args(["-e", "require 'stomp'"])
            .output();
        assert!(
            ruby.is_ok_and(|o| o.status.success()),
            "this test runs origin-server's routing plugin: apt-get install ruby ruby-stomp"
        );
        let dir = tempfile::Builder::new()
            .prefix("gearlb-plugin")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("routing_service.rb"), service).unwrap();
        std::fs::write(dir.path().join("activemq_routing_plugin.rb"), plugin).unwrap();
        std::fs::write(dir.path().join("routing_plugin.rb"), RUNNER).unwrap();
        let (user, pass) = credentials.unwrap_or(("", ""));
        let conf = serde_json::json!({
            "destination": destination,
            "hosts": hosts.iter().map(|h| serde_json::json!({
                "host": h.ip().to_string(),
                "port": h.port().to_string(),
            })).collect::<Vec<_>>(),
            "username": user,
            "password": pass,
        });
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg("ruby");
                c
            }
            None => Command::new("ruby"),
        };
        let mut child = cmd
            .arg(dir.path().join("routing_plugin.rb"))
            .arg(dir.path())
            .env("ROUTING_ACTIVEMQ", conf.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ruby");
        let stdin = child.stdin.take().unwrap();
        let answers = lines_of(child.stdout.take().unwrap());
        let stderr = lines_of(child.stderr.take().unwrap());
        Some(Plugin {
            child,
            stdin,
            answers,
            stderr,
            _dir: dir,
        })
    }

    /// Have the plugin publish `event`; panics (with Ruby's stderr) on an error or after
    /// 60 s (ruby-stomp retries an unreachable broker forever).
    pub fn send(&mut self, event: &Event) {
        let line = serde_json::to_string(event).unwrap();
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let answer = self.answers.recv_timeout(Duration::from_secs(60));
        match answer {
            Ok(a) if a == "ok" => {}
            other => {
                let err: Vec<String> = self.stderr.try_iter().collect();
                panic!(
                    "routing plugin on {line}: {other:?}; its stderr:\n{}",
                    err.join("\n")
                );
            }
        }
    }
}

/// Each line of `r`, from a thread of its own.
fn lines_of(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
