//! The scaler's election (pure): who the scaler is, and whether this balancer may act
//! (ranking, quorum, handover; see the module [`crate::scaler`]); and the gear ratio's
//! rule for the web servers colocated with balancers ([`park_local_gear`]).

use serde::{Deserialize, Serialize};

/// One balancer as the election sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    /// Gear name, when known.
    pub name: Option<String>,
    pub live: bool,
    /// Heard from within half the failure timeout (implies live).
    pub fresh: bool,
    /// Says it acts as the scaler now.
    pub acting: bool,
}

/// The election's result, from one balancer's point of view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Election {
    /// The highest-ranked live balancer.
    pub scaler: Option<String>,
    /// This balancer is the scaler and has a quorum: it may act.
    pub acts: bool,
    pub live: usize,
    pub known: usize,
    pub quorum: bool,
    /// This balancer ranks first among every known balancer: a tie (exactly half
    /// counted) is its to break.
    #[serde(default)]
    pub first: bool,
}

/// Rank key: lower is better.
fn rank_key<'a>(
    c: &'a Candidate,
    preferred: Option<&str>,
    app_name: Option<&str>,
) -> (u8, u8, &'a str) {
    let pref = preferred.is_some_and(|p| c.id == p || c.name.as_deref() == Some(p));
    let head = app_name.is_some_and(|a| c.name.as_deref() == Some(a));
    (u8::from(!pref), u8::from(!head), c.id.as_str())
}

/// Elect among `candidates` (the known balancers seen so far, `me` included) as `me`
/// sees them, when `known` balancers are known in all (some perhaps never seen: they
/// count towards the quorum, and are not outranked). `acting` says whether `me` acts
/// now (it keeps acting while elected, even if a peer still claims to).
pub fn elect(
    me: &str,
    candidates: &[Candidate],
    known: usize,
    preferred: Option<&str>,
    app_name: Option<&str>,
    acting: bool,
) -> Election {
    let mut ranked: Vec<&Candidate> = candidates.iter().collect();
    ranked.sort_by(|a, b| rank_key(a, preferred, app_name).cmp(&rank_key(b, preferred, app_name)));
    ranked.dedup_by(|a, b| a.id == b.id);
    let known = known.max(ranked.len());
    let unlisted = known - ranked.len();
    let live = ranked.iter().filter(|c| c.live || c.id == me).count();
    let fresh = ranked.iter().filter(|c| c.fresh || c.id == me).count();
    let scaler = ranked
        .iter()
        .find(|c| c.live || c.id == me)
        .map(|c| c.id.clone());
    let me_pos = ranked.iter().position(|c| c.id == me);
    // With exactly half: only if every balancer not counted ranks below `me` (and no
    // balancer of unknown rank exists).
    let outranks = |counted: &dyn Fn(&Candidate) -> bool| {
        unlisted == 0
            && me_pos.is_some_and(|p| {
                ranked
                    .iter()
                    .enumerate()
                    .all(|(i, c)| counted(c) || c.id == me || i > p)
            })
    };
    let quorum = live * 2 > known || (live * 2 == known && outranks(&|c| c.live));
    let fresh_quorum = fresh * 2 > known || (fresh * 2 == known && outranks(&|c| c.fresh));
    let other_acts = ranked.iter().any(|c| c.id != me && c.live && c.acting);
    let elected = scaler.as_deref() == Some(me);
    Election {
        acts: elected && fresh_quorum && (acting || !other_acts),
        scaler,
        live,
        known,
        quorum,
        first: unlisted == 0 && me_pos == Some(0),
    }
}

/// Whether `local-gear` should take no traffic: the old cartridge's gear ratio. With
/// `web` web gears and `balancers` live balancers, from `ratio` web gears per balancer
/// (rounded, as before; 0-2 count as 3; -1 never), and only while a remote gear is up so
/// the application is never left without a gear.
pub fn park_local_gear(web: usize, balancers: usize, ratio: i64, remote_up: bool) -> bool {
    if ratio < 0 || !remote_up || balancers == 0 {
        return false;
    }
    let threshold = ratio.max(3) as f64;
    (web as f64 / balancers as f64).round() >= threshold
}
#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, name: Option<&str>, live: bool) -> Candidate {
        Candidate {
            id: id.into(),
            name: name.map(str::to_string),
            live,
            fresh: live,
            acting: false,
        }
    }

    /// Elect with every balancer of `all` known and `me` not acting yet.
    fn elect(
        me: &str,
        all: &[Candidate],
        preferred: Option<&str>,
        app_name: Option<&str>,
    ) -> Election {
        super::elect(me, all, all.len(), preferred, app_name, false)
    }

    #[test]
    fn preferred_then_head_then_id() {
        let all = vec![
            c("b", Some("5f2a"), true),
            c("a", Some("x9"), true),
            c("h", Some("myapp"), true),
        ];
        assert_eq!(
            elect("a", &all, None, Some("myapp")).scaler.as_deref(),
            Some("h"),
            "head gear"
        );
        assert_eq!(
            elect("a", &all, Some("5f2a"), Some("myapp"))
                .scaler
                .as_deref(),
            Some("b"),
            "preferred by name"
        );
        assert_eq!(
            elect("a", &all, Some("b"), None).scaler.as_deref(),
            Some("b"),
            "preferred by id"
        );
        assert_eq!(
            elect("a", &all, None, None).scaler.as_deref(),
            Some("a"),
            "lowest id"
        );
        assert!(elect("a", &all, None, None).acts);
        assert!(!elect("b", &all, None, None).acts, "others only believe");
    }

    #[test]
    fn the_highest_ranked_live_one_takes_over() {
        let all = vec![c("a", None, false), c("b", None, true), c("c", None, true)];
        let e = elect("b", &all, Some("a"), None);
        assert_eq!(e.scaler.as_deref(), Some("b"));
        assert!(e.acts, "2 of 3 live is a majority");
    }

    #[test]
    fn partitions_never_give_two_acting_scalers() {
        // Every split of 1..=5 balancers: at most one side has an acting scaler.
        let ids = ["a", "b", "c", "d", "e"];
        for n in 1..=5 {
            for mask in 0u32..(1 << n) {
                let mut acting = 0;
                for side in [true, false] {
                    let members: Vec<&str> = (0..n)
                        .filter(|i| ((mask >> i) & 1 == 1) == side)
                        .map(|i| ids[i])
                        .collect();
                    for me in &members {
                        let view: Vec<Candidate> = (0..n)
                            .map(|i| c(ids[i], None, members.contains(&ids[i])))
                            .collect();
                        if elect(me, &view, Some("c"), None).acts {
                            acting += 1;
                        }
                    }
                }
                assert!(acting <= 1, "n={n} mask={mask:b}: {acting} acting scalers");
                if n % 2 == 1 || mask == 0 || mask == (1 << n) - 1 {
                    assert_eq!(
                        acting, 1,
                        "n={n} mask={mask:b}: someone must act when a majority exists"
                    );
                }
            }
        }
    }

    #[test]
    fn at_a_heal_the_scalers_hand_over_without_overlap() {
        // b acted while a (preferred) was cut off; the partition heals.
        let mut b_acting = c("b", None, true);
        b_acting.acting = true;
        let a_view = vec![c("a", None, true), b_acting.clone(), c("c", None, true)];
        let a = super::elect("a", &a_view, 3, Some("a"), None, false);
        assert_eq!(a.scaler.as_deref(), Some("a"));
        assert!(!a.acts, "a waits while b says it acts");
        let b_view = vec![c("a", None, true), c("b", None, true), c("c", None, true)];
        let b = super::elect("b", &b_view, 3, Some("a"), None, true);
        assert!(!b.acts, "b stops: a outranks it");
        // b's acts = 0 reaches a: now a acts.
        let a_view = vec![c("a", None, true), c("b", None, true), c("c", None, true)];
        assert!(super::elect("a", &a_view, 3, Some("a"), None, false).acts);
        // A scaler already acting keeps acting even if a stale claim lingers.
        let a_view = vec![c("a", None, true), b_acting, c("c", None, true)];
        assert!(super::elect("a", &a_view, 3, Some("a"), None, true).acts);
    }

    #[test]
    fn acting_needs_a_fresh_majority() {
        // Live, but not heard from lately: the start of a partition.
        let mut b = c("b", None, true);
        b.fresh = false;
        let mut cc = c("c", None, true);
        cc.fresh = false;
        let e = super::elect(
            "a",
            &[c("a", None, true), b.clone(), cc],
            3,
            None,
            None,
            true,
        );
        assert_eq!(e.scaler.as_deref(), Some("a"));
        assert!(e.quorum, "a majority is still live");
        assert!(!e.acts, "but not fresh: stop before the other side elects");
        let e = super::elect(
            "a",
            &[c("a", None, true), b, c("c", None, true)],
            3,
            None,
            None,
            true,
        );
        assert!(e.acts, "two of three fresh");
    }

    #[test]
    fn balancers_never_seen_count_and_are_not_outranked() {
        // Three known, one never seen (an address-only peer not reached yet).
        let two = [c("a", None, true), c("b", None, false)];
        let e = super::elect("a", &two, 3, None, None, false);
        assert_eq!((e.live, e.known), (1, 3));
        assert!(!e.quorum && !e.acts, "alone among three known");
        // Two known, one never seen: exactly half, and a's rank against it unknown.
        let one = [c("a", None, true)];
        let e = super::elect("a", &one, 2, None, None, false);
        assert!(!e.acts);
        // Two of three live (one never seen): a majority.
        let e = super::elect(
            "a",
            &[c("a", None, true), c("b", None, true)],
            3,
            None,
            None,
            false,
        );
        assert!(e.acts);
    }

    #[test]
    fn gear_ratio_parks_the_local_gear() {
        assert!(!park_local_gear(2, 1, 3, true), "2 web gears per balancer");
        assert!(park_local_gear(3, 1, 3, true));
        assert!(
            !park_local_gear(3, 1, 3, false),
            "never without a remote gear up"
        );
        assert!(
            park_local_gear(5, 2, 3, true),
            "2.5 rounds to 3, as Ruby's round did"
        );
        assert!(!park_local_gear(4, 2, 3, true), "2 per balancer");
        assert!(park_local_gear(6, 2, 3, true));
        assert!(!park_local_gear(100, 1, -1, true), "-1 turns it off");
        assert!(park_local_gear(3, 1, 1, true), "values under 3 count as 3");
        assert!(!park_local_gear(2, 1, 1, true));
        assert!(park_local_gear(4, 1, 4, true));
        assert!(!park_local_gear(3, 1, 4, true));
    }

    #[test]
    fn exactly_half_acts_only_when_it_outranks_the_unseen() {
        let view_a = vec![c("a", None, true), c("b", None, false)];
        let view_b = vec![c("a", None, false), c("b", None, true)];
        assert!(elect("a", &view_a, None, None).acts);
        assert!(!elect("b", &view_b, None, None).acts);
    }
}
