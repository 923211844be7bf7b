//! Debian's ActiveMQ (5.17, `apt-get install activemq`) for tests: each [`Broker`] is a
//! JVM of its own, started from `/usr/share/java/activemq-run.jar` on a generated
//! `activemq.xml` in a temporary directory (KahaDB there too), with one STOMP connector on
//! 127.0.0.1 (a port from [`super::free_port`]), no JMX, and by default the routing
//! plugin's user and authorizations and `forcePersistencyModeBrokerPlugin` (the plugin's
//! messages are not persistent; without it they would not survive a broker restart).
//! Or (`Options::netns`) in a network namespace a test made, its connector on that
//! namespace's address, and (`Options::xml`) on an `activemq.xml` of the test's own.
//!
//! Publishing: [`publish`] does what origin-server's ActiveMQ plugin does for each event
//! (a new connection, CONNECT, SEND, DISCONNECT), with std sockets, independent of
//! `gearlb::stomp`; [`Plugin`] runs the plugin itself (Ruby); [`yaml_of`] is the body it
//! sends. [`Observer`] is a plain auto-ack subscriber that sees what the broker
//! dispatches.
//!
//! A test that needs ActiveMQ fails, saying to install it, where it is not installed.

mod plugin;
mod relay;
mod wire;
mod yaml;

use std::fs;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

#[allow(unused_imports)]
pub use plugin::{Event, Mapping, Plugin, MIRROR};
#[allow(unused_imports)]
pub use relay::Relay;
#[allow(unused_imports)]
pub use wire::{Observer, RawFrame};
#[allow(unused_imports)]
pub use yaml::yaml_of;

/// What starts ActiveMQ (Debian's package `activemq`).
pub const JAR: &str = "/usr/share/java/activemq-run.jar";
/// `activemq.home`: the package's libraries.
pub const HOME: &str = "/usr/share/activemq";
/// The routing plugin's credentials (its README and defaults).
pub const USER: &str = "routinginfo";
pub const PASSWORD: &str = "routinginfopasswd";
/// How long a broker may take to answer STOMP after its start (2-3 s on two idle cores;
/// much more when parallel builds share them).
const START_DEADLINE: Duration = Duration::from_secs(120);

/// How a broker is set up.
#[derive(Clone, Debug)]
pub struct Options {
    /// `simpleAuthenticationPlugin` with [`USER`]/[`PASSWORD`] and the plugin README's
    /// authorizations, plus the virtual topic's names.
    pub auth: bool,
    /// `forcePersistencyModeBrokerPlugin persistenceFlag="true"`.
    pub force_persistency: bool,
    /// Run the JVM in this network namespace (`ip netns exec`), its STOMP connector on
    /// the namespace's address, port [`NETNS_PORT`]; the harness reaches it from a thread
    /// in the namespace. Default: none, 127.0.0.1 on a free port.
    pub netns: Option<Netns>,
    /// An `activemq.xml` of one's own instead of the generated one (with
    /// [`Options::netns`] only: its STOMP connector must answer on the namespace's
    /// address, port [`NETNS_PORT`]). `auth` says whether it takes [`USER`]/[`PASSWORD`].
    pub xml: Option<String>,
    /// More files of the broker's `conf` directory (`activemq.conf`): name, content.
    pub conf_files: Vec<(String, String)>,
}

/// A network namespace made by the test (`/run/netns/<name>`) and the broker's address
/// there.
#[derive(Clone, Debug)]
pub struct Netns {
    pub name: String,
    pub ip: IpAddr,
}

/// The STOMP port of a broker in a namespace of its own (ActiveMQ's usual one).
pub const NETNS_PORT: u16 = 61613;

impl Default for Options {
    fn default() -> Options {
        Options {
            auth: true,
            force_persistency: true,
            netns: None,
            xml: None,
            conf_files: Vec::new(),
        }
    }
}

/// Fail (not skip) where ActiveMQ is not installed.
pub fn require_activemq() {
    assert!(
        std::path::Path::new(JAR).is_file(),
        "{JAR} is missing: this test runs Debian's ActiveMQ; install it with \
         `apt-get install -y activemq` (CI installs it)"
    );
}

/// One ActiveMQ broker; killed and its directory removed on drop.
pub struct Broker {
    dir: tempfile::TempDir,
    ip: IpAddr,
    port: u16,
    opts: Options,
    child: Option<Child>,
}

impl Broker {
    /// Start one and wait until it answers a STOMP CONNECT.
    pub fn start(opts: Options) -> Broker {
        require_activemq();
        let dir = tempfile::Builder::new()
            .prefix("gearlb-activemq")
            .tempdir()
            .unwrap();
        for d in ["conf", "data", "tmp"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let (ip, port) = match &opts.netns {
            Some(ns) => (ns.ip, NETNS_PORT),
            None => (IpAddr::from([127, 0, 0, 1]), super::free_port("127.0.0.1")),
        };
        assert!(
            opts.xml.is_none() || opts.netns.is_some(),
            "an activemq.xml of one's own needs a namespace of its own (its port is fixed)"
        );
        let xml = match &opts.xml {
            Some(xml) => xml.clone(),
            None => config(SocketAddr::new(ip, port), &opts),
        };
        fs::write(dir.path().join("conf/activemq.xml"), xml).unwrap();
        fs::write(dir.path().join("conf/log4j.properties"), LOG4J).unwrap();
        for (name, content) in &opts.conf_files {
            fs::write(dir.path().join("conf").join(name), content).unwrap();
        }
        let mut b = Broker {
            dir,
            ip,
            port,
            opts,
            child: None,
        };
        b.launch();
        b
    }

    /// Start two at once (they take seconds each).
    pub fn start_two(opts: Options) -> (Broker, Broker) {
        let o = opts.clone();
        let other = std::thread::spawn(move || Broker::start(o));
        let one = Broker::start(opts);
        (one, other.join().unwrap())
    }

    fn launch(&mut self) {
        let d = self.dir.path();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let prop = |k: &str, v: &std::path::Path| format!("-D{k}={}", v.display());
        let mut cmd = match &self.opts.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.name, "java"]);
                c
            }
            None => Command::new("java"),
        };
        let child = cmd
            .args(["-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1"])
            .arg(format!("-Dactivemq.home={HOME}"))
            .arg(prop("activemq.base", d))
            .arg(prop("activemq.conf", &d.join("conf")))
            .arg(prop("activemq.data", &d.join("data")))
            .arg(prop("java.io.tmpdir", &d.join("tmp")))
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                d.join("conf/log4j.properties").display()
            ))
            .args(["-jar", JAR, "start"])
            .arg(format!(
                "xbean:file:{}",
                d.join("conf/activemq.xml").display()
            ))
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("java (OpenJDK, a dependency of Debian's activemq package)");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "ActiveMQ exited ({status}) before answering on {}; its log:\n{}",
                    self.addr(),
                    self.log()
                );
            }
            let (addr, credentials) = (self.addr(), self.credentials());
            let last = match self.here(move || wire::ping(addr, credentials)) {
                Ok(()) => return,
                Err(e) => e,
            };
            if Instant::now() > deadline {
                panic!(
                    "ActiveMQ did not answer STOMP on {} within {START_DEADLINE:?} ({last}); its log:\n{}",
                    self.addr(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// Run `f` where the broker can be reached: in its namespace when it has one.
    fn here<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        match &self.opts.netns {
            Some(ns) => super::in_netns(&ns.name, f),
            None => f(),
        }
    }

    /// `host:port`, as a consumer's broker list takes it.
    pub fn address(&self) -> String {
        self.addr().to_string()
    }

    /// The java process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn credentials(&self) -> Option<(&'static str, &'static str)> {
        self.opts.auth.then_some((USER, PASSWORD))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("broker.log")
    }

    /// What the broker printed (its log4j output at INFO and up).
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn signal(&self, sig: Signal) {
        if let Some(pid) = self.pid().and_then(|p| Pid::from_raw(p as i32)) {
            let _ = kill_process(pid, sig);
        }
    }

    /// SIGTERM and wait for the exit (SIGKILL after 30 s).
    pub fn stop(&mut self) {
        self.signal(Signal::CONT);
        self.signal(Signal::TERM);
        let Some(mut child) = self.child.take() else {
            return;
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                eprintln!("ActiveMQ did not stop on SIGTERM within 30 s: SIGKILL");
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL and wait.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stop (if running) and start again on the same port and data directory: the
    /// store, and with it durable subscriptions and persistent messages, survives.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Start again after [`Broker::stop`] or [`Broker::kill`].
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the broker is running");
        self.launch();
    }

    /// SIGSTOP: the broker stops answering, its sockets stay open.
    pub fn pause(&self) {
        self.signal(Signal::STOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(Signal::CONT);
    }

    /// Publish as the routing plugin does: see [`publish`].
    pub fn publish(&self, destination: &str, body: &str) {
        let (addr, credentials) = (self.addr(), self.credentials());
        let (d, b) = (destination.to_string(), body.to_string());
        self.here(move || publish(addr, credentials, &d, &b))
            .unwrap_or_else(|e| panic!("publish to {destination}: {e}"));
    }

    /// A plain subscriber of `destination` (auto-ack).
    pub fn observe(&self, destination: &str) -> Observer {
        let (addr, credentials) = (self.addr(), self.credentials());
        let d = destination.to_string();
        self.here(move || Observer::subscribe(addr, credentials, &d))
            .unwrap_or_else(|e| panic!("subscribe to {destination}: {e}"))
    }

    /// The command prefix that runs a process where the broker can be reached
    /// (`ip netns exec NAME`, or nothing).
    pub fn prefix(&self) -> Vec<String> {
        match &self.opts.netns {
            Some(ns) => vec!["ip".into(), "netns".into(), "exec".into(), ns.name.clone()],
            None => Vec::new(),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: String = log
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            eprintln!(
                "--- ActiveMQ on {} (log tail) ---\n{tail}\n---",
                self.addr()
            );
        }
        self.signal(Signal::CONT);
        self.kill();
    }
}

/// Publish `body` to `destination` as origin-server's ActiveMQ plugin does for each
/// event (ruby-stomp's frames, byte for byte): a new connection, `CONNECT` (STOMP 1.0,
/// `login`/`passcode`), `SEND` with `content-type:text/plain; charset=UTF-8` and
/// `content-length`, `DISCONNECT` without receipt. Then (unlike the plugin, which does
/// not wait) it reads until the broker closes the connection, which it does once it has
/// handled the SEND: publishes in a row reach the broker in that order.
pub fn publish(
    addr: SocketAddr,
    credentials: Option<(&str, &str)>,
    destination: &str,
    body: &str,
) -> Result<(), String> {
    const TYPE: &str = "content-length:0\ncontent-type:text/plain; charset=UTF-8\n";
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut connect = String::from("CONNECT\n");
    if let Some((user, pass)) = credentials {
        connect.push_str(&format!("login:{user}\npasscode:{pass}\n"));
    }
    connect.push_str(TYPE);
    connect.push_str("\n\0");
    s.write_all(connect.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let answer = wire::read_frame(&mut s, &mut buf)?;
    if answer.command != "CONNECTED" {
        return Err(format!("CONNECT answered by {}", answer.describe()));
    }
    let mut send = format!(
        "SEND\ndestination:{destination}\ncontent-length:{}\ncontent-type:text/plain; charset=UTF-8\n\n",
        body.len()
    )
    .into_bytes();
    send.extend_from_slice(body.as_bytes());
    send.push(0);
    send.extend_from_slice(format!("DISCONNECT\n{TYPE}\n\0").as_bytes());
    s.write_all(&send).map_err(|e| e.to_string())?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .map_err(|e| format!("waiting for the broker to close after DISCONNECT: {e}"))?;
    buf.extend_from_slice(&rest);
    if let Some(i) = buf.windows(6).position(|w| w == b"ERROR\n") {
        return Err(String::from_utf8_lossy(&buf[i..]).into_owned());
    }
    Ok(())
}

/// The broker's configuration: one STOMP connector on `bind`.
fn config(bind: SocketAddr, opts: &Options) -> String {
    let mut plugins = String::new();
    if opts.force_persistency {
        plugins.push_str("      <forcePersistencyModeBrokerPlugin persistenceFlag=\"true\"/>\n");
    }
    if opts.auth {
        plugins.push_str(&format!(
            r#"      <simpleAuthenticationPlugin>
        <users>
          <authenticationUser username="{USER}" password="{PASSWORD}" groups="routinginfo,everyone"/>
        </users>
      </simpleAuthenticationPlugin>
      <authorizationPlugin>
        <map>
          <authorizationMap>
            <authorizationEntries>
              <authorizationEntry topic="routinginfo.>" write="routinginfo" read="routinginfo" admin="routinginfo"/>
              <authorizationEntry queue="routinginfo.>" write="routinginfo" read="routinginfo" admin="routinginfo"/>
              <authorizationEntry topic="VirtualTopic.routinginfo" write="routinginfo" read="routinginfo" admin="routinginfo"/>
              <authorizationEntry queue="Consumer.*.VirtualTopic.routinginfo" write="routinginfo" read="routinginfo" admin="routinginfo"/>
              <authorizationEntry topic="ActiveMQ.Advisory.>" write="everyone" read="everyone" admin="everyone"/>
            </authorizationEntries>
          </authorizationMap>
        </map>
      </authorizationPlugin>
"#
        ));
    }
    format!(
        r#"<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="gearlb-test" useJmx="false"
          dataDirectory="${{activemq.data}}">
    <persistenceAdapter>
      <kahaDB directory="${{activemq.data}}/kahadb"/>
    </persistenceAdapter>
    <plugins>
{plugins}    </plugins>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://{bind}?transport.closeAsync=false"/>
    </transportConnectors>
  </broker>
</beans>
"#
    )
}

/// The broker's log to stdout (its file), INFO and up.
const LOG4J: &str = "log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{HH:mm:ss,SSS} %-5p %c{1} - %m%n
";
