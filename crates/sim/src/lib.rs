//! The cluster simulator: M balancers in one process, each running the real cluster
//! ([`gearlb::cluster`]), subset and health sync ([`gearlb::cluster::sync`]), rotation
//! ([`gearlb::rotation`]) and scaler election ([`gearlb::scaler`]) code, over an
//! in-memory network with configurable latency, loss, partitions and stalls.
//!
//! Owns the simulated network ([`SimNet`], a chitchat [`Transport`]) and the
//! simulated balancers ([`Sim`]). The network wraps chitchat's own
//! [`ChannelTransport`] (which encodes and decodes every message as on the wire and
//! enforces the 65 507-byte message limit) and adds, at the receiving end, per-message
//! latency, random loss, partitions (groups of addresses that cannot reach each other)
//! and stalls (a node that neither sends nor receives for a while). A balancer's whole
//! process can be stopped too ([`Sim::stall_process`], as SIGSTOP or CPU starvation
//! would): none of its tasks runs meanwhile ([`Gate`]), and its clock shows the gap. Every balancer has its own routing table with the N gears.
//! No health checks or proxies run: gears are up unless a test says otherwise.
//!
//! Meant to run on a tokio current-thread runtime with paused time (`start_paused`):
//! virtual time then advances only when every balancer is idle, so the protocol's
//! timing (convergence, rotate-out latency, failure detection, failover) does not
//! depend on the host's speed, and M = 100-300 balancers fit on one core. CPU time is
//! still real: what a balancer costs is process CPU per balancer per virtual second.
//! `examples/cluster_sim.rs` measures configurations into `bench/CLUSTER.md`;
//! `tests/cluster_sim.rs` runs a small one in CI.
//!
//! [`Transport`]: chitchat::transport::Transport
//! [`ChannelTransport`]: chitchat::transport::ChannelTransport

mod net;
mod node;
mod scenario;
mod stall;

pub use net::{NetConfig, SimNet, Traffic, MTU};
pub use node::{node_addr, process_cpu, Death, Sim, SimConfig, SimNode};
pub use scenario::RotateOutcome;
pub use stall::Gate;
