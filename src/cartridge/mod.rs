//! The cartridge: what the node platform runs in a balancer gear, in Rust.
//!
//! Owns the node's calling convention for `bin/control`, `bin/setup` and the
//! publish/subscribe hooks, which are one-line scripts that `exec gearlb cartridge …`
//! (nodes run bash 4.1/4.2, whose quirks no logic should meet). It is driven exactly as
//! origin-server's v2 node drives a web-proxy cartridge (`v2_cart_model.rb`
//! `do_control`, `cartridge_actions.rb`): the gear's environment only; arguments joined
//! into one shell-escaped word; the gear's uuids naming gears; and **any nonzero exit
//! aborting the deploy or restart in progress** (`ShellExecutionException`, which the
//! node's `rescue => e` does not catch). So an action exits nonzero only when the
//! platform should stop: the balancer cannot start, an argument is not what the node
//! ever sends, or a call could be neither applied nor kept.
//!
//! Actions: `start` `stop` `restart` `reload` `force-reload` `status` `tidy`
//! `update-cluster` `disable-server` `enable-server`; any other exits 0. Calls that
//! change what the balancer routes (`update-cluster`, `disable-server`,
//! `enable-server`, the peer list) go to the running balancer over its control socket;
//! while it is stopped they are recorded (see [`crate::state::Pending`]) and applied at
//! its start, as the old cartridge rewrote its configuration even when stopped. Output
//! lines carry the node's prefixes `CLIENT_RESULT:`, `CLIENT_MESSAGE:`, `CLIENT_ERROR:`.
//!
//! Here: the invocations and their dispatch. `convention`: paths, the gear's
//! environment, argument words, output lines; `actions`: `bin/control`; `pending`:
//! calls to the running balancer, or recorded while it is stopped; `setup`: `bin/setup`
//! and the publish hook; [`daemon`], [`node`], [`registry`].

mod actions;
mod convention;
pub mod daemon;
pub mod node;
mod pending;
pub mod registry;
mod setup;

use crate::config::{Env, ProcessEnv};
use crate::control::Request;
use actions::control_action;
use convention::{additions, load_config, Out, Paths};
use pending::{call_or_record, describe_bad, report};
use setup::{publish_peer, setup};

pub use setup::DEFAULT_CONF;

/// What the node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `bin/control ACTION [ARGS…]`.
    Control { action: String, args: Vec<String> },
    /// `bin/setup [--version V]`.
    Setup { args: Vec<String> },
    /// `hooks/publish-gearlb-peer <gear_name> <namespace> <gear_uuid>`.
    PublishPeer { args: Vec<String> },
    /// `hooks/set-gearlb-peers <gear_name> <namespace> <gear_uuid> "<list>"`.
    SetPeers { args: Vec<String> },
}

/// Run one invocation; returns the exit code.
pub fn main(inv: Invocation) -> i32 {
    let mut out = Out::default();
    let code = match run(inv, &ProcessEnv, &mut out) {
        Ok(code) => code,
        Err(e) => {
            out.error(e);
            1
        }
    };
    out.print();
    code
}

fn run(inv: Invocation, env: &dyn Env, out: &mut Out) -> Result<i32, String> {
    match inv {
        Invocation::Control { action, args } => control_action(&action, &args, env, out),
        Invocation::Setup { args } => setup(&args, env, out),
        Invocation::PublishPeer { args } => publish_peer(&args, env, out),
        Invocation::SetPeers { args } => {
            // `<gear_name> <namespace> <gear_uuid> "<list>"`: the list is everything
            // after the first three (one word as the broker sends it, or several).
            let list: Vec<String> = args.iter().skip(3).cloned().collect();
            let paths = Paths::find(env)?;
            let extra = additions(env);
            let cfg = load_config(&paths, env, &extra, out)?;
            let reply = call_or_record(&cfg, Request::SetPeers { args: list.clone() }, |p| {
                crate::gear::parse_peers(&list).map_err(|bad| describe_bad(&bad))?;
                p.set_peers = Some(list.clone());
                Ok("peer list".to_string())
            })?;
            Ok(report(reply, out))
        }
    }
}
