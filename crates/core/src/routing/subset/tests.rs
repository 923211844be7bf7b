//! The subsets' tests: every gear covered, spread at most one, stability, and the
//! greedy's partial sort equal to a full one.
use super::*;
use std::collections::BTreeMap;

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn check(m: usize, n: usize, percent: u32) {
    let bn = names("lb", m);
    let gn = names("gear", n);
    let bs: Vec<&str> = bn.iter().map(String::as_str).collect();
    let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
    let k = subset_size(n, m, percent);
    let members: Vec<(&str, u64)> = bs.iter().map(|b| (*b, 0)).collect();
    let all = Assignment::new(&members, &gears, percent);
    let subset = |b: &str| -> BTreeSet<&str> {
        gears.iter().copied().filter(|g| all.covers(b, g)).collect()
    };
    let cov: Vec<usize> = gears
        .iter()
        .map(|g| bs.iter().filter(|b| all.covers(b, g)).count())
        .collect();
    // subset_of and covered_by answer exactly what covers does, without the walk.
    assert_eq!(all.subset_of("stranger").count(), 0);
    let some: Vec<&str> = bs.iter().copied().step_by(2).chain(["stranger"]).collect();
    let covered = all.covered_by(some.iter().copied());
    for g in &gears {
        let want = some.iter().any(|b| all.covers(b, g));
        assert_eq!(covered.contains(g), want, "m={m} n={n} c={percent}: {g}");
    }
    assert!(!covered.contains("no-such-gear"));
    for b in &bs {
        let s = subset(b);
        let listed: BTreeSet<&str> = all.subset_of(b).collect();
        assert_eq!(listed, s, "m={m} n={n} c={percent}: subset_of({b})");
        assert_eq!(all.subset_of(b).count(), k, "no gear listed twice");
        assert_eq!(s.len(), k, "m={m} n={n} c={percent}: subset size");
        if n >= 2 {
            assert!(s.len() >= 2);
        }
        if percent == 100 {
            assert_eq!(s.len(), n);
        }
        assert!(s.len() >= (n * percent as usize).div_ceil(100).min(n));
    }
    if n > 0 {
        let (min, max) = (cov.iter().min().unwrap(), cov.iter().max().unwrap());
        assert!(*min >= 1, "m={m} n={n} c={percent}: uncovered gear {cov:?}");
        assert!(max - min <= 1, "m={m} n={n} c={percent}: uneven {cov:?}");
    }
}

#[test]
fn properties_hold_exhaustively_for_small_sizes() {
    for m in 1..=8 {
        for n in 0..=24 {
            for percent in [1, 10, 25, 33, 50, 66, 75, 99, 100] {
                check(m, n, percent);
            }
        }
    }
}

#[test]
fn properties_hold_for_random_large_sizes() {
    let mut rng = fastrand::Rng::with_seed(42);
    for _ in 0..40 {
        let m = rng.usize(1..60);
        let n = rng.usize(1..1200);
        let percent = rng.u32(1..=100);
        check(m, n, percent);
    }
}

#[test]
fn every_balancer_computes_the_same_assignment() {
    let gn = names("g", 30);
    let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
    let a = assign("lb2", &["lb1", "lb2", "lb3"], &gears, 33);
    let b = assign("lb2", &["lb3", "lb1", "lb2", "lb1"], &gears, 33);
    let mut shuffled = gears.clone();
    shuffled.reverse();
    let c = assign("lb2", &["lb1", "lb2", "lb3"], &shuffled, 33);
    assert_eq!(a, b);
    assert_eq!(a, c);
    assert!(assign("stranger", &["lb1"], &gears, 33).is_empty());
}

#[test]
fn one_gear_more_or_less_changes_few_assignments() {
    // A gear added or removed changes k by one at most: every balancer gains or
    // loses a gear, plus the few moves that cascade: at most four per balancer.
    for (m, n, percent) in [(5, 100, 20), (10, 1000, 10), (30, 1000, 50)] {
        let gn = names("g", n);
        let bn = names("lb", m);
        let members: Vec<(&str, u64)> = bn.iter().map(|b| (b.as_str(), 0)).collect();
        let before: Vec<&str> = gn.iter().map(String::as_str).collect();
        let mut more = before.clone();
        more.push("newcomer");
        let fewer = before[1..].to_vec();
        let x = all_sets(&members, &before, percent);
        for after in [&more, &fewer] {
            let y = all_sets(&members, after, percent);
            let moved = changes(&x, &y);
            assert!(
                moved <= 4 * m,
                "m={m} n={n} c={percent}: {moved} changes for one gear"
            );
        }
    }
}

#[test]
fn the_assignment_agrees_with_each_balancers_own_subset() {
    let gn = names("g", 37);
    let bn = names("lb", 5);
    let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
    let bs: Vec<&str> = bn.iter().map(String::as_str).collect();
    let members: Vec<(&str, u64)> = bs.iter().map(|b| (*b, 0)).collect();
    for percent in [10, 40, 100] {
        let a = Assignment::new(&members, &gears, percent);
        for b in &bs {
            let mine = assign(b, &bs, &gears, percent);
            for g in &gears {
                assert_eq!(a.covers(b, g), mine.contains(g), "{b} {g} {percent}");
            }
        }
        assert!(!a.covers("stranger", gears[0]));
        assert!(!a.covers(bs[0], "no-such-gear"));
    }
}

/// The least total of (balancer, gear) changes any assignment with spread ≤ 1 and
/// `k'` gears each needs to go from `before` to a world of `after` balancers.
fn lower_bound(
    before: &BTreeMap<&str, BTreeSet<&str>>,
    after: &[&str],
    gears: &[&str],
    percent: u32,
) -> usize {
    let k2 = subset_size(gears.len(), after.len(), percent);
    let a2 = after.len() * k2 / gears.len();
    let mut cov: BTreeMap<&str, usize> = gears.iter().map(|g| (*g, 0)).collect();
    for (b, s) in before {
        if after.contains(b) {
            for g in s {
                *cov.get_mut(g).unwrap() += 1;
            }
        }
    }
    let size = |b: &str| before.get(b).map_or(0, |s| s.len());
    let adds_b: usize = after.iter().map(|b| k2.saturating_sub(size(b))).sum();
    let rems_b: usize = after.iter().map(|b| size(b).saturating_sub(k2)).sum();
    let adds_g: usize = cov.values().map(|c| a2.saturating_sub(*c)).sum();
    let rems_g: usize = cov.values().map(|c| c.saturating_sub(a2 + 1)).sum();
    adds_b.max(adds_g) + rems_b.max(rems_g)
}

fn all_sets<'a>(
    members: &[(&str, u64)],
    gears: &[&'a str],
    percent: u32,
) -> BTreeMap<String, BTreeSet<&'a str>> {
    let a = Assignment::new(members, gears, percent);
    members
        .iter()
        .map(|(b, _)| {
            let s = gears.iter().copied().filter(|g| a.covers(b, g)).collect();
            (b.to_string(), s)
        })
        .collect()
}

fn changes(x: &BTreeMap<String, BTreeSet<&str>>, y: &BTreeMap<String, BTreeSet<&str>>) -> usize {
    let empty = BTreeSet::new();
    x.keys()
        .chain(y.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|b| {
            let (p, q) = (x.get(b).unwrap_or(&empty), y.get(b).unwrap_or(&empty));
            p.symmetric_difference(q).count()
        })
        .sum()
}

/// At M = 10, N = 1000, C = 10%: a balancer started later joins by taking gears
/// with spare coverage only (the minimum), and any balancer leaving moves at most
/// twice the least any assignment keeping spread ≤ 1 could.
#[test]
fn joins_and_leaves_move_little() {
    let gn: Vec<String> = (0..1000u64)
        .map(|i| format!("{:032x}-abcdefghijklmnop", mix(i)))
        .collect();
    let bn: Vec<String> = (0..11u64)
        .map(|i| format!("{:032x}", mix(1 << 40 | i)))
        .collect();
    let gears: Vec<&str> = gn.iter().map(String::as_str).collect();
    let ten: Vec<(&str, u64)> = bn[..10].iter().map(|b| (b.as_str(), 1_000)).collect();
    let before = all_sets(&ten, &gears, 10);
    // A join, five minutes later.
    let mut eleven = ten.clone();
    eleven.push((bn[10].as_str(), 301_000));
    let joined = all_sets(&eleven, &gears, 10);
    let borrowed: BTreeMap<&str, BTreeSet<&str>> = before
        .iter()
        .map(|(b, s)| (b.as_str(), s.clone()))
        .collect();
    let ids: Vec<&str> = eleven.iter().map(|m| m.0).collect();
    let min = lower_bound(&borrowed, &ids, &gears, 10);
    assert_eq!(changes(&before, &joined), min, "a join moves the minimum");
    // Each of the ten leaving in turn.
    for leaver in 0..10 {
        let rest: Vec<(&str, u64)> = ten
            .iter()
            .copied()
            .filter(|m| m.0 != ten[leaver].0)
            .collect();
        let after = all_sets(&rest, &gears, 10);
        let kept: BTreeMap<String, BTreeSet<&str>> = before
            .iter()
            .filter(|(b, _)| b.as_str() != ten[leaver].0)
            .map(|(b, s)| (b.clone(), s.clone()))
            .collect();
        let ids: Vec<&str> = rest.iter().map(|m| m.0).collect();
        let min = lower_bound(&borrowed, &ids, &gears, 10);
        let moved = changes(&kept, &after);
        assert!(
            min > 0 && moved <= 2 * min,
            "leave {leaver}: {moved} changes, minimum {min}"
        );
    }
}

#[test]
fn sizes() {
    assert_eq!(subset_size(0, 3, 50), 0);
    assert_eq!(subset_size(1, 3, 10), 1);
    assert_eq!(
        subset_size(10, 2, 10),
        5,
        "two balancers must cover ten gears"
    );
    assert_eq!(subset_size(100, 10, 33), 33);
    assert_eq!(subset_size(3, 10, 10), 2, "at least two when there are two");
    assert_eq!(subset_size(7, 1, 100), 7);
}

#[test]
fn sorting_a_head_only_gives_the_assignment_of_a_full_sort() {
    let mut rng = fastrand::Rng::with_seed(7);
    for case in 0..300 {
        let m = rng.usize(1..30);
        let n = rng.usize(1..120);
        let k = rng.usize(1..=n);
        let bn = names("lb", m);
        let gn = names("gear-", n);
        let bs: Vec<(&str, u64)> = bn
            .iter()
            .map(|b| (b.as_str(), 1_000_000 + rng.u64(0..200_000)))
            .collect();
        let gs: Vec<&str> = gn.iter().map(String::as_str).collect();
        let full = greedy_sorting(&bs, &gs, k, m * n);
        // Heads from one edge (the rest sorted at once) to past the default.
        for head in [1, rng.usize(1..=m * n), m * k, m * k * 4] {
            assert_eq!(
                greedy_sorting(&bs, &gs, k, head),
                full,
                "case {case}: m {m} n {n} k {k} head {head}"
            );
        }
    }
}
