//! The subsets' tests: every gear covered, spread at most one, stability, and the
//! greedy's partial sort equal to a full one.
use super::order::mix;
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

/// The greedy as its definition reads (the module doc), with nothing left out: every
/// pair scored as a signed number and sorted, both passes over every pair, the same
/// repair and checks. The laid-out-lazily greedy must equal it everywhere.
fn reference(bs: &[(&str, u64)], gs: &[&str], k: usize) -> Option<Vec<Vec<u32>>> {
    let (m, n) = (bs.len(), gs.len());
    let a = m * k / n;
    let first = bs.iter().map(|b| b.1).min().unwrap_or(0);
    let mut edges: Vec<(i128, u32, u32)> = Vec::new();
    for (i, b) in bs.iter().enumerate() {
        let penalty = (i128::from(b.1 - first) << 48) / 60_000;
        for (j, g) in gs.iter().enumerate() {
            let mixed = mix(stable_hash(b.0) ^ stable_hash(g).rotate_left(32));
            edges.push((i128::from(mixed >> 16) - penalty, i as u32, j as u32));
        }
    }
    edges.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let mut has = vec![false; m * n];
    let mut bcnt = vec![0usize; m];
    let mut gcnt = vec![0usize; n];
    for cap in [a, a + 1] {
        for &(_, i, j) in &edges {
            let (i, j) = (i as usize, j as usize);
            if bcnt[i] < k && gcnt[j] < cap && !has[i * n + j] {
                has[i * n + j] = true;
                bcnt[i] += 1;
                gcnt[j] += 1;
            }
        }
    }
    reference_repair(&mut has, &mut bcnt, &mut gcnt, m, n, k, a)?;
    let valid = (0..m).all(|i| (0..n).filter(|&j| has[i * n + j]).count() == k)
        && (0..n).all(|j| (a..=a + 1).contains(&(0..m).filter(|&i| has[i * n + j]).count()));
    valid.then(|| {
        (0..m)
            .map(|i| (0..n as u32).filter(|j| has[i * n + *j as usize]).collect())
            .collect()
    })
}

/// The repair as first written (each search from the first short balancer or gear,
/// every row scanned in order): [`repair`] must choose exactly what it chooses.
/// Bring every balancer to k gears and every gear to a or a + 1 coverers by augmenting
/// paths (each moves gears along a chain of balancers); deterministic. `None` if a
/// step finds no path within its budget.
fn reference_repair(
    has: &mut [bool],
    bcnt: &mut [usize],
    gcnt: &mut [usize],
    m: usize,
    n: usize,
    k: usize,
    a: usize,
) -> Option<()> {
    use std::collections::VecDeque;
    loop {
        if let Some(start) = (0..m).find(|&i| bcnt[i] < k) {
            // A balancer short: it takes a gear with room, or takes a full gear from a
            // holder that then does the same.
            let mut parent: Vec<Option<(usize, usize)>> = vec![None; m];
            let mut seen = vec![false; m];
            seen[start] = true;
            let mut queue = VecDeque::from([start]);
            let mut work = 0usize;
            let mut end = None;
            'search: while let Some(x) = queue.pop_front() {
                for want in [a, a + 1] {
                    if let Some(y) = (0..n).find(|&y| !has[x * n + y] && gcnt[y] < want) {
                        end = Some((x, y));
                        break 'search;
                    }
                }
                for y in (0..n).filter(|&y| !has[x * n + y]) {
                    for z in 0..m {
                        work += 1;
                        if !seen[z] && has[z * n + y] {
                            seen[z] = true;
                            parent[z] = Some((x, y));
                            queue.push_back(z);
                        }
                    }
                }
                if work > REPAIR_BUDGET {
                    return None;
                }
            }
            let (mut cur, y) = end?;
            has[cur * n + y] = true;
            gcnt[y] += 1;
            bcnt[start] += 1;
            while let Some((p, g)) = parent[cur] {
                has[cur * n + g] = false;
                has[p * n + g] = true;
                cur = p;
            }
            continue;
        }
        if let Some(start) = (0..n).find(|&j| gcnt[j] < a) {
            // A gear short while every balancer is full: a balancer without it takes
            // it and drops one of its gears with a + 1 coverers, or drops one with a,
            // which is then short in turn.
            let mut parent: Vec<Option<(usize, usize)>> = vec![None; n];
            let mut seen = vec![false; n];
            seen[start] = true;
            let mut queue = VecDeque::from([start]);
            let mut work = 0usize;
            let mut end = None;
            'search: while let Some(y) = queue.pop_front() {
                for x in (0..m).filter(|&x| !has[x * n + y]) {
                    for w in (0..n).filter(|&w| has[x * n + w]) {
                        work += 1;
                        if gcnt[w] > a {
                            end = Some((x, y, w));
                            break 'search;
                        }
                        if !seen[w] {
                            seen[w] = true;
                            parent[w] = Some((x, y));
                            queue.push_back(w);
                        }
                    }
                }
                if work > REPAIR_BUDGET {
                    return None;
                }
            }
            let (x, mut y, w) = end?;
            // x takes y and drops w; walking back, each short gear on the path was
            // dropped by the balancer that took its predecessor.
            has[x * n + y] = true;
            has[x * n + w] = false;
            gcnt[w] -= 1;
            gcnt[start] += 1;
            while let Some((px, py)) = parent[y] {
                // `px` took `py` and dropped `y`.
                has[px * n + py] = true;
                has[px * n + y] = false;
                y = py;
            }
            continue;
        }
        return Some(());
    }
}

#[test]
fn the_lazy_greedy_equals_the_greedy_as_defined() {
    let mut rng = fastrand::Rng::with_seed(7);
    for case in 0..400 {
        let m = rng.usize(1..40);
        let n = rng.usize(2..160);
        let k = rng.usize(1..n);
        let bn = names("lb", m);
        let gn = names("gear-", n);
        // Start times: together, within a minute, or minutes to years apart (penalties
        // past the head's limit, and past 64 bits of rank).
        let spread = [0, 1, 30_000, 200_000, 1 << 40][case % 5];
        let mut bs: Vec<(&str, u64)> = bn
            .iter()
            .map(|b| (b.as_str(), 1_000_000 + rng.u64(0..=spread)))
            .collect();
        bs.sort_unstable();
        let gs: Vec<&str> = gn.iter().map(String::as_str).collect();
        let want = reference(&bs, &gs, k);
        // Heads from none (every pair laid out at once) to past the default.
        for head in [0, 1, HEAD_FACTOR, 3 * HEAD_FACTOR] {
            assert_eq!(
                greedy_with_head(&bs, &gs, k, head),
                want,
                "case {case}: m {m} n {n} k {k} head {head}"
            );
        }
    }
}

#[test]
fn the_lazy_greedy_equals_the_greedy_as_defined_at_scale() {
    // The sizes the cluster runs at, where the greedy stops inside the head.
    // The last of each is started a minute and a half after the others (a join), the
    // case where the repair does most.
    for (m, n, percent, late) in [
        (100, 1000, 10, 0),
        (99, 1000, 10, 0),
        (101, 1000, 10, 0),
        (30, 3000, 10, 0),
        (100, 1000, 10, 90_000),
        (100, 2000, 10, 90_000),
    ] {
        let bn = names("balancer-", m);
        let gn = names("gear-", n);
        let mut bs: Vec<(&str, u64)> = bn.iter().map(|b| (b.as_str(), 7)).collect();
        bs[m - 1].1 += late;
        let gs: Vec<&str> = gn.iter().map(String::as_str).collect();
        let k = subset_size(n, m, percent);
        assert_eq!(greedy(&bs, &gs, k), reference(&bs, &gs, k), "m {m} n {n}");
    }
}
