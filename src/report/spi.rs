//! What a router says of its routing SPI ([`SpiReport`]): the broker it consumes from,
//! the events by what became of them, the last failures with their reasons, the table
//! (where it came from, what it routes, how current it is), the last reconciliation's
//! repairs, the peer routers' tables, and the applications refused a route; and the
//! report as text ([`text`]). Plain data, part of the status report (`routing_spi`) and
//! of `gearlb ctl spi [--json]`; `crate::spi` fills it.

use serde::{Deserialize, Serialize};

/// An event that could not be applied, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub at_ms: u64,
    pub message_id: String,
    /// Empty when the body could not be read.
    pub action: String,
    /// `<app>-<namespace>`, when known.
    pub service: String,
    pub reason: String,
}

/// The last reconciliation with the broker's REST API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    /// Reconciliations done (whole ones).
    pub runs: u64,
    /// When the last one ended (Unix ms).
    pub last_ms: Option<u64>,
    /// Why the last one could not be done.
    pub error: Option<String>,
    /// What the last one repaired (and what it kept or could not repair), as said.
    pub differences: Vec<String>,
    /// Differences repaired since the start.
    pub repaired_total: u64,
}

/// A peer router's table, as its gossip says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTable {
    pub id: String,
    pub digest: String,
    pub applied: u64,
    /// Its table routes the same as this router's.
    pub agrees: bool,
}

/// Events by what became of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Events {
    /// Delivered by the broker (redeliveries included).
    pub received: u64,
    /// Applied (whether or not they changed the table).
    pub applied: u64,
    /// Delivered again after being applied: recognised and not applied again.
    pub duplicates: u64,
    /// Refused (a malformed body, a bad certificate): acknowledged, nothing changed.
    pub failed: u64,
    /// Not routing changes (`add_gear`, `delete_gear`, unknown actions): left alone.
    pub ignored: u64,
}

/// The table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableReport {
    /// Where it came from at start: `state file`, `peer <id>`, `REST API`, `empty`.
    pub source: String,
    pub applications: usize,
    /// Applications with a load-balancer endpoint: routed.
    pub routed: usize,
    pub aliases: usize,
    /// Aliases with a certificate of their own served.
    pub certificates: usize,
    /// What it routes, summed up (equal on routers that agree).
    pub digest: String,
    /// Events taken in since the table began.
    pub events: u64,
    /// Seconds since it was last known current (a broker connected, a peer's or the
    /// REST API's table).
    pub age_s: Option<u64>,
}

/// What `gearlb ctl spi` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpiReport {
    pub destination: String,
    pub client_id: String,
    pub brokers: Vec<String>,
    /// `/health` answers 200 (a broker connected, or the table young enough).
    pub healthy: bool,
    pub broker: BrokerReport,
    pub events: Events,
    pub failures: Vec<Failure>,
    pub table: TableReport,
    pub reconcile: Option<ReconcileReport>,
    pub peers: Vec<PeerTable>,
    /// Applications refused a route (a host another service has), and why.
    pub refused: Vec<String>,
    pub keep_seen: crate::idler::KeepSeenReport,
}

/// The consumer's state (see [`crate::stomp::StatusReport`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerReport {
    pub connected: Option<String>,
    pub connected_since_ms: Option<u64>,
    pub connections: u64,
    pub last_error: Option<String>,
    pub last_error_ms: Option<u64>,
}

/// The report as text, for people (`gearlb ctl spi`).
pub fn text(r: &SpiReport) -> String {
    let mut out = String::new();
    let ms_ago = |ms: u64| crate::time::unix_ms().saturating_sub(ms) / 1000;
    out.push_str(&format!(
        "routing SPI: {} as {} ({})\n",
        r.destination,
        r.client_id,
        if r.healthy { "healthy" } else { "NOT healthy" }
    ));
    match &r.broker.connected {
        Some(b) => out.push_str(&format!(
            "broker: connected to {b} for {}s\n",
            r.broker.connected_since_ms.map(ms_ago).unwrap_or(0)
        )),
        None => out.push_str(&format!(
            "broker: not connected (tried {}){}\n",
            r.brokers.join(", "),
            r.broker
                .last_error
                .as_ref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        )),
    }
    let e = &r.events;
    out.push_str(&format!(
        "events: {} received, {} applied, {} delivered again, {} refused, {} left alone\n",
        e.received, e.applied, e.duplicates, e.failed, e.ignored
    ));
    let t = &r.table;
    out.push_str(&format!(
        "table: {} applications ({} routed), {} aliases, {} certificates; digest {}; from {}{}\n",
        t.applications,
        t.routed,
        t.aliases,
        t.certificates,
        t.digest,
        t.source,
        t.age_s
            .map(|a| format!("; current {a}s ago"))
            .unwrap_or_default()
    ));
    for f in &r.failures {
        out.push_str(&format!(
            "refused {} ({} {}) {}s ago: {}\n",
            f.message_id,
            if f.action.is_empty() { "?" } else { &f.action },
            f.service,
            ms_ago(f.at_ms),
            f.reason
        ));
    }
    if let Some(rc) = &r.reconcile {
        out.push_str(&format!(
            "reconciliation: {} runs, {} differences repaired{}\n",
            rc.runs,
            rc.repaired_total,
            rc.error
                .as_ref()
                .map(|e| format!("; last failed: {e}"))
                .unwrap_or_default()
        ));
        for d in &rc.differences {
            out.push_str(&format!("  {d}\n"));
        }
    }
    for p in &r.peers {
        out.push_str(&format!(
            "peer {}: digest {} ({} events){}\n",
            p.id,
            p.digest,
            p.applied,
            if p.agrees {
                ""
            } else {
                ": DIFFERS from this router's"
            }
        ));
    }
    for f in &r.refused {
        out.push_str(&format!("not routed: {f}\n"));
    }
    out
}
