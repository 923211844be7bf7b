//! The rotate command's driver: name the gear, submit (or join) the op, wait for the
//! balancers' acknowledgments, and answer in the platform's rotate JSON shape.
//!
//! When the wait is over is decided by [`crate::rotation::complete`] (pure); this file
//! does the clock, the waiting, the progress lines and the result.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::parts::App;
use crate::cluster::ClusterView;
use crate::control::{self, Reply};
use crate::gear;
use crate::rotation::complete::{self, Command, Peer, Seen, Waiting};
use crate::rotation::Op;

impl App {
    /// The gear a rotate command names: its sticky label. GEAR may be the server name
    /// (`gear-<gearname>-<ns>`, `local-gear`), the label (`<gearname>-<ns>`), a gear uuid
    /// as the node passes it (this balancer's own, the head gear's, one in the node's
    /// gear registry, or any other: `<uuid>-<ns>`), or the gear name alone (unique
    /// prefix of a label before `-<ns>`). A gear no balancer lists yet is named all the
    /// same: its rotation is kept and applies when it appears.
    fn resolve(&self, service: Option<&str>, arg: &str) -> Result<String, String> {
        // A service's backend: `<service>/<backend>` in the rotation register.
        if let Some(service) = service.filter(|s| *s != crate::config::DEFAULT_SERVICE) {
            let backend = arg;
            let router = self
                .services
                .router_of(service)
                .ok_or_else(|| format!("unknown service {:?}", gear::printable(service)))?;
            let table = router.snapshot();
            let e = table
                .entries()
                .iter()
                .find(|e| e.backend.name() == backend || e.backend.sticky == backend)
                .ok_or_else(|| {
                    format!(
                        "service {service:?} has no backend {:?}",
                        gear::printable(backend)
                    )
                })?;
            return Ok(format!("{service}/{}", e.backend.sticky));
        }
        self.resolve_gear(arg)
    }

    fn resolve_gear(&self, arg: &str) -> Result<String, String> {
        let table = self.router.snapshot();
        let labels: Vec<&str> = table
            .entries()
            .iter()
            .map(|e| e.backend.sticky.as_str())
            .collect();
        let by_name = table
            .entries()
            .iter()
            .find(|e| e.backend.name() == arg)
            .map(|e| e.backend.sticky.clone());
        if let Some(l) = by_name {
            return Ok(l);
        }
        if labels.contains(&arg) {
            return Ok(arg.to_string());
        }
        use crate::cartridge::registry::{self, label_for_uuid};
        let registry = match &self.id.registry_path {
            Some(p) if registry::is_uuid(arg) => registry::Registry::load(p).unwrap_or_else(|e| {
                warn!(error = %e, "gear registry unreadable: naming gears without it");
                registry::Registry::default()
            }),
            _ => registry::Registry::default(),
        };
        let n = &self.id.names;
        let same = |k: &Option<String>| k.as_deref().is_some_and(|k| k.eq_ignore_ascii_case(arg));
        if same(&n.own_uuid) || same(&n.app_uuid) || registry.get(arg).is_some() {
            if let Some(l) = label_for_uuid(arg, n, &registry) {
                return Ok(l);
            }
        }
        let with_ns = self
            .id
            .names
            .namespace
            .as_ref()
            .map(|ns| format!("{arg}-{ns}"));
        if let Some(l) = with_ns.filter(|l| labels.contains(&l.as_str())) {
            return Ok(l);
        }
        let prefixed: Vec<&&str> = labels
            .iter()
            .filter(|l| l.starts_with(&format!("{arg}-")))
            .collect();
        match prefixed.as_slice() {
            [one] => Ok(one.to_string()),
            [] => {
                // A gear another balancer knows but this one does not (yet): a uuid
                // names `<uuid>-<ns>`, and a label-shaped name itself.
                if let Some(l) = label_for_uuid(arg, n, &registry) {
                    Ok(l)
                } else if gear::is_dns_name(arg) && arg.contains('-') && !arg.contains('.') {
                    Ok(arg.to_ascii_lowercase())
                } else {
                    Err(format!("unknown gear {:?}", gear::printable(arg)))
                }
            }
            many => Err(format!(
                "{:?} is ambiguous: {}",
                gear::printable(arg),
                many.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// Rotate a gear out (drain everywhere) or in, and wait until every live balancer
    /// acknowledged. The result is the platform's rotate JSON shape.
    ///
    /// `node` is the node platform's call (`bin/control disable-server|enable-server`),
    /// which asks every balancer itself, in parallel, and aborts the deploy on any
    /// nonzero exit: there the outcome is this balancer's own (success once it has
    /// drained the gear, or put it back; peers that did not acknowledge are reported,
    /// not failed), and no quorum is needed (draining is always safe, and the op reaches
    /// the others when they are back). Either way a rotation of the gear in the same
    /// direction already in force is joined, not repeated.
    pub async fn rotate(
        &self,
        service: Option<&str>,
        arg: &str,
        op: Op,
        timeout: Option<Duration>,
        progress: &control::Progress,
        node: bool,
    ) -> Reply {
        let default_timeout = self.config.lock().await.rotate.timeout;
        let verb = match op {
            Op::Out => "rotate-out",
            Op::In => "rotate-in",
        };
        let label = match self.resolve(service, arg) {
            Ok(l) => l,
            Err(e) => return Reply::error(1, format!("{verb}: {e}")),
        };
        let target = match &self.id.names.namespace {
            _ if node => arg.to_string(),
            Some(ns) => label
                .strip_suffix(&format!("-{ns}"))
                .unwrap_or(&label)
                .to_string(),
            None => label.clone(),
        };
        let view = self.cluster_view();
        if complete::refused_for_quorum(node, view.enabled, view.live.len(), view.known_count) {
            let msg = format!(
                "{verb} {label}: only {} of {} known balancers reachable: no quorum, nothing changed",
                view.live.len(),
                view.known_count
            );
            let result = rotate_result(
                &target,
                false,
                BTreeMap::from([(
                    self.id.self_id.clone(),
                    proxy_result(
                        &self.id.self_id,
                        &target,
                        "failure",
                        vec![],
                        vec![msg.clone()],
                    ),
                )]),
            );
            return Reply {
                exit_code: 1,
                message: msg,
                data: result,
            };
        }
        let timeout = timeout.unwrap_or(default_timeout);
        let started = tokio::time::Instant::now();
        // The node asks every balancer at once: the first op taken wins, the others
        // join it (as does a repeated command).
        let joined = self
            .rotations
            .ops()
            .get(&label)
            .filter(|o| o.op == op)
            .cloned();
        let submitted = match joined {
            Some(o) => o,
            None => {
                let o = self.rotations.submit(&label, op, &self.id.self_id, timeout);
                // The balancer that took the command hands its op to every live peer
                // at once. Not on the node's path: the node asks every balancer itself,
                // and M balancers each pushing to all would be M² messages.
                if !node {
                    self.rotations.fan_out(o.epoch());
                }
                o
            }
        };
        let give_up = complete::give_up(op, timeout);
        let cmd = Command {
            self_id: &self.id.self_id,
            op,
            node,
            give_up,
        };
        let mut waiting = Waiting::new(submitted.epoch());
        info!(gear = %label, epoch = %waiting.epoch, "{verb} started");
        let mut last_line = String::new();
        let mut views = self.cluster.as_ref().map(|c| c.subscribe());
        let mut notes = self.cluster.as_ref().map(|c| c.subscribe_direct());
        let mut own_acks = self.rotations.subscribe_acks();
        let (round, outcome) = loop {
            let view = match &self.cluster {
                Some(c) => c.view(),
                None => Arc::new(ClusterView::single(&self.id.self_id)),
            };
            let in_force = self.rotations.ops().get(&label).cloned();
            let own = self.rotations.acks().get(&label).cloned();
            // Each peer's acknowledgment from gossip or, sooner, from its note.
            let direct = self
                .cluster
                .as_ref()
                .map(|c| c.direct_acks(&label))
                .unwrap_or_default();
            let done = complete::done_state(op);
            let peers: Vec<Peer<'_>> = view
                .peers
                .iter()
                .map(|p| Peer {
                    id: p.id.as_deref(),
                    live: p.live,
                    ack: complete::newest_ack(
                        p.id.as_ref()
                            .and_then(|id| view.acks.get(id))
                            .and_then(|m| m.get(&label)),
                        p.id.as_ref().and_then(|id| direct.get(id)),
                        &waiting.epoch,
                        done,
                    ),
                })
                .collect();
            let round = complete::round(
                &cmd,
                &waiting,
                &Seen {
                    in_force: in_force.as_ref(),
                    own: own.as_ref(),
                    peers: &peers,
                    elapsed: started.elapsed(),
                },
            );
            waiting = round.waiting.clone();
            let line = format!(
                "{verb} {label}: acks {}/{}, in flight {}, time left {}s",
                round.progress.acked.len(),
                round.progress.acked.len() + round.progress.pending.len(),
                round.progress.inflight,
                match op {
                    Op::Out => timeout.saturating_sub(started.elapsed()).as_secs(),
                    Op::In => round.left.as_secs(),
                }
            );
            if line != last_line {
                let _ = progress.send(line.clone());
                last_line = line;
            }
            if let Some(outcome) = round.outcome {
                break (round, outcome);
            }
            // Wake on news (a peer's ack, our own, a change of the live set), or after
            // a tenth of a second for the countdown.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = own_acks.changed() => {}
                _ = async {
                    match views.as_mut() {
                        Some(v) => { let _ = v.changed().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
                _ = async {
                    match notes.as_mut() {
                        Some(n) => { let _ = n.changed().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        };
        let complete::Progress {
            acked,
            pending,
            inflight,
            forced,
        } = round.progress;
        let superseded = round.superseded;

        let view = self.cluster_view();
        let mut results = BTreeMap::new();
        let complete::Outcome { ok, self_ok } = outcome;
        for id in acked.iter().chain(pending.iter()) {
            let mut messages = Vec::new();
            let mut errors = Vec::new();
            let good = acked.contains(id);
            if good {
                messages.push(match op {
                    Op::Out => format!("gear {target} drained"),
                    Op::In => format!("gear {target} active"),
                });
                if let Some(n) = forced.get(id).filter(|n| **n > 0) {
                    messages.push(format!(
                        "forced: {n} request(s) or tunnel(s) cut at the {timeout:?} deadline"
                    ));
                }
            } else if node && self_ok {
                errors.push(format!(
                    "no acknowledgment within {:?} (reported, not failed: the node asks this balancer itself)",
                    started.elapsed()
                ));
            } else {
                errors.push(format!("no acknowledgment within {give_up:?}"));
            }
            if let Some(s) = &superseded {
                errors.push(format!("superseded by a later {:?} from {}", s.op, s.by));
            }
            let status = if good && superseded.is_none() {
                "success"
            } else {
                "failure"
            };
            results.insert(
                id.clone(),
                proxy_result(id, &target, status, messages, errors),
            );
        }
        for p in view.peers.iter().filter(|p| p.known && !p.live) {
            let id = p.id.clone().unwrap_or_else(|| p.addr.clone());
            results.insert(
                id.clone(),
                proxy_result(
                    &id,
                    &target,
                    "unreachable",
                    vec![],
                    vec![format!(
                        "balancer {} unreachable (dead in gossip): not waited for",
                        p.addr
                    )],
                ),
            );
        }
        let total_forced: u64 = forced.values().sum();
        let message = format!(
            "{verb} {label}: {} in {:.1}s; {} balancer(s) acknowledged{}{}",
            if ok { "success" } else { "FAILED" },
            started.elapsed().as_secs_f64(),
            acked.len(),
            if total_forced > 0 {
                format!(", {total_forced} forced")
            } else {
                String::new()
            },
            if inflight > 0 && !ok {
                format!(", {inflight} still in flight")
            } else {
                String::new()
            },
        );
        info!(gear = %label, ok, forced = total_forced, "{verb} finished");
        let rc = &self.seen.rotation_counters;
        let counter = match (op, ok) {
            (Op::Out, true) => &rc.out_ok,
            (Op::Out, false) => &rc.out_failed,
            (Op::In, true) => &rc.in_ok,
            (Op::In, false) => &rc.in_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        rc.forced.fetch_add(total_forced, Ordering::Relaxed);
        rc.duration_ms
            .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
        Reply {
            exit_code: if ok { 0 } else { 1 },
            message,
            data: rotate_result(&target, ok, results),
        }
    }
}

fn proxy_result(
    proxy: &str,
    target: &str,
    status: &str,
    messages: Vec<String>,
    errors: Vec<String>,
) -> serde_json::Value {
    serde_json::json!({
        "status": status,
        "proxy_gear_uuid": proxy,
        "target_gear_uuid": target,
        "messages": messages,
        "errors": errors,
    })
}

fn rotate_result(
    target: &str,
    ok: bool,
    results: BTreeMap<String, serde_json::Value>,
) -> serde_json::Value {
    serde_json::json!({
        "status": if ok { "success" } else { "failure" },
        "target_gear_uuid": target,
        "proxy_results": results,
    })
}
