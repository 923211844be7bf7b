//! Measure a simulated cluster (`gearlb_sim`): M balancers running the real cluster,
//! rotation and scaler code in one process, on virtual time.
//!
//! `cargo run --release --example cluster_sim -- --m 30 --n 1000 [--coverage 10]
//!  [--rounds 20] [--idle 20] [--failovers 3] [--partition 20] [--loss 0.0]
//!  [--latency-ms 1] [--jitter-ms 1] [--gossip-ms 200] [--seed 1] [--stalls 0]`
//!
//! Phases, in this order: convergence from a cold start; an idle period (CPU and bytes
//! per balancer); rotate-outs (each from another balancer, then rotated back in); stalls
//! (one balancer at a time neither sends nor receives for `--stall-ms`, below the
//! failure detector's timeout: nobody may be declared dead); a partition (a minority of
//! 40% cut off, then healed: the number of acting scalers is sampled every 10 ms of
//! virtual time throughout); scaler failovers (the acting scaler crashes); and subset
//! churn (a balancer leaves, then a new one joins: changed subset memberships in every
//! routing table). Prints one JSON object per run (the last line) after a readable log.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gearlb::rotation::Op;
use gearlb_sim::{process_cpu, Sim, SimConfig};
use tokio::time::Instant;

struct Args {
    cfg: SimConfig,
    rounds: usize,
    idle: u64,
    failovers: usize,
    partition: u64,
    stalls: usize,
    stall_ms: u64,
}

fn parse() -> Args {
    let mut a = Args {
        cfg: SimConfig::default(),
        rounds: 20,
        idle: 20,
        failovers: 3,
        partition: 20,
        stalls: 0,
        stall_ms: 1000,
    };
    a.cfg.m = 10;
    a.cfg.n = 100;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < argv.len() {
        let v = &argv[i + 1];
        let num = || {
            v.parse::<u64>()
                .unwrap_or_else(|_| panic!("{}: not a number: {v}", argv[i]))
        };
        match argv[i].as_str() {
            "--m" => a.cfg.m = num() as usize,
            "--n" => a.cfg.n = num() as usize,
            "--coverage" => a.cfg.coverage = num() as u32,
            "--rounds" => a.rounds = num() as usize,
            "--idle" => a.idle = num(),
            "--failovers" => a.failovers = num() as usize,
            "--partition" => a.partition = num(),
            "--stalls" => a.stalls = num() as usize,
            "--stall-ms" => a.stall_ms = num(),
            "--loss" => a.cfg.net.loss = v.parse().expect("--loss: a probability"),
            "--latency-ms" => a.cfg.net.latency = Duration::from_millis(num()),
            "--jitter-ms" => a.cfg.net.jitter = Duration::from_millis(num()),
            "--gossip-ms" => a.cfg.gossip_interval = Duration::from_millis(num()),
            "--seed" => {
                a.cfg.seed = num();
                a.cfg.net.seed = a.cfg.seed;
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    a
}

fn pct(v: &[f64], p: usize) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((s.len() * p).div_ceil(100)).clamp(1, s.len()) - 1;
    s[i]
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Per-balancer cost over a phase: (% of a core, kbit/s sent per peer).
struct Meter {
    cpu: Duration,
    t: Instant,
    bytes: u64,
}

impl Meter {
    fn start(sim: &Sim) -> Meter {
        Meter {
            cpu: process_cpu(),
            t: Instant::now(),
            bytes: sim
                .running()
                .iter()
                .map(|i| sim.traffic(*i).bytes_sent)
                .sum(),
        }
    }

    /// (CPU milliseconds, kilobytes sent) per balancer since the start.
    fn totals(&self, sim: &Sim) -> (f64, f64) {
        let m = sim.running().len().max(1) as f64;
        let bytes: u64 = sim
            .running()
            .iter()
            .map(|i| sim.traffic(*i).bytes_sent)
            .sum();
        (
            (process_cpu() - self.cpu).as_secs_f64() * 1000.0 / m,
            (bytes - self.bytes) as f64 / 1000.0 / m,
        )
    }

    fn read(&self, sim: &Sim) -> (f64, f64) {
        let m = sim.running().len().max(1) as f64;
        let secs = self.t.elapsed().as_secs_f64().max(1e-9);
        let cpu = (process_cpu() - self.cpu).as_secs_f64() / secs / m * 100.0;
        let bytes: u64 = sim
            .running()
            .iter()
            .map(|i| sim.traffic(*i).bytes_sent)
            .sum();
        let kbit = (bytes - self.bytes) as f64 * 8.0 / 1000.0 / secs / m / (m - 1.0).max(1.0);
        (cpu, kbit)
    }
}

/// Subset memberships of every running balancer.
fn subsets(sim: &Sim) -> BTreeMap<String, BTreeSet<String>> {
    sim.running()
        .into_iter()
        .map(|i| {
            let n = &sim.nodes[i];
            let s = n
                .router
                .snapshot()
                .entries()
                .iter()
                .filter(|e| e.in_subset)
                .map(|e| e.backend.sticky.clone())
                .collect();
            (n.id.clone(), s)
        })
        .collect()
}

/// (changed memberships per balancer present before and after: mean, max).
fn churn(
    a: &BTreeMap<String, BTreeSet<String>>,
    b: &BTreeMap<String, BTreeSet<String>>,
) -> (f64, usize, usize) {
    let mut total = 0;
    let mut max = 0;
    let mut n = 0;
    for (id, x) in a {
        if let Some(y) = b.get(id) {
            let c = x.symmetric_difference(y).count();
            total += c;
            max = max.max(c);
            n += 1;
        }
    }
    (total as f64 / n.max(1) as f64, max, total)
}

async fn run(args: Args) -> serde_json::Value {
    let cfg = args.cfg.clone();
    let wall = std::time::Instant::now();
    let mut out = serde_json::json!({
        "m": cfg.m, "n": cfg.n, "coverage": cfg.coverage,
        "gossip_ms": cfg.gossip_interval.as_millis() as u64,
        "latency_ms": cfg.net.latency.as_millis() as u64, "loss": cfg.net.loss,
    });
    let cpu0 = process_cpu();
    let mut sim = Sim::start(cfg.clone()).await.expect("simulation starts");
    let conv = sim
        .wait_until(Duration::from_secs(120), |s| s.converged())
        .await;
    println!(
        "M={} N={} C={}%: converged in {:?} (cpu {:?})",
        cfg.m,
        cfg.n,
        cfg.coverage,
        conv,
        process_cpu() - cpu0
    );
    out["convergence_s"] = serde_json::json!(conv.map(|d| d.as_secs_f64()));
    // Let subsets and the scaler settle.
    sim.wait_until(Duration::from_secs(30), |s| s.acting().len() == 1)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deaths_before = sim.deaths().len();

    let meter = Meter::start(&sim);
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let (cpu, kbit) = meter.read(&sim);
    println!(
        "  idle: {cpu:.3}% of a core and {kbit:.2} kbit/s per peer, per balancer; RSS {:.0} MiB",
        rss_mib()
    );
    out["idle_cpu_pct"] = serde_json::json!(cpu);
    out["idle_kbit_per_peer"] = serde_json::json!(kbit);
    out["rss_mib"] = serde_json::json!(rss_mib());

    let meter = Meter::start(&sim);
    let mut times = Vec::new();
    let mut failed = 0;
    let mut min_acks = usize::MAX;
    for r in 0..args.rounds {
        let origin = sim.running()[r % sim.running().len()];
        let gear = sim.labels[(r * 7919) % sim.labels.len()].clone();
        let o = sim
            .rotate(origin, &gear, Op::Out, Duration::from_secs(30))
            .await;
        min_acks = min_acks.min(o.acked);
        if o.ok {
            times.push(o.took.as_secs_f64());
        } else {
            failed += 1;
            println!(
                "  rotate-out {r} failed after {:?}: pending {:?}",
                o.took,
                o.pending.len()
            );
        }
        let i = sim
            .rotate(origin, &gear, Op::In, Duration::from_secs(30))
            .await;
        if !i.ok {
            failed += 1;
        }
    }
    let (cpu_ms, kb) = meter.totals(&sim);
    let per = (2 * args.rounds).max(1) as f64;
    let (cpu_ms, kb) = (cpu_ms / per, kb / per);
    let rot_deaths = sim.deaths().len() - deaths_before;
    println!(
        "  rotate-out: p50 {:.3}s max {:.3}s, {} failed, min acks {}; per rotate command and balancer {cpu_ms:.2} ms CPU, {kb:.1} kB sent; false deaths {rot_deaths}",
        pct(&times, 50), pct(&times, 100), failed, min_acks
    );
    out["rotate_p50_s"] = serde_json::json!(pct(&times, 50));
    out["rotate_max_s"] = serde_json::json!(pct(&times, 100));
    out["rotate_failed"] = serde_json::json!(failed);
    out["rotate_min_acks"] = serde_json::json!(min_acks);
    out["rotate_cpu_ms_per_balancer"] = serde_json::json!(cpu_ms);
    out["rotate_kb_per_balancer"] = serde_json::json!(kb);
    out["false_deaths_idle_and_rotations"] = serde_json::json!(rot_deaths);

    // Stalls below the detector's timeout: nobody may be declared dead.
    let before = sim.deaths().len();
    for s in 0..args.stalls {
        let i = sim.running()[s % sim.running().len()];
        let addr = sim.nodes[i].addr;
        sim.net
            .stall(addr, Instant::now() + Duration::from_millis(args.stall_ms));
        tokio::time::sleep(Duration::from_millis(args.stall_ms + 2000)).await;
    }
    let stall_deaths = sim.deaths().len() - before;
    if args.stalls > 0 {
        println!(
            "  {} stalls of {} ms: false deaths {stall_deaths}",
            args.stalls, args.stall_ms
        );
    }
    out["stall_ms"] = serde_json::json!(args.stall_ms);
    out["stalls"] = serde_json::json!(args.stalls);
    out["false_deaths_stalls"] = serde_json::json!(stall_deaths);

    // Partition: a 40% minority (holding the acting scaler) is cut off, then healed.
    if args.partition > 0 && sim.running().len() >= 3 {
        let running = sim.running();
        let acting = sim.acting();
        let mut minority: Vec<usize> = acting.clone();
        for i in &running {
            if minority.len() * 5 >= running.len() * 2 {
                break;
            }
            if !minority.contains(i) {
                minority.push(*i);
            }
        }
        let majority: Vec<usize> = running
            .iter()
            .copied()
            .filter(|i| !minority.contains(i))
            .collect();
        let addrs = |v: &[usize]| v.iter().map(|i| sim.nodes[*i].addr).collect::<Vec<_>>();
        sim.net.partition(&[addrs(&minority), addrs(&majority)]);
        let t = Instant::now();
        let mut max_acting = 0;
        let mut overlap_ms = 0u64;
        let mut none_ms = 0u64;
        let mut majority_took: Option<Duration> = None;
        let sample = |sim: &Sim, max_acting: &mut usize, overlap: &mut u64, none: &mut u64| {
            let a = sim.acting().len();
            *max_acting = (*max_acting).max(a);
            if a > 1 {
                *overlap += 10;
            }
            if a == 0 {
                *none += 10;
            }
            a
        };
        while t.elapsed() < Duration::from_secs(args.partition) {
            sample(&sim, &mut max_acting, &mut overlap_ms, &mut none_ms);
            if majority_took.is_none() && sim.acting().iter().any(|i| majority.contains(i)) {
                majority_took = Some(t.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        sim.net.heal();
        let h = Instant::now();
        let mut healed: Option<Duration> = None;
        while h.elapsed() < Duration::from_secs(15) {
            sample(&sim, &mut max_acting, &mut overlap_ms, &mut none_ms);
            if healed.is_none() && sim.converged() {
                healed = Some(h.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!(
            "  partition {}|{}: majority scaler after {:?}; healed in {:?}; most acting at once {max_acting} ({overlap_ms} ms with two or more, {none_ms} ms with none)",
            minority.len(), majority.len(), majority_took, healed
        );
        out["partition"] = serde_json::json!(format!("{}|{}", minority.len(), majority.len()));
        out["partition_majority_scaler_s"] =
            serde_json::json!(majority_took.map(|d| d.as_secs_f64()));
        out["partition_heal_s"] = serde_json::json!(healed.map(|d| d.as_secs_f64()));
        out["max_acting"] = serde_json::json!(max_acting);
        out["overlap_ms"] = serde_json::json!(overlap_ms);
        out["no_scaler_ms"] = serde_json::json!(none_ms);
    }

    // Failover: the acting scaler crashes.
    let mut fo = Vec::new();
    for _ in 0..args.failovers {
        if sim.running().len() < 3 {
            break;
        }
        sim.wait_until(Duration::from_secs(30), |s| s.acting().len() == 1)
            .await;
        let Some(&victim) = sim.acting().first() else {
            break;
        };
        sim.crash(victim).await;
        let took = sim
            .wait_until(Duration::from_secs(30), |s| s.acting().len() == 1)
            .await;
        println!("  failover: {took:?}");
        fo.push(took.map(|d| d.as_secs_f64()).unwrap_or(f64::NAN));
        sim.wait_until(Duration::from_secs(30), |s| s.converged())
            .await;
    }
    out["failover_s"] = serde_json::json!(fo);

    // Churn: one balancer leaves, then a new one joins.
    sim.wait_until(Duration::from_secs(30), |s| s.converged())
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = subsets(&sim);
    // CPU of a membership change, per balancer: the process's CPU from the change
    // until the cluster settled (converged, and 2 s more: the subsets' settle period),
    // less what the same virtual time costs idle.
    let idle_cpu_pct = out["idle_cpu_pct"].as_f64().unwrap_or(0.0);
    let change_cpu = |cpu0: Duration, t0: Instant, m: usize| {
        let spent = (process_cpu() - cpu0).as_secs_f64() * 1000.0;
        let idle = idle_cpu_pct / 100.0 * t0.elapsed().as_secs_f64() * 1000.0 * m as f64;
        (spent - idle).max(0.0) / m as f64
    };
    perf_ctl("enable");
    let (cpu1, t1) = (process_cpu(), Instant::now());
    let leaver = *sim.running().last().expect("a balancer");
    sim.stop(leaver).await;
    sim.wait_until(Duration::from_secs(30), |s| s.converged())
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leave_ms = change_cpu(cpu1, t1, sim.running().len());
    let after_leave = subsets(&sim);
    let (mean, max, _) = churn(&before, &after_leave);
    println!("  leave: subset changes per balancer mean {mean:.1} max {max}; CPU per balancer {leave_ms:.2} ms");
    out["leave_cpu_ms"] = serde_json::json!(leave_ms);
    out["leave_churn_mean"] = serde_json::json!(mean);
    out["leave_churn_max"] = serde_json::json!(max);
    let (cpu1, t1) = (process_cpu(), Instant::now());
    let joiner = sim.join().await.expect("join");
    sim.wait_until(Duration::from_secs(60), |s| s.converged())
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let join_ms = change_cpu(cpu1, t1, sim.running().len());
    perf_ctl("disable");
    println!("  join: CPU per balancer {join_ms:.2} ms");
    out["join_cpu_ms"] = serde_json::json!(join_ms);
    let after_join = subsets(&sim);
    let (mean, max, _) = churn(&after_leave, &after_join);
    let joined = after_join
        .get(&sim.nodes[joiner].id)
        .map(|s| s.len())
        .unwrap_or(0);
    println!("  join: subset changes per balancer mean {mean:.1} max {max}; the newcomer covers {joined}");
    out["join_churn_mean"] = serde_json::json!(mean);
    out["join_churn_max"] = serde_json::json!(max);
    out["join_newcomer"] = serde_json::json!(joined);
    let deaths = sim.deaths();
    out["deaths_total"] = serde_json::json!(deaths.len());
    out["cpu_total_s"] = serde_json::json!((process_cpu() - cpu0).as_secs_f64());
    out["wall_s"] = serde_json::json!(wall.elapsed().as_secs_f64());
    out["virtual_s"] = serde_json::json!(sim.t0.elapsed().as_secs_f64());
    sim.shutdown().await;
    out
}

/// Profile the membership changes only: with `CLUSTER_SIM_PERF_CTL` naming the control
/// FIFO of `perf record -D -1 --control fifo:<it>`, `cmd` ("enable", "disable") is sent
/// to perf.
fn perf_ctl(cmd: &str) {
    if let Some(path) = std::env::var_os("CLUSTER_SIM_PERF_CTL") {
        if let Err(e) = std::fs::write(&path, format!("{cmd}\n")) {
            eprintln!("perf control {path:?}: {e}");
        }
    }
}

fn main() {
    let args = parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    let out = rt.block_on(run(args));
    println!("{out}");
}
