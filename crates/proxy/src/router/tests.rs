//! Tests of the routing table and the router: carry-over, selection, stickiness,
//! backups, notifications, availability and connection affinity.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gearlb_core::routing::{Admin, Affinity, BackendSpec, BackendState};

use super::{Router, Snapshot, Target};

fn spec(name: &str, port: u16) -> BackendSpec {
    BackendSpec {
        name: name.into(),
        addr: format!("127.0.0.1:{port}").parse().unwrap(),
        gear_dns: None,
        cookie: None,
        backup: false,
        max_connections: None,
        version: None,
        compatible: Vec::new(),
        send_proxy: None,
    }
}

#[test]
fn replace_keeps_unchanged_backends() {
    let r = Router::new(4);
    let c = r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
    assert_eq!(c.added, vec!["a", "b"]);
    let a_before = r.load().target("a").unwrap().clone();
    a_before.stats.requests.fetch_add(7, Ordering::Relaxed);
    assert!(r.set_health(a_before.id, false));

    let c = r.replace_backends(vec![spec("a", 1), spec("b", 3), spec("c", 4)]);
    assert_eq!(c.added, vec!["c"]);
    assert_eq!(c.readdressed, vec!["b"]);
    assert_eq!(c.unchanged, 1);
    let t = r.load();
    let a = t.get("a").unwrap();
    assert!(
        Arc::ptr_eq(t.target("a").unwrap(), &a_before),
        "unchanged backend is carried over"
    );
    assert_eq!(a.state(), BackendState::Down, "state survives");
    assert_eq!(t.selectable_count(), 2);

    let c = r.replace_backends(vec![spec("c", 4)]);
    assert_eq!(c.removed, vec!["a", "b"]);
    assert!(a_before.pool.is_closed());
}

#[test]
fn select_skips_down_and_draining() {
    let r = Router::new(4);
    r.replace_backends(vec![spec("a", 1), spec("b", 2), spec("c", 3)]);
    let a = r.load().target("a").unwrap().clone();
    r.set_health(a.id, false);
    r.set_admin("b", Admin::Draining);
    for _ in 0..50 {
        assert_eq!(r.load().select().unwrap().name(), "c");
    }
    r.set_admin("c", Admin::Drained);
    assert!(r.load().select().is_none());
    assert!(!r.set_admin("zzz", Admin::Active));
    assert_eq!(r.load().get("b").unwrap().state(), BackendState::Draining);
}

#[test]
fn select_prefers_least_outstanding() {
    let r = Router::new(4);
    r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
    let t = r.load();
    t.target("a")
        .unwrap()
        .stats
        .outstanding
        .store(3, Ordering::Relaxed);
    for _ in 0..20 {
        assert_eq!(t.select().unwrap().name(), "b");
    }
}

#[test]
fn sticky_targets_only_usable_backends() {
    let r = Router::new(4);
    let mut g = spec("gear-web1-ns", 1);
    g.gear_dns = Some("web1-ns.example.com".into());
    r.replace_backends(vec![g, spec("b", 2)]);
    let t = r.load();
    assert_eq!(t.sticky_target("web1-ns").unwrap().name(), "gear-web1-ns");
    assert_eq!(t.sticky_target("b").unwrap().name(), "b");
    assert!(t.sticky_target("gear-web1-ns").is_none());
    assert!(t.sticky_target("../etc").is_none());
    r.set_admin("gear-web1-ns", Admin::Draining);
    assert!(r.load().sticky_target("web1-ns").is_none());
}

#[test]
fn a_parked_gear_serves_when_nothing_else_can() {
    let r = Router::new(4);
    r.replace_backends(vec![spec("local-gear", 1), spec("b", 2)]);
    r.set_parked("local-gear", true);
    for _ in 0..20 {
        assert_eq!(r.load().select().unwrap().name(), "b");
    }
    // The last remote gear goes down, or is removed, before the gear ratio is
    // looked at again: the parked gear serves rather than a 503.
    let b = r.load().target("b").unwrap().clone();
    r.set_health(b.id, false);
    assert_eq!(r.load().select().unwrap().name(), "local-gear");
    assert!(r.load().can_serve());
    r.replace_backends(vec![spec("local-gear", 1)]);
    assert_eq!(r.load().select().unwrap().name(), "local-gear");
    // Rotated out is out, parked or not.
    r.set_admin("local-gear", Admin::Drained);
    assert!(r.load().select().is_none());
    assert!(!r.load().can_serve());
}

#[test]
fn out_of_subset_backends_are_backups() {
    let r = Router::new(4);
    r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
    r.apply_cluster(|label| label != "b", |_| None);
    for _ in 0..20 {
        assert_eq!(r.load().select().unwrap().name(), "a");
    }
    let a = r.load().target("a").unwrap().clone();
    r.set_health(a.id, false);
    assert_eq!(
        r.load().select().unwrap().name(),
        "b",
        "backup used when the subset is down"
    );
    assert!(r
        .load()
        .select_excluding(&[r.load().target("b").unwrap().clone()])
        .is_none());
}

#[test]
fn changes_are_notified() {
    let r = Router::new(4);
    let mut rx = r.subscribe();
    r.replace_backends(vec![spec("a", 1)]);
    assert!(rx.has_changed().unwrap());
    rx.borrow_and_update();
    assert!(
        !r.set_admin("a", Admin::Active),
        "no-op edits publish nothing"
    );
    assert!(!rx.has_changed().unwrap());
}

#[test]
fn availability_follows_every_published_table() {
    let r = Router::new(4);
    assert!(!r.availability().available, "no backend yet");
    r.replace_backends(vec![spec("a", 1), spec("b", 2)]);
    assert!(r.availability().available);
    let a = r.load().target("a").unwrap().clone();
    let b = r.load().target("b").unwrap().clone();
    r.set_health(a.id, false);
    assert!(r.availability().available, "b still up");
    r.set_admin("b", Admin::Drained);
    let av = r.availability();
    assert_eq!((av.available, av.down_transitions), (false, 1));
    r.set_health(b.id, false);
    assert_eq!(
        r.availability().down_transitions,
        1,
        "still down: no new transition"
    );
    r.set_health(a.id, true);
    assert!(r.availability().available);
    r.replace_backends(vec![]);
    assert_eq!(r.availability().down_transitions, 2, "emptied: down");
}

fn router_of(n: usize) -> Router {
    let r = Router::new(4);
    r.replace_backends(
        (0..n)
            .map(|i| spec(&format!("g{i}"), i as u16 + 1))
            .collect(),
    );
    r
}

fn outstanding<'a>(t: &'a Snapshot, name: &str) -> &'a AtomicU64 {
    &t.target(name).unwrap().stats.outstanding
}

#[test]
fn affinity_keeps_an_idle_backend_for_a_bounded_run() {
    for n in [3, 1000] {
        let r = router_of(n);
        let t = r.load();
        let a = Affinity::default();
        let first = t.select_for(&a, 16).unwrap().name().to_string();
        for k in 2..=16 {
            assert_eq!(
                t.select_for(&a, 16).unwrap().name(),
                first,
                "n={n} request {k}"
            );
        }
        // The run is over: the 17th is chosen afresh and starts a new run.
        t.select_for(&a, 16).unwrap();
        assert_eq!(a.last(t.generation()).unwrap().1, 1, "n={n}");
    }
}

#[test]
fn affinity_never_keeps_a_busier_backend() {
    let r = router_of(3);
    let t = r.load();
    let a = Affinity::default();
    let first = t.select_for(&a, 16).unwrap().name().to_string();
    outstanding(&t, &first).store(1, Ordering::Relaxed);
    for _ in 0..20 {
        let a = Affinity::default();
        t.select_for(&a, 16).unwrap();
        let next = t.select_for(&a, 16).unwrap().name().to_string();
        assert_ne!(next, first, "an idle backend beats a busy remembered one");
    }
    // Equally busy everywhere: the remembered one wins the tie.
    for i in 0..3 {
        outstanding(&t, &format!("g{i}")).store(2, Ordering::Relaxed);
    }
    let a = Affinity::default();
    let first = t.select_for(&a, 16).unwrap().name().to_string();
    for _ in 0..10 {
        assert_eq!(t.select_for(&a, 16).unwrap().name(), first);
    }
}

#[test]
fn affinity_ends_with_any_table_change() {
    let r = router_of(3);
    let a = Affinity::default();
    let first = r.load().select_for(&a, 1000).unwrap().name().to_string();
    r.set_admin(&first, Admin::Draining);
    for _ in 0..50 {
        assert_ne!(r.load().select_for(&a, 1000).unwrap().name(), first);
    }
    let b = r.load().target("g0").unwrap().clone();
    r.set_admin(&first, Admin::Active);
    let a = Affinity::default();
    while r.load().select_for(&a, 1000).unwrap().name() != "g0" {}
    r.set_health(b.id, false);
    for _ in 0..50 {
        assert_ne!(r.load().select_for(&a, 1000).unwrap().name(), "g0");
    }
    // Nothing usable in the subset: backups serve, with affinity among them.
    r.set_health(b.id, true);
    r.apply_cluster(|label| label == "g0", |_| None);
    r.set_health(r.load().target("g0").unwrap().id, false);
    let t = r.load();
    let a = Affinity::default();
    let backup = t.select_for(&a, 1000).unwrap().name().to_string();
    assert_ne!(backup, "g0");
    for _ in 0..10 {
        assert_eq!(t.select_for(&a, 1000).unwrap().name(), backup);
    }
}

#[test]
fn affinity_off_chooses_every_request_afresh() {
    let r = router_of(3);
    let t = r.load();
    let a = Affinity::default();
    let seen: std::collections::BTreeSet<String> = (0..60)
        .map(|_| t.select_for(&a, 0).unwrap().name().to_string())
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(a.last(t.generation()), None, "nothing remembered when off");
}

/// A closed loop of `conns` client connections over `n` idle-at-start backends,
/// `requests` in all: each finishes its request and sends the next. Returns how many
/// requests each backend took, and the distinct backends of the last `window`.
fn closed_loop(
    n: usize,
    conns: usize,
    max_run: u32,
    requests: usize,
    window: usize,
) -> (Vec<u64>, usize) {
    fastrand::seed(11);
    let r = router_of(n);
    let t = r.load();
    let index = |b: &Arc<Target>| t.targets().iter().position(|e| Arc::ptr_eq(e, b)).unwrap();
    let affinities: Vec<Affinity> = (0..conns).map(|_| Affinity::default()).collect();
    let mut current: Vec<Option<usize>> = vec![None; conns];
    let mut taken = vec![0u64; n];
    let mut recent = std::collections::VecDeque::new();
    for _ in 0..requests {
        let c = fastrand::usize(..conns);
        if let Some(i) = current[c] {
            t.targets()[i]
                .stats
                .outstanding
                .fetch_sub(1, Ordering::Relaxed);
        }
        let i = index(t.select_for(&affinities[c], max_run).unwrap());
        t.targets()[i]
            .stats
            .outstanding
            .fetch_add(1, Ordering::Relaxed);
        current[c] = Some(i);
        taken[i] += 1;
        recent.push_back(i);
        if recent.len() > window {
            recent.pop_front();
        }
    }
    let distinct = recent
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    (taken, distinct)
}

#[test]
fn affinity_keeps_the_working_set_small_and_the_load_even() {
    // 64 connections over 1000 gears: chosen afresh, nearly every request lands on
    // a backend (so a connection) not used recently; with affinity the recent ones
    // are about one per client connection.
    let (_, spread) = closed_loop(1000, 64, 0, 20_000, 640);
    let (_, warm) = closed_loop(1000, 64, 16, 20_000, 640);
    assert!(
        spread > 400,
        "without affinity {spread} distinct in 640 requests"
    );
    assert!(warm < 200, "with affinity {warm} distinct in 640 requests");

    // Over time every gear still gets its share: runs end, and a fresh choice is
    // the least-loaded one.
    let (taken, _) = closed_loop(100, 8, 16, 200_000, 1);
    let (min, max) = (taken.iter().min().unwrap(), taken.iter().max().unwrap());
    assert!(
        *min > 1000 && *max < 3000,
        "per-gear requests {min}..{max} (mean 2000)"
    );
    let (taken, _) = closed_loop(3, 64, 16, 30_000, 1);
    let (min, max) = (taken.iter().min().unwrap(), taken.iter().max().unwrap());
    assert!(
        max - min < 3000,
        "per-gear requests {min}..{max} (mean 10000)"
    );
}

#[test]
fn old_snapshot_stays_valid_after_swap() {
    let r = Router::new(4);
    r.replace_backends(vec![spec("a", 1)]);
    let old = r.snapshot();
    r.replace_backends(vec![]);
    assert_eq!(old.select().unwrap().name(), "a");
    assert!(r.load().select().is_none());
}
