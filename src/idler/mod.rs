//! Keeping the application's head gear seen by the node's idler while the application
//! serves (`[idler]`, on by default in a gear).
//!
//! The idler of an OpenShift v2 node (`oo-last-access`, run by `oo-auto-idler`) reads
//! the node frontend's access log (Apache on port 80, `openshift_log`), maps each
//! line's virtual host to a gear by its DNS name, ignores the lines whose client
//! address is one of the node's own (`ip -o addr show`) or whose host is `localhost`,
//! and idles a head gear not seen for as many hours as it is told (whole hours; 24 in
//! its README, 240 by default). The traffic of an HA application reaches its balancers
//! through the nodes' port proxies and is never in that log: its head gear idles while
//! it serves. A balancer cannot keep its own gear seen (its node ignores its address),
//! but a balancer on another node can.
//!
//! So, while the application serves (this balancer had client requests or connections
//! since the last round, has a WebSocket open, or a live peer published requests of its
//! own), each balancer requests every peer balancer's gear once per `idler.interval`
//! (10 minutes: six times within the shortest threshold the idler accepts) through the
//! node frontend of that gear's node: the registry's `proxy_hostname` for the proxy
//! gear, port `idler.frontend_port`, with the gear's DNS name as `Host` (the head
//! gear's is the application's). Gears on this balancer's own node are skipped (the
//! idler would ignore the request). An application with one balancer sends nothing.
//!
//! The request is `HEAD /health`: the cartridge's manifest maps `/health` of the gear's
//! name with the `health` option, which origin-server's frontends answer themselves
//! from a file (were it proxied, it would reach the balancer's status listener, never
//! its proxy port): nothing loads the gears, and no balancer counts it as a client (a
//! balancer kept serving by another's requests would keep an idle application awake
//! for ever). `HEAD` asks for no body.
//!
//! Parts: `plan` (pure: which peers, when, the request and its answer, how often a
//! failure is logged) and `task` (the loop, the requests, the counters shown by
//! `gearlb ctl peers`). Failures are only counted and logged at debug level, at most
//! once a minute; a request takes at most `idler.timeout`.

mod plan;
mod task;

pub use plan::{answered, node_names, targets, Pacer, Sample, Target, PATH};
pub use task::{run, Counters, FrontendTouch, KeepSeenReport, Settings, Touch};
