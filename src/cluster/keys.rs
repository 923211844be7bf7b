//! The gossip key schema: the name and encoding of every value a balancer publishes,
//! and their decoding (pure).
//!
//! chitchat sends a node's keys in version order and cannot send a single value larger
//! than its 65 507-byte message: one such value stops every later key of that node
//! from propagating. So no value here grows with the number of gears: gear health is
//! reported by exception (the gears found down), spread over [`HEALTH_BUCKETS`] keys
//! by a stable hash of the gear, and rotations and acknowledgments have one key per
//! gear. [`MAX_VALUE`] is what one value may hold; [`down_buckets`] stays under it for
//! up to about 80 000 gears down at once.
//!
//! | key           | value                                                              |
//! |---------------|--------------------------------------------------------------------|
//! | `ready`       | `1` while serving; `0` when stopping                                |
//! | `name`        | the gear name, for people                                          |
//! | `load`        | JSON `{"s":sessions,"a":avg sessions,"r":requests/s,"f":in flight}` |
//! | `hs`          | the subset epoch the health below is relative to ([`subset_epoch`]) |
//! | `hd:<bb>`     | JSON array of the gears of this balancer's subset found down, those |
//! |               | whose [`bucket`] is `bb` (two hex digits); `[]` once none is        |
//! | `rot:<gear>`  | the rotation op in force for the gear, JSON ([`crate::rotation`])  |
//! | `ack:<gear>`  | this balancer's acknowledgment of it, JSON                          |
//! | `scaler`      | who this balancer believes the scaler is                           |
//! | `acts`        | `1` while this balancer acts as the scaler, else `0`               |
//! | `scale`       | the last scale event this balancer made, JSON                       |
//! | `sf:<name>`   | a service this balancer reads from a watched file, JSON             |
//! | `sr:<s>/<b>`  | an instance registered here (service `s`, backend `b`), JSON        |
//! | `sv:<s>`      | a version cut-over or hold decided here for service `s`, JSON        |
//! | `sa:<s>`      | the decision (its time) this balancer runs `s` by, once drained      |
//! | `spi`         | a router's table: its digest, events taken in, status listener, JSON |
//! | `sd:<bb>`     | a router's backends found down (`service/backend`), bucketed as `hd:` |

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::routing::subset::stable_hash;

/// Buckets of the down-gear report.
pub const HEALTH_BUCKETS: u64 = 64;
/// The largest value this schema ever writes (well under chitchat's message limit,
/// which also carries a digest of every node and the other keys of a delta).
pub const MAX_VALUE: usize = 48 * 1024;

pub const READY: &str = "ready";
pub const NAME: &str = "name";
pub const LOAD: &str = "load";
pub const SUBSET_EPOCH: &str = "hs";
pub const DOWN_PREFIX: &str = "hd:";
pub const ROTATION_PREFIX: &str = "rot:";
pub const ACK_PREFIX: &str = "ack:";
pub const SCALER: &str = "scaler";
pub const ACTS: &str = "acts";
pub const SCALE: &str = "scale";
pub const SERVICE_FILE_PREFIX: &str = "sf:";
pub const REGISTRATION_PREFIX: &str = "sr:";
pub const VERSIONS_PREFIX: &str = "sv:";
pub const VERSION_ACK_PREFIX: &str = "sa:";
pub const SPI_DOWN_PREFIX: &str = "sd:";

/// The down-report bucket of a gear.
pub fn bucket(label: &str) -> u64 {
    stable_hash(label) % HEALTH_BUCKETS
}

/// The key of a bucket.
pub fn down_key(bucket: u64) -> String {
    format!("{DOWN_PREFIX}{bucket:02x}")
}

/// The down-report keys and values for `down` (gears of this balancer's subset found
/// down): one value per non-empty bucket, gears sorted.
pub fn down_buckets<'a>(down: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    buckets(DOWN_PREFIX, down)
}

/// `down` spread over [`HEALTH_BUCKETS`] keys under `prefix` (as [`down_buckets`]).
pub fn buckets<'a>(
    prefix: &str,
    down: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, String> {
    let mut by_bucket: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for label in down {
        by_bucket.entry(bucket(label)).or_default().insert(label);
    }
    by_bucket
        .into_iter()
        .map(|(b, labels)| {
            (
                format!("{prefix}{b:02x}"),
                serde_json::to_string(&labels).unwrap_or_else(|_| "[]".into()),
            )
        })
        .collect()
}

/// The gears a `hd:` value names (nothing for a value that is not a JSON array of
/// strings).
pub fn parse_down(value: &str) -> Vec<String> {
    serde_json::from_str(value).unwrap_or_default()
}

/// What the subsets of this moment depend on: the live balancers, the gears and the
/// coverage. Two balancers with the same epoch compute the same subsets, so each
/// knows exactly which gears the other covers (and reports on).
pub fn subset_epoch(live: &[&str], gears: &[&str], coverage: u32) -> String {
    let mut live: Vec<&str> = live.to_vec();
    live.sort_unstable();
    live.dedup();
    let mut gears: Vec<&str> = gears.to_vec();
    gears.sort_unstable();
    gears.dedup();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |s: &str| {
        for b in s.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    feed(&coverage.to_string());
    for l in &live {
        feed(l);
    }
    feed("|");
    for g in &gears {
        feed(g);
    }
    format!("{h:016x}.{}.{}.{coverage}", live.len(), gears.len())
}

/// One peer's health report: the epoch it is relative to and the gears it found down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthReport {
    pub epoch: Option<String>,
    pub down: HashSet<String>,
}

impl HealthReport {
    /// Read a peer's report from its keys.
    pub fn from_keys<'a>(keys: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let mut r = HealthReport::default();
        let mut any = false;
        for (k, v) in keys {
            if k == SUBSET_EPOCH {
                r.epoch = Some(v.to_string());
                any = true;
            } else if k.starts_with(DOWN_PREFIX) {
                r.down.extend(parse_down(v));
                any = true;
            }
        }
        any.then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gear label of the platform's real shape: 32-hex gear name, 16-letter namespace.
    fn label(i: usize) -> String {
        format!(
            "{:032x}-abcdefghijklmnop",
            (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c)
        )
    }

    #[test]
    fn ten_thousand_gears_down_stay_bounded_per_value() {
        let labels: Vec<String> = (0..10_000).map(label).collect();
        let buckets = down_buckets(labels.iter().map(String::as_str));
        let largest = buckets.values().map(String::len).max().unwrap();
        assert!(largest < MAX_VALUE, "largest value {largest} bytes");
        // The one-value encoding this replaces did not fit chitchat's message at all.
        let one_value = serde_json::to_string(&labels).unwrap();
        assert!(one_value.len() > 65_507);
        // Every gear is in exactly one bucket, and reads back.
        let r =
            HealthReport::from_keys(buckets.iter().map(|(k, v)| (k.as_str(), v.as_str()))).unwrap();
        assert_eq!(r.down.len(), 10_000);
        assert!(labels.iter().all(|l| r.down.contains(l)));
    }

    #[test]
    fn buckets_spread_and_decode_defensively() {
        let labels: Vec<String> = (0..6400).map(label).collect();
        let buckets = down_buckets(labels.iter().map(String::as_str));
        assert_eq!(buckets.len(), HEALTH_BUCKETS as usize);
        for v in buckets.values() {
            let n = parse_down(v).len();
            assert!((50..=150).contains(&n), "uneven bucket: {n}");
        }
        assert!(parse_down("not json").is_empty());
        assert!(parse_down("{\"a\":1}").is_empty());
        assert_eq!(parse_down("[]"), Vec::<String>::new());
    }

    #[test]
    fn epochs_depend_on_what_subsets_depend_on_only() {
        let e = subset_epoch(&["b", "a"], &["g2", "g1"], 40);
        assert_eq!(e, subset_epoch(&["a", "b", "a"], &["g1", "g2"], 40));
        assert_ne!(e, subset_epoch(&["a"], &["g1", "g2"], 40));
        assert_ne!(e, subset_epoch(&["a", "b"], &["g1"], 40));
        assert_ne!(e, subset_epoch(&["a", "b"], &["g1", "g2"], 50));
        // No ambiguity between a balancer and a gear of the same name.
        assert_ne!(
            subset_epoch(&["a", "x"], &["g"], 40),
            subset_epoch(&["a"], &["x", "g"], 40)
        );
    }
}
