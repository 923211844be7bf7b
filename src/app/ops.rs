//! The control-plane operations other than rotate: `update-cluster`, `set-peers`,
//! `scale`, reload, the stats socket's `disable server`/`enable server`, and the calls
//! recorded while stopped; and the dispatch of control requests to them.
//!
//! Operations are serialised by the configuration's async mutex; the request path
//! never sees it.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, warn};

use super::parts::{config_specs, scaler_settings, App};
use crate::config::{self, backends_fingerprint, ConfigErrors, EXIT_CONFIG};
use crate::control::{self, Reply, Request};
use crate::gear::{self, BadEntry};
use crate::health::HealthSettings;
use crate::proxy::Settings;
use crate::rotation::{complete, Op};
use crate::routing::{BackendSpec, Change};
use crate::scaler;

pub use crate::gear::EXIT_BAD_ENTRIES;

impl App {
    /// Apply `update-cluster`: the complete list of web gears.
    pub async fn update_cluster(&self, args: &[String]) -> Reply {
        let _serialised = self.config.lock().await;
        let parsed = gear::parse_entries(args);
        if parsed.valid.is_empty() && !parsed.invalid.is_empty() {
            return Reply {
                exit_code: EXIT_BAD_ENTRIES,
                message: format!(
                    "no valid entry; nothing changed\n{}",
                    describe_bad(&parsed.invalid)
                ),
                data: serde_json::json!({ "invalid": parsed.invalid }),
            };
        }
        let current = self.router.specs();
        let own = self.id.dns.as_deref().map(str::to_ascii_lowercase);
        let mut specs: Vec<BackendSpec> = parsed
            .valid
            .iter()
            // Our own gear is `local-gear`, reached directly rather than through the
            // node's port proxy.
            .filter(|e| self.id.local_gear.is_none() || own.as_deref() != Some(e.gear_dns.as_str()))
            .map(|e| BackendSpec {
                name: e.server_name(),
                addr: e.addr.clone(),
                gear_dns: Some(e.gear_dns.clone()),
                cookie: None,
                backup: false,
                max_connections: None,
                version: None,
                compatible: Vec::new(),
                send_proxy: None,
            })
            .collect();
        // A gear whose entry was malformed keeps its current address rather than being
        // dropped: bad input changes nothing.
        let mut kept = Vec::new();
        for bad in &parsed.invalid {
            if let Some(label) = gear::entry_label(&bad.entry) {
                let name = format!("gear-{label}");
                if let Some(spec) = current.iter().find(|s| s.name == name) {
                    if !specs.iter().any(|s| s.name == name) {
                        specs.push(spec.clone());
                        kept.push(name);
                    }
                }
            }
        }
        if let Some(l) = &self.id.local_gear {
            specs.push(l.clone());
        }
        let change = self.router.replace_backends(specs);
        log_change("update-cluster", &change);
        let persist_error = self.persist().await.err();
        if let Some(e) = &persist_error {
            error!(error = %e, "update-cluster applied in memory but not saved");
        }
        let mut message = describe_change(&change);
        // The node's list was empty (its registry has no web gear) and this gear has no
        // web server of its own: nothing is left to route to. Applied, as the platform
        // means it, but said loudly.
        if self.router.specs().is_empty() {
            warn!("update-cluster left no web gear: requests get 503 until a gear is listed");
            message.push_str(
                "\nwarning: no web gear left to route to: requests get 503 until update-cluster lists one",
            );
        }
        if !kept.is_empty() {
            message.push_str(&format!(
                "\nkept with their current address: {}",
                kept.join(", ")
            ));
        }
        if !parsed.invalid.is_empty() {
            message.push('\n');
            message.push_str(&describe_bad(&parsed.invalid));
        }
        if let Some(e) = &persist_error {
            message.push_str(&format!(
                "\nwarning: applied but NOT saved, a restart would lose it: {e}"
            ));
        }
        let exit_code = if !parsed.invalid.is_empty() {
            EXIT_BAD_ENTRIES
        } else if persist_error.is_some() {
            1
        } else {
            0
        };
        Reply {
            exit_code,
            message,
            data: serde_json::json!({
                "change": change,
                "invalid": parsed.invalid,
                "kept": kept,
                "persist_error": persist_error,
            }),
        }
    }

    /// One manual scale event (`gearlb ctl scale up|down`), from any balancer.
    pub async fn scale(&self, event: &str) -> Reply {
        let event = match event {
            "up" | "scale-up" => "scale-up",
            "down" | "scale-down" => "scale-down",
            other => {
                return Reply::error(
                    EXIT_CONFIG,
                    format!("scale {:?}: use up or down", gear::printable(other)),
                )
            }
        };
        let (outcome, text) = self.scaler.manual(event).await;
        match outcome {
            scaler::policy::Outcome::Done | scaler::policy::Outcome::AtLimit => {
                Reply::ok(text, serde_json::Value::Null)
            }
            scaler::policy::Outcome::Failed => Reply::error(1, text),
        }
    }

    /// Replace the known peer balancers (subscriber hook).
    pub async fn set_peers(&self, args: &[String]) -> Reply {
        let _serialised = self.config.lock().await;
        let Some(cluster) = &self.cluster else {
            return Reply::error(1, "gossip is off (no cluster.transport = \"http\" or cluster.listen): peers cannot be set");
        };
        let peers = match gear::parse_peers(args) {
            Ok(p) => p,
            Err(bad) => {
                return Reply {
                    exit_code: EXIT_BAD_ENTRIES,
                    message: format!("peer list refused, nothing changed\n{}", describe_bad(&bad)),
                    data: serde_json::json!({ "invalid": bad }),
                }
            }
        };
        let before = cluster.known();
        cluster.set_known(peers.clone());
        if before != peers {
            info!(peers = peers.len(), "known peer balancers replaced");
            self.scaler.membership_replaced();
        }
        let mut message = format!("{} peer balancer(s) known", peers.len());
        let mut exit_code = 0;
        if let Err(e) = self.persist().await {
            error!(error = %e, "peers applied but not saved");
            message.push_str(&format!("\nwarning: applied but NOT saved: {e}"));
            exit_code = 1;
        }
        Reply {
            exit_code,
            message,
            data: serde_json::json!({ "peers": peers }),
        }
    }

    /// Apply the calls recorded while this balancer was stopped, through the same code
    /// as live ones (rotations were merged at start); forget them once saved.
    pub(super) async fn apply_pending(&self, p: crate::state::Pending) {
        if let Some(args) = &p.set_peers {
            let r = self.set_peers(args).await;
            info!(
                exit_code = r.exit_code,
                "set-peers recorded while stopped applied: {}", r.message
            );
        }
        if let Some(args) = &p.update_cluster {
            let r = self.update_cluster(args).await;
            info!(
                exit_code = r.exit_code,
                "update-cluster recorded while stopped applied: {}", r.message
            );
        }
        match self.persist().await {
            Ok(()) => {
                let cleared = match &self.saved.state_lock {
                    Some(lock) => self.saved.store.clear_pending(lock),
                    None => Ok(()),
                };
                if let Err(e) = cleared {
                    warn!(error = %e, "applied calls recorded while stopped not cleared: they apply again at the next start");
                }
            }
            Err(e) => {
                error!(error = %e, "calls recorded while stopped applied but not saved: kept for the next start")
            }
        }
    }

    /// Rotate the backend whose server name is `server` (as in the CSV: `local-gear`,
    /// `gear-<gearname>-<ns>`, a `[[backends]]` name) out or in on every balancer, and
    /// return at once: the op is stamped, gossiped now and persisted like those of
    /// `rotate-out`/`rotate-in`, but nothing waits for the drain or for acknowledgments
    /// (the stats socket's `disable server` / `enable server`). Returns the gear's sticky
    /// label and whether an op was submitted: none when that op is already in force, or
    /// for `in` when the gear was never rotated out (as HAProxy's `enable server` of a
    /// server not in maintenance).
    pub async fn rotate_server(
        &self,
        server: &str,
        op: Op,
    ) -> Result<(String, bool), RotateServerError> {
        let label = self
            .router
            .snapshot()
            .get(server)
            .map(|e| e.backend.sticky.clone())
            .ok_or_else(|| RotateServerError::NoSuchServer(gear::printable(server)))?;
        let in_force = self.rotations.ops().get(&label).map(|o| o.op);
        if in_force == Some(op) || (in_force.is_none() && op == Op::In) {
            return Ok((label, false));
        }
        let view = self.cluster_view();
        if complete::refused_for_quorum(false, view.enabled, view.live.len(), view.known_count) {
            return Err(RotateServerError::NoQuorum {
                live: view.live.len(),
                known: view.known_count,
            });
        }
        let timeout = self.config.lock().await.rotate.timeout;
        let submitted = self.rotations.submit(&label, op, &self.id.self_id, timeout);
        self.rotations.fan_out(submitted.epoch());
        info!(gear = %label, server, epoch = %submitted.epoch(), op = ?op, "rotation submitted (stats socket), not waiting for acknowledgments");
        Ok((label, true))
    }

    /// Re-read the config file with `env`; apply what can change without a restart.
    pub async fn reload(&self, env: &dyn config::Env) -> Reply {
        let mut cfg = self.config.lock().await;
        let mut new = match config::load(cfg.file.as_deref(), env) {
            Ok(c) => c,
            Err(ConfigErrors(problems)) => {
                return reload_refused("configuration has problems; keeping the old one", &problems)
            }
        };
        new.log.requests_forced = cfg.log.requests_forced;
        // New certificates first: a broken one refuses the whole reload, like any other
        // configuration problem (connections already open keep their certificates).
        let new_tls = match &self.tls {
            None => None,
            Some(acceptor) => {
                match crate::tls::load_with(
                    &new.tls,
                    new.proxy.h2c,
                    acceptor.resumption(),
                    acceptor.aliases(),
                ) {
                    Ok(t) => Some(t),
                    Err(problems) => {
                        return reload_refused(
                            "TLS certificates unusable; keeping the old ones",
                            &problems,
                        )
                    }
                }
            }
        };
        let mut notes = Vec::new();
        // What stays in force: restart-only settings keep their running values until a
        // restart (the settings applied below are built from `new` as read).
        let mut applied = new.clone();
        for what in config::keep_restart_only(&mut applied, &cfg) {
            notes.push(format!("{what} changed: takes effect on restart"));
        }
        self.proxy
            .settings
            .store(Arc::new(Settings::from_config(&new)));
        if let (Some(tls), Some(new_tls)) = (&self.tls, new_tls) {
            tls.replace(new_tls);
            notes.push("TLS certificates reloaded (for new connections)".into());
        }
        self.health.store(Arc::new(HealthSettings::of(&new)));
        self.services.apply(&applied).await;
        self.coverage.store(new.subset.coverage, Ordering::Relaxed);
        self.scaler.settings.store(Arc::new(scaler_settings(&new)));
        self.frontend.set_average_window(new.scaler.average_window);
        let backends_changed =
            backends_fingerprint(&cfg.backends) != backends_fingerprint(&new.backends);
        let mut reply_data = serde_json::Value::Null;
        *cfg = applied;
        if backends_changed {
            if let Ok(mut f) = self.saved.fingerprint.lock() {
                *f = backends_fingerprint(&cfg.backends);
            }
            let change = self.router.replace_backends(config_specs(&cfg));
            log_change("reload", &change);
            notes.push(format!(
                "[[backends]] changed: {}",
                describe_change(&change)
            ));
            reply_data = serde_json::json!({ "change": change });
            if let Err(e) = self.persist().await {
                error!(error = %e, "reloaded backends not saved");
                notes.push(format!("warning: backends applied but NOT saved: {e}"));
            }
        }
        info!("configuration reloaded");
        let mut message = "configuration reloaded".to_string();
        for n in notes {
            message.push_str("\n  ");
            message.push_str(&n);
        }
        Reply::ok(message, reply_data)
    }
}

/// Why [`App::rotate_server`] changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotateServerError {
    /// The name, made printable.
    #[error("no server \"{0}\"")]
    NoSuchServer(String),
    #[error("only {live} of {known} known balancers reachable: no quorum, nothing changed")]
    NoQuorum { live: usize, known: usize },
}

/// A refused reload: every problem logged and listed in the reply (exit 64); the
/// configuration in force stays.
fn reload_refused(why: &str, problems: &[config::Problem]) -> Reply {
    error!(problems = problems.len(), "reload refused: {why}");
    for p in problems {
        error!("  {p}");
    }
    let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
    Reply::error(
        EXIT_CONFIG,
        format!(
            "configuration not reloaded, old one kept:\n{}",
            list.join("\n")
        ),
    )
}

fn log_change(source: &str, c: &Change) {
    if c.is_empty() {
        info!(source, unchanged = c.unchanged, "backend set unchanged");
        return;
    }
    for name in &c.added {
        info!(source, backend = %name, "backend added");
    }
    for name in &c.readdressed {
        info!(source, backend = %name, "backend address changed");
    }
    for name in &c.removed {
        info!(source, backend = %name, "backend removed (in-flight requests finish)");
    }
}

fn describe_change(c: &Change) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "added: {}; removed: {}; address changed: {}; unchanged: {}",
        list(&c.added),
        list(&c.removed),
        list(&c.readdressed),
        c.unchanged
    )
}

fn describe_bad(bad: &[BadEntry]) -> String {
    bad.iter()
        .map(|b| format!("invalid entry {:?}: {} (skipped)", b.entry, b.reason))
        .collect::<Vec<_>>()
        .join("\n")
}

impl control::Handler for App {
    async fn handle(&self, req: Request, progress: control::Progress) -> Reply {
        match req {
            Request::Status => match serde_json::to_value(self.status()) {
                Ok(v) => Reply::ok("", v),
                Err(e) => Reply::error(1, e.to_string()),
            },
            Request::UpdateCluster { args } => self.update_cluster(&args).await,
            Request::Peers => {
                // The view, and this balancer's own scaler report (whether it acts):
                // small enough to poll often, unlike `status` with every gear.
                let mut data = serde_json::to_value(self.cluster_view()).unwrap_or_default();
                if let Some(o) = data.as_object_mut() {
                    o.insert(
                        "scaler".into(),
                        serde_json::to_value(self.scaler.report()).unwrap_or_default(),
                    );
                    o.insert(
                        "keep_seen".into(),
                        serde_json::to_value(self.keep_seen.read()).unwrap_or_default(),
                    );
                }
                Reply::ok("", data)
            }
            Request::SetPeers { args } => self.set_peers(&args).await,
            Request::Scale { event } => self.scale(&event).await,
            Request::Rotate {
                gear,
                op,
                timeout_ms,
                node,
                service,
            } => {
                self.rotate(
                    service.as_deref(),
                    &gear,
                    op,
                    timeout_ms.map(Duration::from_millis),
                    &progress,
                    node,
                )
                .await
            }
            Request::Reload { env } => {
                let env: HashMap<String, String> = env.into_iter().collect();
                self.reload(&env).await
            }
            Request::Spi => self.spi_reply(false).await,
            Request::SpiReconcile => self.spi_reply(true).await,
            Request::Services => {
                let report = self.services.report().await;
                Reply::ok("", serde_json::to_value(report).unwrap_or_default())
            }
            Request::Register {
                service,
                backend,
                addr,
                hosts,
                paths,
                ttl_ms,
                version,
                compatible,
            } => {
                let default_ttl = self.config.lock().await.discovery.ttl;
                let ttl = ttl_ms.map(Duration::from_millis).unwrap_or(default_ttl);
                let reg = crate::services::registration(service, backend, &addr, hosts, paths, ttl)
                    .and_then(|r| r.with_version(version, compatible));
                match reg {
                    Err(why) => Reply::error(EXIT_CONFIG, why),
                    Ok(reg) => match self.services.register(reg, ttl).await {
                        Ok(m) => Reply::ok(m, serde_json::Value::Null),
                        Err(why) => Reply::error(1, why),
                    },
                }
            }
            Request::Cutover {
                service,
                version,
                timeout_ms,
            } => {
                let default = self.config.lock().await.rotate.timeout;
                let timeout = timeout_ms.map(Duration::from_millis).unwrap_or(default);
                match self.services.cutover(&service, &version, timeout).await {
                    Ok(m) => Reply::ok(m, serde_json::Value::Null),
                    Err(why) => Reply::error(1, format!("cutover: {why}")),
                }
            }
            Request::Hold {
                service,
                version,
                release,
            } => match self.services.hold(&service, &version, release).await {
                Ok(m) => Reply::ok(m, serde_json::Value::Null),
                Err(why) => Reply::error(1, format!("hold: {why}")),
            },
            Request::Deregister { service, backend } => {
                match self.services.deregister(&service, &backend).await {
                    Ok(m) => Reply::ok(m, serde_json::Value::Null),
                    Err(why) => Reply::error(1, why),
                }
            }
        }
    }
}

impl crate::status::socket::Source for App {
    async fn set_server(
        &self,
        server: &str,
        enable: bool,
    ) -> Result<(), crate::status::socket::AdminError> {
        use crate::status::socket::AdminError;
        let op = if enable { Op::In } else { Op::Out };
        match self.rotate_server(server, op).await {
            Ok(_) => Ok(()),
            Err(RotateServerError::NoSuchServer(_)) => Err(AdminError::NoSuchServer),
            Err(e) => Err(AdminError::Refused(format!("gearlb: {e}."))),
        }
    }
}
