//! Node fidelity: the packaged cartridge driven call by call the way origin-server's v2
//! node drives a web-proxy cartridge, with the node's own rules ported here:
//!
//! - the environment is `Environ.for_gear` + `do_control_with_directory` (the node's
//!   system env, the gear's `.env/` files, cartridge `env/` directories, filtered
//!   `user_vars`, `PATH` from `*_PATH_ELEMENT`), and nothing else (`unsetenv_others`);
//! - `bin/control ACTION ARGS` runs as `set -e; <control> <action> <shellescaped args>`
//!   through `/bin/sh -c`, arguments joined into one word (`Shellwords.shellescape`);
//!   hooks run as `<hook> <gear_name> <ns> <uuid> <escaped list>`;
//! - **a nonzero exit is a `ShellExecutionException`**, which aborts `rotate_and_yield`
//!   and with it the deploy or restart: [`Gear::control`] fails the test there;
//! - `update_cluster` rewrites `gear-registry/gear-registry.json` (as `JSON.dump` writes
//!   it) and passes `<dns>|<host>:<port>` of every `:web` entry as one word, `''` when
//!   there are none (`generate_update_cluster_control_args`);
//! - `update_proxy_status` on the head gear fans `disable-server|enable-server
//!   'persist <uuid>'` out to every proxy gear of the registry in parallel;
//! - the watchman's `gear_state_plugin.rb` rule is applied to the process table.
//!
//! The cartridge is the packaged one (`$GEARLB_CARTRIDGE`, as `.ci/run` builds it), else
//! one assembled by `cartridge/package.sh` from the binary under test.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;

const SECRET: &str = "app-secret-token-0123456789abcdef";
const NS: &str = "ns";
const DOMAIN: &str = "example.com";
const APP: &str = "myapp";
/// The head gear's uuid is the application's.
const APP_UUID: &str = "5a1e00000000000000000001";

/// Ruby's `Shellwords.shellescape`.
fn shellescape(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "_-.,:+/@".contains(c) {
            out.push(c);
        } else if c == '\n' {
            out.push_str("'\n'");
        } else {
            out.push('\\');
            out.push(c);
        }
    }
    out
}

/// `Environ.load`: one variable per file, contents chomped, NULs dropped; `.erb` and
/// `.rpmnew` files skipped.
fn load_env(dir: &Path) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return env;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".erb") || name.ends_with(".rpmnew") || !e.path().is_file() {
            continue;
        }
        let mut v = std::fs::read_to_string(e.path()).unwrap_or_default();
        if v.ends_with('\n') {
            v.pop();
            if v.ends_with('\r') {
                v.pop();
            }
        }
        env.insert(name, v.replace('\0', ""));
    }
    env
}

/// The node: its system environment (`/etc/openshift/env`).
struct Node {
    system_env: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let system_env = tempfile::Builder::new()
            .prefix("etc-openshift-env")
            .tempdir()
            .unwrap();
        std::fs::write(
            system_env.path().join("PATH"),
            "/usr/local/bin:/usr/bin:/bin",
        )
        .unwrap();
        std::fs::write(system_env.path().join("OPENSHIFT_CLOUD_DOMAIN"), DOMAIN).unwrap();
        Node { system_env }
    }
}

/// A gear on the node: its home, its cartridges, its web server.
struct Gear {
    home: tempfile::TempDir,
    uuid: String,
    name: String,
    ip: String,
    /// The gear's web server (the primary cartridge).
    web: TestBackend,
    /// Balancer gears: the private proxy port.
    proxy: Option<SocketAddr>,
    system_env: PathBuf,
    /// A web server that speaks TLS with its own certificate (`ssl_to_gear`), which
    /// then is the gear's web server.
    tls: Option<support::tls_gear::TlsGear>,
}

/// The installable cartridge: `$GEARLB_CARTRIDGE`, or assembled from this build (once
/// per test process: the tests run in parallel and share it read-only).
fn cartridge_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(assemble_cartridge).clone()
}

fn assemble_cartridge() -> PathBuf {
    if let Ok(dir) = std::env::var("GEARLB_CARTRIDGE") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("bin/gearlb").exists(),
            "GEARLB_CARTRIDGE={} holds no bin/gearlb",
            dir.display()
        );
        return dir;
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("node-cartridge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let done = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("cartridge/package.sh"))
        .arg(&out)
        .env("GEARLB_BIN", bin())
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "package.sh: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

impl Gear {
    /// A web gear, with the balancer cartridge installed when `balancer`.
    async fn new(node: &Node, uuid: &str, name: &str, ip: &str, balancer: Option<&Path>) -> Gear {
        let home = tempfile::Builder::new().prefix("gear").tempdir().unwrap();
        let h = home.path();
        let web =
            TestBackend::start_on(&format!("web-{name}"), format!("{ip}:0").parse().unwrap()).await;
        let d = |p: &str| format!("{}/{p}", h.display());
        let dns = format!("{name}-{NS}.{DOMAIN}");
        let mut env: Vec<(String, String)> = vec![
            ("OPENSHIFT_GEAR_UUID".into(), uuid.into()),
            ("OPENSHIFT_GEAR_NAME".into(), name.into()),
            ("OPENSHIFT_GEAR_DNS".into(), dns),
            ("OPENSHIFT_APP_DNS".into(), format!("{APP}-{NS}.{DOMAIN}")),
            ("OPENSHIFT_APP_NAME".into(), APP.into()),
            ("OPENSHIFT_APP_UUID".into(), APP_UUID.into()),
            ("OPENSHIFT_NAMESPACE".into(), NS.into()),
            ("OPENSHIFT_HOMEDIR".into(), d("")),
            ("OPENSHIFT_DATA_DIR".into(), d("app-root/data/")),
            ("OPENSHIFT_LOG_DIR".into(), d("app-root/logs/")),
            ("OPENSHIFT_REPO_DIR".into(), d("app-root/runtime/repo/")),
            ("OPENSHIFT_TMP_DIR".into(), d(".tmp/")),
            ("OPENSHIFT_SECRET_TOKEN".into(), SECRET.into()),
            ("OPENSHIFT_PRIMARY_CARTRIDGE_DIR".into(), d("php/")),
            ("OPENSHIFT_PHP_IP".into(), ip.into()),
            ("OPENSHIFT_PHP_PORT".into(), web.addr.port().to_string()),
        ];
        // The primary web cartridge.
        std::fs::create_dir_all(h.join("php/metadata")).unwrap();
        std::fs::create_dir_all(h.join("php/env")).unwrap();
        std::fs::write(
            h.join("php/metadata/manifest.yml"),
            "Name: php\nCartridge-Short-Name: PHP\nEndpoints:\n- Private-IP-Name: IP\n  Private-Port-Name: PORT\n  Private-Port: 8080\n",
        )
        .unwrap();
        std::fs::write(h.join("php/env/OPENSHIFT_PHP_PATH_ELEMENT"), d("php/bin")).unwrap();
        let mut proxy = None;
        if let Some(cart) = balancer {
            // Installed as the node installs it: files copied, `env/*.erb` rendered, the
            // cartridge's own variables written, endpoints allocated into `.env/`.
            copy_dir(cart, &h.join("gearlb"));
            let p: SocketAddr = format!("{ip}:{}", free_port(ip)).parse().unwrap();
            env.push(("OPENSHIFT_GEARLB_IP".into(), ip.into()));
            env.push(("OPENSHIFT_GEARLB_PORT".into(), p.port().to_string()));
            env.push(("OPENSHIFT_GEARLB_STATUS_IP".into(), ip.into()));
            env.push((
                "OPENSHIFT_GEARLB_STATUS_PORT".into(),
                free_port(ip).to_string(),
            ));
            // No port proxy between gears here: the public port is the private one.
            env.push(("OPENSHIFT_GEARLB_PROXY_PORT".into(), p.port().to_string()));
            proxy = Some(p);
        }
        std::fs::create_dir_all(h.join(".env/user_vars")).unwrap();
        for (k, v) in &env {
            std::fs::write(h.join(".env").join(k), v).unwrap();
        }
        if balancer.is_some() {
            let cart_env = h.join("gearlb/env");
            std::fs::write(cart_env.join("OPENSHIFT_GEARLB_DIR"), d("gearlb/")).unwrap();
            std::fs::write(
                cart_env.join("OPENSHIFT_GEARLB_IDENT"),
                "gearlb:gearlb:0.1:0.1.0",
            )
            .unwrap();
            let mut all: BTreeMap<String, String> = env.iter().cloned().collect();
            all.insert("OPENSHIFT_GEARLB_DIR".into(), d("gearlb/"));
            for e in std::fs::read_dir(&cart_env).unwrap().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(var) = name.strip_suffix(".erb") {
                    let text = std::fs::read_to_string(e.path()).unwrap();
                    let mut rendered = text.clone();
                    for (k, v) in &all {
                        rendered = rendered.replace(&format!("<%= ENV['{k}'] %>"), v);
                    }
                    assert!(
                        !rendered.contains("<%"),
                        "unrendered template {name}: {rendered}"
                    );
                    std::fs::write(cart_env.join(var), rendered.trim_end()).unwrap();
                }
            }
        }
        Gear {
            home,
            uuid: uuid.into(),
            name: name.into(),
            ip: ip.into(),
            web,
            proxy,
            system_env: node.system_env.path().to_path_buf(),
            tls: None,
        }
    }

    /// The gear's web server speaks TLS (an `ssl_to_gear` endpoint); on a balancer
    /// gear the node has written `.env/SSL_TO_GEAR` (`1`, no newline).
    async fn speak_tls(&mut self) {
        let gear = support::tls_gear::TlsGear::start(
            &format!("tls-{}", self.name),
            format!("{}:0", self.ip).parse().unwrap(),
            &[&self.dns(), &format!("{APP}-{NS}.{DOMAIN}")],
            false,
        )
        .await;
        std::fs::write(
            self.h().join(".env/OPENSHIFT_PHP_PORT"),
            gear.addr.port().to_string(),
        )
        .unwrap();
        if self.proxy.is_some() {
            std::fs::write(self.h().join(".env/SSL_TO_GEAR"), "1").unwrap();
        }
        self.tls = Some(gear);
    }

    /// The port of the gear's web server.
    fn web_port(&self) -> u16 {
        self.tls
            .as_ref()
            .map_or(self.web.addr.port(), |t| t.addr.port())
    }

    fn h(&self) -> &Path {
        self.home.path()
    }

    fn cart(&self) -> PathBuf {
        self.h().join("gearlb")
    }

    fn dns(&self) -> String {
        format!("{}-{NS}.{DOMAIN}", self.name)
    }

    fn proxy(&self) -> SocketAddr {
        self.proxy.expect("a balancer gear")
    }

    /// `Environ.for_gear(gear_dir)`.
    fn for_gear(&self) -> BTreeMap<String, String> {
        let h = self.h();
        let mut env = load_env(&self.system_env);
        env.extend(load_env(&h.join(".env")));
        let mut user = load_env(&h.join(".env/user_vars"));
        user.retain(|k, _| k == "OPENSHIFT_SECRET_TOKEN" || !env.contains_key(k));
        for e in std::fs::read_dir(h).unwrap().flatten() {
            if e.path().join("env").is_dir() && !e.file_name().to_string_lossy().starts_with('.') {
                env.extend(load_env(&e.path().join("env")));
            }
        }
        for e in std::fs::read_dir(h.join(".env")).unwrap().flatten() {
            if e.path().is_dir() && e.file_name() != "user_vars" {
                env.extend(load_env(&e.path()));
            }
        }
        let primary = "OPENSHIFT_PHP_PATH_ELEMENT";
        let mut path: Vec<String> = env
            .iter()
            .filter(|(k, _)| {
                k.starts_with("OPENSHIFT_")
                    && k.ends_with("_PATH_ELEMENT")
                    && k.as_str() != primary
                    && !k.ends_with("_LD_LIBRARY_PATH_ELEMENT")
            })
            .map(|(_, v)| v.clone())
            .collect();
        if let Some(p) = env.get(primary) {
            path.insert(0, p.clone());
        }
        if let Some(p) = env.get("PATH") {
            path.push(p.clone());
        }
        env.insert("PATH".into(), path.join(":"));
        env.extend(user);
        env
    }

    /// `do_control_with_directory` for the gearlb cartridge: the command line the node
    /// builds, the environment it builds, run by the shell. `Err` is what the node turns
    /// into `ShellExecutionException`.
    fn do_control(&self, action: &str, args: Option<&str>) -> Result<String, String> {
        let mut env = self.for_gear();
        let mut cart_env = load_env(&self.cart().join("env"));
        cart_env.remove("PATH");
        env.extend(cart_env);
        let gear_env = load_env(&self.h().join(".env"));
        let mut user = load_env(&self.h().join(".env/user_vars"));
        user.retain(|k, _| k == "OPENSHIFT_SECRET_TOKEN" || !gear_env.contains_key(k));
        env.extend(user);
        let control = self.cart().join("bin/control");
        let args = args.map(shellescape).unwrap_or_default();
        let command = format!("set -e; {} {action} {args}", control.display());
        self.shell(&command, &env, &self.cart())
    }

    /// `cartridge_action` (`bin/setup`, `bin/install`): `<cart>/bin/<action> --version
    /// <v>`, the same environment as `do_control`.
    #[track_caller]
    fn cartridge_action(&self, action: &str, version: &str) -> String {
        let mut env = self.for_gear();
        let mut cart_env = load_env(&self.cart().join("env"));
        cart_env.remove("PATH");
        env.extend(cart_env);
        let command = format!(
            "{} --version {version}",
            self.cart().join("bin").join(action).display()
        );
        match self.shell(&command, &env, &self.cart()) {
            Ok(out) => out,
            Err(e) => panic!("the node would abort here: {e}"),
        }
    }

    /// `connector_execute` of a hook: `<hook> <args…>` with the gear's environment.
    fn hook(&self, hook: &str, args: &str) -> Result<String, String> {
        let env = self.for_gear();
        let command = format!("{} {args}", self.cart().join("hooks").join(hook).display());
        self.shell(&command, &env, &self.cart())
    }

    fn shell(
        &self,
        command: &str,
        env: &BTreeMap<String, String>,
        cwd: &Path,
    ) -> Result<String, String> {
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .env_clear()
            .envs(env)
            .current_dir(cwd)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.code() {
            Some(0) => Ok(stdout),
            rc => Err(format!(
                "ShellExecutionException: rc={rc:?} for {command:?}\nstdout: {stdout}\nstderr: {stderr}"
            )),
        }
    }

    /// A call on one of the node's paths: a nonzero exit aborts the platform's action.
    #[track_caller]
    fn control(&self, action: &str, args: Option<&str>) -> String {
        match self.do_control(action, args) {
            Ok(out) => out,
            Err(e) => panic!("the node would abort here: {e}"),
        }
    }

    /// The node's `update_cluster`: rewrite the registry, then `update-cluster` with
    /// every web entry as one word.
    fn update_cluster(&self, web: &[&Gear], proxies: &[&Gear]) -> String {
        let entry = |g: &Gear, port: serde_json::Value| {
            serde_json::json!({
                "namespace": NS,
                "dns": g.dns(),
                "proxy_hostname": g.ip,
                "proxy_port": port,
                "platform": "linux",
            })
        };
        let mut reg = serde_json::Map::new();
        if !web.is_empty() {
            let w: serde_json::Map<String, serde_json::Value> = web
                .iter()
                .map(|g| (g.uuid.clone(), entry(g, g.web_port().to_string().into())))
                .collect();
            reg.insert("web".into(), w.into());
        }
        if !proxies.is_empty() {
            let p: serde_json::Map<String, serde_json::Value> = proxies
                .iter()
                .map(|g| (g.uuid.clone(), entry(g, 0.into())))
                .collect();
            reg.insert("proxy".into(), p.into());
        }
        let dir = self.h().join("gear-registry");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("gear-registry.json"),
            serde_json::Value::Object(reg).to_string(),
        )
        .unwrap();
        let args: Vec<String> = web
            .iter()
            .map(|g| format!("{}|{}:{}", g.dns(), g.ip, g.web_port()))
            .collect();
        self.control("update-cluster", Some(&args.join(" ")))
    }

    fn ctl_status(&self) -> serde_json::Value {
        let (code, out, err) = ctl(&self.cart().join("run/control.sock"), &["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    }

    fn backend_state(&self, name: &str) -> Option<String> {
        self.ctl_status()["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .map(|b| b["state"].as_str().unwrap_or_default().to_string())
    }

    fn backend_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ctl_status()["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    }

    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.cart().join("run/gearlb.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Gear {
    /// The cartridge starts gearlb detached: a failed test must not leave it running.
    fn drop(&mut self) {
        if self.proxy.is_some() {
            let _ = self.do_control("stop", None);
        }
    }
}

/// The node's `update_proxy_status` on the head gear: the rotation fanned out to every
/// proxy gear of the registry at once, each call on the node's path.
fn update_proxy_status(proxies: &[&Gear], action: &str, target: &str) -> Vec<String> {
    std::thread::scope(|s| {
        let calls: Vec<_> = proxies
            .iter()
            .map(|g| s.spawn(move || g.do_control(action, Some(&format!("persist {target}")))))
            .collect();
        calls
            .into_iter()
            .map(|c| match c.join().unwrap() {
                Ok(out) => out,
                Err(e) => panic!("rotation aborted by the node: {e}"),
            })
            .collect()
    })
}

/// `show stat` on `$OPENSHIFT_HAPROXY_DIR/run/stats`, where haproxy_ctld.rb reads it
/// (through socat, as people do): the `express` row of `server`, split on commas.
fn show_stat(g: &Gear, server: &str) -> Vec<String> {
    let dir = g.for_gear()["OPENSHIFT_HAPROXY_DIR"].clone();
    let out = Command::new("socat")
        .args(["stdio", &format!("unix-connect:{dir}run/stats")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"show stat\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.len() > 4 && f[0] == "express" && f[1] == server)
        .unwrap_or_else(|| panic!("no express,{server} in {text}"))
}

/// Requests through every balancer: which web server answered each.
async fn spread(proxies: &[SocketAddr], n: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let p = proxies[i % proxies.len()];
        let got = get(p, "/", &[("host", "myapp-ns.example.com")])
            .await
            .unwrap();
        assert_eq!(got.status, 200, "through {p}: {}", got.text());
        *seen.entry(got.text()).or_insert(0) += 1;
    }
    seen
}

/// The watchman's view (`gear_state_plugin.rb` `load_ps_table`): daemons (ppid 1) whose
/// command line does not match `/haproxy/` or `/logshifter/` count as the gear's
/// processes. Returns the command lines of every process started from `home` that it
/// would count, and of those it skips.
fn watchman_view(home: &Path) -> (Vec<String>, Vec<String>) {
    let out = Command::new("ps")
        .args(["ax", "--format", "uid,pid=,ppid=,args="])
        .output()
        .unwrap();
    let (mut counted, mut skipped) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.split_whitespace();
        let (Some(_uid), Some(pid), Some(ppid)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let command: Vec<&str> = parts.collect();
        let command = command.join(" ");
        // Only this gear's processes (the test runs every gear as one user).
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
        if !cwd.starts_with(home) {
            continue;
        }
        // The watchman's own skip of non-daemons: only processes init adopted count.
        if ppid != "1" {
            continue;
        }
        if command.contains("haproxy") || command.contains("logshifter") {
            skipped.push(command);
        } else {
            counted.push(command);
        }
    }
    (counted, skipped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cartridge_as_origin_servers_node_drives_it() {
    let cart = cartridge_dir();
    // One public endpoint: every public endpoint of a web_proxy cartridge becomes an
    // application endpoint on the routers.
    let manifest = std::fs::read_to_string(cart.join("metadata/manifest.yml")).unwrap();
    assert_eq!(
        manifest.matches("Public-Port-Name:").count(),
        1,
        "only the HTTP endpoint is public"
    );
    assert!(manifest.contains("Public-Port-Name: PROXY_PORT"));

    let node = Node::new();
    // A fake log shipper, as the node's /usr/bin/logshifter: lines to a file.
    let shipper_dir = tempfile::tempdir().unwrap();
    let shipped = shipper_dir.path().join("shipped.log");
    let shipper = shipper_dir.path().join("logshifter");
    std::fs::write(
        &shipper,
        format!(
            "#!/bin/sh\n# logshifter -tag TAG: stdin to a file, line by line\nwhile IFS= read -r line; do printf '%s\\n' \"$line\" >> {}; done\n",
            shipped.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shipper, std::fs::Permissions::from_mode(0o755)).unwrap();

    // The head gear (the application's uuid and name) and a second balancer gear, each
    // with its web server; two plain web gears.
    let a = Gear::new(&node, APP_UUID, APP, "127.0.0.31", Some(&cart)).await;
    let b_uuid = "5a1e00000000000000000002";
    let b = Gear::new(&node, b_uuid, b_uuid, "127.0.0.32", Some(&cart)).await;
    let w1 = Gear::new(
        &node,
        "5a1e00000000000000000003",
        "5a1e00000000000000000003",
        "127.0.0.41",
        None,
    )
    .await;
    let w2 = Gear::new(
        &node,
        "5a1e00000000000000000004",
        "5a1e00000000000000000004",
        "127.0.0.42",
        None,
    )
    .await;
    // The second balancer gear's node has a log shipper.
    std::fs::write(
        b.h().join(".env/GEARLB_LOGSHIFTER"),
        shipper.display().to_string(),
    )
    .unwrap();
    let balancers = [&a, &b];

    // configure: setup; then start.
    for g in balancers {
        g.cartridge_action("setup", "0.1");
        // The user's configuration: faster checks for this test.
        let conf = g.cart().join("conf/gearlb.toml");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("\n[cluster]\ngossip_interval = \"100ms\"\n[health]\ninterval = \"300ms\"\n");
        std::fs::write(&conf, &text).unwrap();
        let out = g.control("start", None);
        assert!(
            out.contains("CLIENT_RESULT: gearlb instance is started"),
            "{out}"
        );
        assert!(g.control("status", None).contains("is running"));
    }
    // Unknown actions, as the node sends them for every cartridge, exit 0.
    for action in [
        "pre-receive",
        "build",
        "deploy",
        "post-deploy",
        "threaddump",
    ] {
        a.control(action, None);
    }

    // Publishers on every balancer gear; their lines, as `'uuid'='line'` joined and
    // shell-escaped into one word, to every subscriber.
    let mut lines = Vec::new();
    for g in balancers {
        let out = g
            .hook(
                "publish-gearlb-peer",
                &format!("{} {NS} {}", g.name, g.uuid),
            )
            .unwrap();
        let line = out.trim().to_string();
        assert_eq!(
            line,
            format!("{}|{}", g.uuid, g.proxy()),
            "published address"
        );
        lines.push(format!("'{}'='{}'", g.uuid, line));
    }
    let subscriber_input = shellescape(&lines.join(" "));
    for g in balancers {
        g.hook(
            "set-gearlb-peers",
            &format!("{} {NS} {} {subscriber_input}", g.name, g.uuid),
        )
        .unwrap();
    }

    // update_cluster: the registry and the web gears (the balancer gears' own included).
    let web = [&a, &b, &w1, &w2];
    for g in balancers {
        g.update_cluster(&web, &balancers);
    }
    for g in balancers {
        let names = g.backend_names();
        assert_eq!(names.len(), 4, "{names:?}");
        assert!(names.contains(&"local-gear".to_string()));
    }
    // The balancers find each other over their one public port.
    let live = eventually(Duration::from_secs(10), || {
        balancers.iter().all(|g| {
            g.ctl_status()["peers"]
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0]["state"] == "alive")
        })
    })
    .await;
    assert!(
        live,
        "balancers did not gossip over the proxy port: {}",
        a.ctl_status()["peers"]
    );
    let proxies = [a.proxy(), b.proxy()];
    let seen = spread(&proxies, 40).await;
    assert_eq!(seen.len(), 4, "every web gear serves: {seen:?}");

    // WebSockets are sessions where the old autoscaler looks: `express,BACKEND` scur of
    // `show stat` on `run/stats` (read as haproxy_ctld.rb reads it), and the CSV.
    {
        use futures_util::{SinkExt, StreamExt};
        let mut sockets = Vec::new();
        for i in 0..3 {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", a.proxy()))
                .await
                .unwrap();
            ws.send(format!("hi {i}").into()).await.unwrap();
            assert!(ws.next().await.unwrap().unwrap().is_text());
            sockets.push(ws);
        }
        // Where haproxy_ctld.rb looks: `$OPENSHIFT_HAPROXY_DIR/run/stats`.
        let backend_scur = |g: &Gear| -> u64 { show_stat(g, "BACKEND")[4].parse().unwrap() };
        assert_eq!(backend_scur(&a), 3);
        assert_eq!(a.ctl_status()["frontend"]["connections_current"], 3);
        for ws in &mut sockets {
            ws.close(None).await.unwrap();
        }
        drop(sockets);
        let gone = eventually(Duration::from_secs(5), || backend_scur(&a) == 0).await;
        assert!(gone, "closed WebSockets still counted");
    }

    // rotate_and_yield of the head gear, under traffic: out on every balancer (the node
    // passes the head gear's uuid: local-gear on the head balancer, gear-myapp-ns on the
    // other), restart, back in. No request fails and none reaches it while out.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            let end = Instant::now() + Duration::from_secs(60);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                i += 1;
                match get(proxies[i % 2], "/", &[("host", "myapp-ns.example.com")]).await {
                    Ok(g) if g.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("request failed: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        })
    };
    for target in [&a, &w1] {
        update_proxy_status(&balancers, "disable-server", &target.uuid);
        for g in balancers {
            let name = if g.uuid == target.uuid {
                "local-gear".to_string()
            } else {
                format!("gear-{}-{NS}", target.name)
            };
            assert_eq!(
                g.backend_state(&name).as_deref(),
                Some("drained"),
                "{name} on balancer {}",
                g.name
            );
        }
        let before = target.web.requests();
        let seen = spread(&proxies, 30).await;
        assert_eq!(
            target.web.requests(),
            before,
            "rotated out, yet served: {seen:?}"
        );
        // The yield: the gear's web cartridge restarts (nothing to do for this fake).
        update_proxy_status(&balancers, "enable-server", &target.uuid);
        let back = eventually(Duration::from_secs(5), || {
            balancers.iter().all(|g| {
                g.ctl_status()["backends"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|b| b["state"] == "up")
            })
        })
        .await;
        assert!(back, "{}", a.ctl_status()["backends"]);
    }
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed during rotations"
    );
    assert!(ok.load(Ordering::Relaxed) > 20);

    // A rotate-out of a gear no balancer lists yet is kept, and applies when it appears.
    let w3 = Gear::new(
        &node,
        "5a1e00000000000000000005",
        "5a1e00000000000000000005",
        "127.0.0.43",
        None,
    )
    .await;
    update_proxy_status(&balancers, "disable-server", &w3.uuid);
    let web = [&a, &b, &w1, &w2, &w3];
    for g in balancers {
        g.update_cluster(&web, &balancers);
        assert_eq!(
            g.backend_state(&format!("gear-{}-{NS}", w3.name))
                .as_deref(),
            Some("drained")
        );
    }
    spread(&proxies, 20).await;
    assert_eq!(w3.web.requests(), 0);
    update_proxy_status(&balancers, "enable-server", &w3.uuid);

    // Calls while a balancer is stopped are kept and applied at its start.
    let out = b.control("stop", None);
    assert!(
        out.contains("CLIENT_RESULT: gearlb instance is stopped"),
        "{out}"
    );
    assert!(b.control("status", None).contains("is stopped"));
    let w4 = Gear::new(
        &node,
        "5a1e00000000000000000006",
        "5a1e00000000000000000006",
        "127.0.0.44",
        None,
    )
    .await;
    let web = [&a, &b, &w1, &w2, &w3, &w4];
    b.update_cluster(&web, &balancers);
    b.control("disable-server", Some(&format!("persist {}", w2.uuid)));
    b.hook(
        "set-gearlb-peers",
        &format!("{} {NS} {} {subscriber_input}", b.name, b.uuid),
    )
    .unwrap();
    let out = b.control("start", None);
    assert!(out.contains("is started"), "{out}");
    let names = b.backend_names();
    assert!(
        names.contains(&format!("gear-{}-{NS}", w4.name)),
        "{names:?}"
    );
    assert_eq!(
        b.backend_state(&format!("gear-{}-{NS}", w2.name))
            .as_deref(),
        Some("drained"),
        "rotate-out made while stopped"
    );
    // …and the restarted balancer spread that rotation to the other one.
    let spread_out = eventually(Duration::from_secs(5), || {
        a.backend_state(&format!("gear-{}-{NS}", w2.name))
            .as_deref()
            == Some("drained")
    })
    .await;
    assert!(spread_out);
    update_proxy_status(&balancers, "enable-server", &w2.uuid);
    a.update_cluster(&web, &balancers);

    // An application whose registry lists no web gear: the node passes '' (one empty
    // word). Remote gears go; this gear's own web server still serves.
    a.update_cluster(&[], &balancers);
    assert_eq!(a.backend_names(), vec!["local-gear".to_string()]);
    for _ in 0..5 {
        let got = get(a.proxy(), "/", &[("host", "myapp-ns.example.com")])
            .await
            .unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.text(), format!("backend web-{APP}"));
    }
    a.update_cluster(&web, &balancers);

    // The watchman: no balancer process counts as the gear's web server, so a gear
    // whose web server died is still seen dead, and a stopped one stopped.
    for g in balancers {
        let (counted, skipped) = watchman_view(g.h());
        assert!(counted.is_empty(), "the watchman counts {counted:?}");
        assert!(
            skipped.iter().any(|c| c.contains("gearlb")),
            "the balancer runs as a daemon: {skipped:?}"
        );
    }
    let (_, skipped) = watchman_view(b.h());
    assert!(
        skipped.iter().any(|c| c.contains("logshifter")),
        "b's output goes through the node's log shipper: {skipped:?}"
    );
    let shipped_text = eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&shipped).is_ok_and(|t| t.contains("gearlb serving"))
    })
    .await;
    assert!(shipped_text, "log lines reach the log shipper");
    let log = a.h().join("app-root/logs/gearlb.log");
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("gearlb serving"));

    // tidy empties the logs, and the balancer goes on logging.
    a.control("tidy", None);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0);
    a.control("reload", None);
    let relogged = eventually(Duration::from_secs(5), || {
        std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)
    })
    .await;
    assert!(relogged, "log written after tidy");

    // restart and stop as the node does them.
    let before = a.pid().unwrap();
    let out = a.control("restart", None);
    assert!(out.contains("is started"), "{out}");
    assert_ne!(a.pid().unwrap(), before);
    for g in balancers {
        let pid = g.pid().unwrap();
        let out = g.control("stop", None);
        assert!(out.contains("is stopped"), "{out}");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "process gone");
        let (counted, skipped) = watchman_view(g.h());
        assert!(
            counted.is_empty() && skipped.is_empty(),
            "{counted:?} {skipped:?}"
        );
        // Stopping a stopped balancer is fine too.
        assert!(g.control("stop", None).contains("already stopped"));
    }
}

/// What the node sends that is not a gear: an error, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_the_node_never_sends_are_refused() {
    let cart = cartridge_dir();
    let node = Node::new();
    let a = Gear::new(&node, APP_UUID, APP, "127.0.0.35", Some(&cart)).await;
    a.cartridge_action("setup", "0.1");
    a.control("start", None);
    for bad in ["persist", "persist $(reboot)", "persist ../../etc"] {
        let e = a.do_control("disable-server", Some(bad)).unwrap_err();
        assert!(e.contains("CLIENT_ERROR"), "{e}");
    }
    assert!(a.ctl_status()["rotations"].as_array().unwrap().is_empty());
    a.control("stop", None);
}

/// `SSL_TO_GEAR=1`, as the node writes it when the web cartridge's endpoint has
/// `ssl_to_gear`: the public port passes TLS through to the gears (which hold the
/// certificates), checks them with a TLS hello, drains by connection, shows
/// connections where the old autoscaler reads them, and still carries the gossip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_to_gear_passes_tls_through_to_the_gears() {
    let cart = cartridge_dir();
    let node = Node::new();
    let mut a = Gear::new(&node, APP_UUID, APP, "127.0.0.36", Some(&cart)).await;
    let b_uuid = "5a1e00000000000000000012";
    let mut b = Gear::new(&node, b_uuid, b_uuid, "127.0.0.37", Some(&cart)).await;
    let w_uuid = "5a1e00000000000000000013";
    let mut w1 = Gear::new(&node, w_uuid, w_uuid, "127.0.0.46", None).await;
    // A web gear still speaking plain HTTP on its port: the TLS hello marks it down.
    let p_uuid = "5a1e00000000000000000014";
    let plain = Gear::new(&node, p_uuid, p_uuid, "127.0.0.47", None).await;
    for g in [&mut a, &mut b, &mut w1] {
        g.speak_tls().await;
    }
    let balancers = [&a, &b];
    for g in balancers {
        g.cartridge_action("setup", "0.1");
        let conf = g.cart().join("conf/gearlb.toml");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("\n[cluster]\ngossip_interval = \"100ms\"\n[health]\ninterval = \"300ms\"\n");
        std::fs::write(&conf, &text).unwrap();
        assert!(g.control("start", None).contains("is started"));
    }
    let mut lines = Vec::new();
    for g in balancers {
        let out = g
            .hook(
                "publish-gearlb-peer",
                &format!("{} {NS} {}", g.name, g.uuid),
            )
            .unwrap();
        lines.push(format!("'{}'='{}'", g.uuid, out.trim()));
    }
    let input = shellescape(&lines.join(" "));
    for g in balancers {
        g.hook(
            "set-gearlb-peers",
            &format!("{} {NS} {} {input}", g.name, g.uuid),
        )
        .unwrap();
    }
    let web = [&a, &b, &w1, &plain];
    for g in balancers {
        g.update_cluster(&web, &balancers);
    }
    // Gossip shares the TLS port: the balancers find each other.
    let live = eventually(Duration::from_secs(10), || {
        balancers.iter().all(|g| {
            g.ctl_status()["peers"]
                .as_array()
                .is_some_and(|p| p.len() == 1 && p[0]["state"] == "alive")
        })
    })
    .await;
    assert!(
        live,
        "no gossip over the TLS port: {}",
        a.ctl_status()["peers"]
    );
    let plain_name = format!("gear-{}", plain.dns().split('.').next().unwrap());
    let down = eventually(Duration::from_secs(10), || {
        balancers
            .iter()
            .all(|g| g.backend_state(&plain_name).as_deref() == Some("down"))
    })
    .await;
    assert!(down, "{}", a.ctl_status()["backends"]);
    let row = show_stat(&a, &plain_name);
    assert_eq!(
        row[36], "L6RSP",
        "check_status of a plain HTTP gear: {row:?}"
    );

    // A TLS client through either balancer completes a handshake with the gear's own
    // certificate and gets its answer.
    let roots: Vec<_> = [&a, &b, &w1]
        .iter()
        .map(|g| g.tls.as_ref().unwrap().cert.clone())
        .collect();
    let names: Vec<String> = [&a, &b, &w1]
        .iter()
        .map(|g| g.tls.as_ref().unwrap().name.clone())
        .collect();
    let app_dns = format!("{APP}-{NS}.{DOMAIN}");
    let mut on_w1 = None;
    let mut held = Vec::new();
    for i in 0..12 {
        let g = balancers[i % 2];
        let (tls, who) = support::tls_gear::through(g.proxy(), &app_dns, &roots)
            .await
            .map_err(|e| format!("through {}: {e}", g.name))
            .unwrap();
        assert!(names.contains(&who), "{who}");
        if who == names[2] && i % 2 == 0 && on_w1.is_none() {
            on_w1 = Some(tls);
        } else {
            // Held open: least connections spreads the next ones.
            held.push(tls);
        }
    }
    let tls = on_w1.expect("a connection through the head gear reached w1");
    drop(held);
    let settled = eventually(Duration::from_secs(5), || {
        show_stat(&a, "BACKEND")[4] == "1"
    })
    .await;
    assert!(settled, "{:?}", show_stat(&a, "BACKEND"));
    // Where the old autoscaler looks: the connection is a session.
    let row = show_stat(&a, "BACKEND");
    assert_eq!(row[4], "1", "express,BACKEND scur: {row:?}");
    assert_eq!(row[75], "tcp", "mode: {row:?}");

    // rotate-out as the broker drives it: waits on the open TLS connection, then
    // completes once it closes.
    let w1_name = format!("gear-{}", w1.dns().split('.').next().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let (pa, pb) = (a.proxy(), b.proxy());
    let handle = tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let call = s.spawn(|| {
                let out = update_proxy_status(&balancers, "disable-server", w_uuid);
                let _ = tx.send(());
                out
            });
            // Meanwhile no new connection reaches w1, on either balancer.
            tokio::runtime::Handle::current().block_on(async {
                let mut drained = false;
                let end = Instant::now() + Duration::from_secs(10);
                while !drained && Instant::now() < end {
                    drained = a.backend_state(&w1_name).as_deref() == Some("draining");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                assert!(drained, "w1 is draining");
                for p in [pa, pb, pa, pb] {
                    let (_c, who) = support::tls_gear::through(p, &app_dns, &roots)
                        .await
                        .unwrap();
                    assert_ne!(who, names[2], "a draining gear takes no new connection");
                }
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(500)).is_err(),
                "disable-server returned while a connection was open"
            );
            drop(tls);
            call.join().unwrap()
        })
    });
    for out in &handle {
        assert!(out.contains("\"status\":\"success\""), "{out}");
    }
    for g in balancers {
        g.control("stop", None);
    }
}
