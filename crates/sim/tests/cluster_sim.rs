//! The cluster simulator in CI: a small cluster of balancers running the real cluster,
//! rotation and scaler code in one process on virtual time (`gearlb_sim`). The big
//! configurations run from `bench/cluster_sim.sh` (results in `bench/CLUSTER.md`).

use std::time::Duration;

use gearlb::rotation::Op;
use gearlb_sim::{Sim, SimConfig};

fn config(m: usize, n: usize, coverage: u32) -> SimConfig {
    SimConfig {
        m,
        n,
        coverage,
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_small_cluster_converges_rotates_and_fails_over() {
    let mut sim = Sim::start(config(5, 60, 40)).await.unwrap();
    let took = sim
        .wait_until(Duration::from_secs(10), |s| s.converged())
        .await
        .expect("every balancer sees every other live");
    assert!(took < Duration::from_secs(3), "converged after {took:?}");

    // Subsets: every gear covered, evenly.
    let covered = sim
        .wait_until(Duration::from_secs(5), |s| {
            let mut per_gear = std::collections::HashMap::new();
            for i in s.running() {
                for e in s.nodes[i].router.snapshot().entries() {
                    *per_gear.entry(e.backend.sticky.clone()).or_insert(0) +=
                        usize::from(e.in_subset);
                }
            }
            let min = per_gear.values().min().copied().unwrap_or(0);
            let max = per_gear.values().max().copied().unwrap_or(0);
            min >= 1 && max - min <= 1
        })
        .await;
    assert!(covered.is_some(), "subsets do not cover every gear evenly");

    // Rotate-outs from every balancer: acknowledged by all five.
    for origin in 0..5 {
        let gear = sim.labels[origin * 7].clone();
        let out = sim
            .rotate(origin, &gear, Op::Out, Duration::from_secs(10))
            .await;
        assert!(
            out.ok,
            "rotate-out from {origin}: pending {:?}",
            out.pending
        );
        assert_eq!(out.acked, 5);
        assert!(
            out.took < Duration::from_secs(1),
            "rotate-out took {:?}",
            out.took
        );
        let back = sim
            .rotate(origin, &gear, Op::In, Duration::from_secs(10))
            .await;
        assert!(back.ok);
    }
    assert!(sim.deaths().is_empty(), "false deaths: {:?}", sim.deaths());

    // One scaler; when it crashes another takes over.
    sim.wait_until(Duration::from_secs(10), |s| s.acting().len() == 1)
        .await
        .expect("one acting scaler");
    let victim = sim.acting()[0];
    sim.crash(victim).await;
    let took = sim
        .wait_until(Duration::from_secs(20), |s| s.acting().len() == 1)
        .await
        .expect("another scaler takes over");
    assert!(took < Duration::from_secs(3), "failover took {took:?}");
    sim.shutdown().await;
}

/// Only the balancers covering a gear check it; the others take its health from their
/// reports (gears found down, relative to a subset epoch), down and back up.
#[tokio::test(start_paused = true)]
async fn health_found_by_covering_balancers_reaches_the_others() {
    let sim = Sim::start(config(5, 60, 20)).await.unwrap();
    sim.wait_until(Duration::from_secs(10), |s| s.converged())
        .await
        .expect("converged");
    // Let every balancer compute its subset.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for gear in [sim.labels[3].clone(), sim.labels[40].clone()] {
        let covering = sim.set_health_where_covered(&gear, false);
        assert!(
            (1..5).contains(&covering),
            "{covering} balancers cover {gear}"
        );
        let down = sim
            .wait_until(Duration::from_secs(5), |s| {
                s.health_everywhere(&gear).iter().all(|up| !up)
            })
            .await;
        assert!(down.is_some(), "{:?}", sim.health_everywhere(&gear));
        sim.set_health_where_covered(&gear, true);
        let up = sim
            .wait_until(Duration::from_secs(5), |s| {
                s.health_everywhere(&gear).iter().all(|up| *up)
            })
            .await;
        assert!(up.is_some(), "{:?}", sim.health_everywhere(&gear));
    }
    sim.shutdown().await;
}

/// A 3|2 partition cutting off the acting scaler, then its heal: never two acting
/// scalers at once (sampled every millisecond of virtual time), the majority side
/// takes over within 3 s, and after the heal the best-ranked balancer acts again.
#[tokio::test(start_paused = true)]
async fn one_acting_scaler_at_every_instant_through_partition_and_heal() {
    let (sim, first) = five_with_one_scaler().await;
    let other = (first + 1) % 5;
    let minority = [first, other];
    let majority: Vec<usize> = (0..5).filter(|i| !minority.contains(i)).collect();
    let addrs = |v: &[usize]| v.iter().map(|i| sim.nodes[*i].addr).collect::<Vec<_>>();
    sim.net.partition(&[addrs(&minority), addrs(&majority)]);
    let t = tokio::time::Instant::now();
    let mut took_over = None;
    while t.elapsed() < Duration::from_secs(8) {
        let acting = sim.acting();
        assert!(
            acting.len() <= 1,
            "{acting:?} act at once after {:?}",
            t.elapsed()
        );
        if took_over.is_none() && acting.iter().any(|i| majority.contains(i)) {
            took_over = Some(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took_over = took_over.expect("the majority side elects a scaler");
    assert!(
        took_over < Duration::from_secs(3),
        "took over after {took_over:?}"
    );
    sim.net.heal();
    let t = tokio::time::Instant::now();
    while t.elapsed() < Duration::from_secs(8) {
        let acting = sim.acting();
        assert!(
            acting.len() <= 1,
            "{acting:?} act at once {:?} after the heal",
            t.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        sim.acting(),
        vec![first],
        "the best-ranked balancer acts again"
    );
    sim.shutdown().await;
}

/// Sample the acting scalers every millisecond of virtual time for `d`: never two at
/// once. Returns the balancers seen acting, in order of first sight.
/// Five balancers, converged, one of them acting as the scaler (its index).
async fn five_with_one_scaler() -> (Sim, usize) {
    let sim = Sim::start(config(5, 20, 100)).await.unwrap();
    sim.wait_until(Duration::from_secs(10), |s| s.converged())
        .await
        .expect("converged");
    sim.wait_until(Duration::from_secs(10), |s| s.acting().len() == 1)
        .await
        .expect("one acting scaler");
    let acting = sim.acting()[0];
    (sim, acting)
}

async fn never_two_acting(sim: &Sim, d: Duration, what: &str) -> Vec<usize> {
    let t = tokio::time::Instant::now();
    let mut seen = Vec::new();
    while t.elapsed() < d {
        let acting = sim.acting();
        if acting.len() > 1 {
            for i in &acting {
                eprintln!("balancer {i}: {:?}", sim.nodes[*i].scaler.report());
            }
        }
        assert!(
            acting.len() <= 1,
            "{acting:?} act at once {:?} into {what}",
            t.elapsed()
        );
        for i in acting {
            if !seen.contains(&i) {
                seen.push(i);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    seen
}

/// The acting scaler's process is stopped (SIGSTOP, or starved) for 5 s and for 30 s,
/// then resumes: another balancer takes over while it is stopped, and at no instant do
/// two act — not while it is stopped (its role is a lease its loop must renew), and not
/// when it wakes with its old view (it sees the gap in its own clock and stands down
/// before anything else).
#[tokio::test(start_paused = true)]
async fn a_stalled_scaler_never_acts_beside_its_successor() {
    let sim = Sim::start(config(5, 20, 100)).await.unwrap();
    sim.wait_until(Duration::from_secs(10), |s| s.converged())
        .await
        .expect("converged");
    for stall in [Duration::from_secs(5), Duration::from_secs(30)] {
        sim.wait_until(Duration::from_secs(10), |s| s.acting().len() == 1)
            .await
            .expect("one acting scaler");
        let stalled = sim.acting()[0];
        sim.stall_process(stalled, stall);
        let during = never_two_acting(&sim, stall, "the stall").await;
        assert!(
            during.iter().any(|i| *i != stalled),
            "nobody took over during a {stall:?} stall: {during:?}"
        );
        let after = never_two_acting(&sim, Duration::from_secs(10), "the wake-up").await;
        assert!(!after.is_empty(), "nobody acts after the wake-up");
        assert_eq!(sim.acting().len(), 1, "one scaler once settled");
    }
    sim.shutdown().await;
}

/// The acting scaler's process is starved of CPU for 20 s: every event of its work
/// costs 40 ms of virtual time, far more than it gets, so its gossip backlog grows, its
/// loop turns late and its view goes stale, while the heartbeats it still sends keep
/// it live to the others. At no instant do two balancers act: it stands down (its
/// fence hears no majority since it last ran on time) and nobody acts beside it. Its
/// own death verdicts meanwhile are rate-limited: it does declare its peers dead (it
/// hears nothing), but at most two of four within any failure timeout. Fed again, the
/// cluster converges with one scaler.
#[tokio::test(start_paused = true)]
async fn a_starved_scaler_never_acts_beside_another() {
    let (sim, starved) = five_with_one_scaler().await;
    let since = sim.t0.elapsed();
    sim.starve_process(starved, Duration::from_millis(40), Duration::from_secs(20));
    never_two_acting(&sim, Duration::from_secs(20), "the starvation").await;
    assert!(
        !sim.nodes[starved].scaler.report().acting,
        "a starved scaler that hears nobody still acts"
    );
    let id = &sim.nodes[starved].id;
    let verdicts: Vec<Duration> = sim
        .deaths()
        .iter()
        .filter(|d| d.observer == *id && d.at >= since)
        .map(|d| d.at)
        .collect();
    assert!(!verdicts.is_empty(), "the starved balancer lost nobody");
    for (i, t) in verdicts.iter().enumerate() {
        let within = verdicts[i..]
            .iter()
            .take_while(|u| **u < *t + Duration::from_secs(2))
            .count();
        assert!(within <= 2, "more than two deaths within 2 s: {verdicts:?}");
    }
    let after = never_two_acting(&sim, Duration::from_secs(15), "the recovery").await;
    assert!(!after.is_empty(), "nobody acts after the recovery");
    assert_eq!(sim.acting().len(), 1, "one scaler once settled");
    sim.wait_until(Duration::from_secs(20), |s| s.converged())
        .await
        .expect("every balancer sees every other live again");
    sim.shutdown().await;
}
