//! Versions of a service's backends (pure): a backend's [`Version`], the compatibility
//! groups they form under a service's [`Rule`], which group is active, and which
//! backends new sessions may go to ([`plan`]).
//!
//! Seed 002's rule: an instance says which version it runs (`catalog-2.4.1`) and may
//! list the versions it is compatible with; by default two versions are compatible when
//! MAJOR.MINOR are equal. The **active group** is the oldest group that still has an
//! instance (not held back): newer incompatible groups get no new session until it has
//! none, so `catalog-2.5.1` waits for the last `2.4.x` to stop. A cut-over makes a
//! newer group active at once (the older ones then drain); a canary sends a share of
//! new sessions to the next group; `prefer` narrows the active group to its newest or
//! oldest version.
//!
//! Backends without a version belong to every group. A service none of whose backends
//! has a version is not affected at all.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;

/// A version: an optional name and MAJOR.MINOR.PATCH (missing parts are 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    /// What came before the numbers (`catalog` in `catalog-2.4.1`), maybe empty.
    pub name: String,
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Version {
    /// `catalog-2.4.1`, `2.4.1`, `v2.4` or `2`.
    pub fn parse(text: &str) -> Result<Version, String> {
        let t = text.trim();
        let bad =
            || format!("version {text:?}: expected [NAME-]MAJOR[.MINOR[.PATCH]], as catalog-2.4.1");
        if t.is_empty() || t.len() > 128 {
            return Err(bad());
        }
        let (name, numbers) = match t.rfind('-') {
            Some(i) if t[i + 1..].starts_with(|c: char| c.is_ascii_digit() || c == 'v') => {
                (&t[..i], &t[i + 1..])
            }
            _ => ("", t),
        };
        let numbers = numbers.strip_prefix('v').unwrap_or(numbers);
        let mut parts = numbers.split('.');
        let mut next = |required: bool| -> Result<u64, String> {
            match parts.next() {
                None if !required => Ok(0),
                Some(p)
                    if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.len() <= 18 =>
                {
                    p.parse().map_err(|_| bad())
                }
                _ => Err(bad()),
            }
        };
        let v = Version {
            name: name.to_string(),
            major: next(true)?,
            minor: next(false)?,
            patch: next(false)?,
        };
        if parts.next().is_some()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(bad());
        }
        Ok(v)
    }

    fn numbers(&self) -> (u64, u64, u64) {
        (self.major, self.minor, self.patch)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.numbers()
            .cmp(&other.numbers())
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.name.is_empty() {
            write!(f, "{}-", self.name)?;
        }
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// When two versions are compatible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Same MAJOR.MINOR (seed 002's default).
    #[default]
    MajorMinor,
    /// Same MAJOR.
    Major,
    /// Only as the backends' `compatible` lists say (and the same version).
    Explicit,
}

/// Within the active group, which versions take new sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefer {
    /// Every version of the group.
    #[default]
    Any,
    /// Its newest version only (while it has an instance).
    Newer,
    /// Its oldest version only.
    Older,
}

/// A service's version policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub rule: Rule,
    pub prefer: Prefer,
    /// Share of new sessions sent to the next group, per mille (50 = 5%).
    pub canary_per_mille: u32,
    /// A cut-over: the group of this version is active (older groups drain).
    pub cutover: Option<Version>,
    /// Groups held back (by one of their versions): never active, never the canary.
    pub held: BTreeSet<Version>,
}

/// One backend as the plan sees it.
#[derive(Clone, Debug, Default)]
pub struct Member {
    pub version: Option<Version>,
    /// Versions it says it is compatible with (the [`Rule::Explicit`] rule).
    pub compatible: Vec<Version>,
    /// Counts as an instance of its group (registered, defined, not rotated out).
    pub present: bool,
}

/// Which backends new sessions may go to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// False when no backend has a version: every backend as usual.
    pub versioned: bool,
    /// Backends (indices) of the active group, narrowed by `prefer`, and those
    /// without a version.
    pub active: Vec<usize>,
    /// Backends of the canary group.
    pub canary: Vec<usize>,
    pub canary_per_mille: u32,
    /// Each group's versions, oldest group first, and which one is active.
    pub groups: Vec<Vec<Version>>,
    pub active_group: Option<usize>,
    pub canary_group: Option<usize>,
}

/// The group of every versioned member (indices into the returned list of groups, each
/// the sorted versions in it), groups ordered by their oldest version.
fn group(members: &[Member], rule: Rule) -> (Vec<Option<usize>>, Vec<Vec<Version>>) {
    let versions: Vec<&Version> = {
        let set: BTreeSet<&Version> = members.iter().filter_map(|m| m.version.as_ref()).collect();
        set.into_iter().collect()
    };
    // Union-find over the distinct versions.
    let mut parent: Vec<usize> = (0..versions.len()).collect();
    fn find(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let index = |v: &Version| versions.iter().position(|x| *x == v);
    for i in 0..versions.len() {
        for j in i + 1..versions.len() {
            let (a, b) = (versions[i], versions[j]);
            let joined = match rule {
                Rule::MajorMinor => a.name == b.name && a.major == b.major && a.minor == b.minor,
                Rule::Major => a.name == b.name && a.major == b.major,
                Rule::Explicit => false,
            };
            if joined {
                let (ri, rj) = (find(&mut parent, i), find(&mut parent, j));
                parent[ri.max(rj)] = ri.min(rj);
            }
        }
    }
    if rule == Rule::Explicit {
        for m in members {
            let Some(v) = m.version.as_ref().and_then(index) else {
                continue;
            };
            for c in &m.compatible {
                if let Some(c) = index(c) {
                    let (ri, rc) = (find(&mut parent, v), find(&mut parent, c));
                    parent[ri.max(rc)] = ri.min(rc);
                }
            }
        }
    }
    // Roots in version order are the groups in order of their oldest version.
    let mut root_group: Vec<Option<usize>> = vec![None; versions.len()];
    let mut groups: Vec<Vec<Version>> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let r = find(&mut parent, i);
        let g = match root_group[r] {
            Some(g) => g,
            None => {
                groups.push(Vec::new());
                root_group[r] = Some(groups.len() - 1);
                groups.len() - 1
            }
        };
        groups[g].push((*v).clone());
    }
    let of = members
        .iter()
        .map(|m| {
            let i = m.version.as_ref().and_then(index)?;
            root_group[find(&mut parent, i)]
        })
        .collect();
    (of, groups)
}

/// Which backends new sessions may go to under `policy` (see the module doc).
pub fn plan(members: &[Member], policy: &Policy) -> Plan {
    if members.iter().all(|m| m.version.is_none()) {
        return Plan {
            active: (0..members.len()).collect(),
            ..Plan::default()
        };
    }
    let (of, groups) = group(members, policy.rule);
    let held = |g: usize| groups[g].iter().any(|v| policy.held.contains(v));
    let present = |g: usize| {
        members
            .iter()
            .zip(&of)
            .any(|(m, o)| *o == Some(g) && m.present)
    };
    let cut = policy
        .cutover
        .as_ref()
        .and_then(|c| groups.iter().position(|g| g.contains(c)))
        .filter(|&g| present(g));
    let active_group = cut.or_else(|| (0..groups.len()).find(|&g| present(g) && !held(g)));
    let canary_group =
        active_group.and_then(|a| (a + 1..groups.len()).find(|&g| present(g) && !held(g)));
    // `prefer`: the newest or oldest version of the active group that has an instance.
    let chosen: Option<Version> = active_group.and_then(|a| {
        let vs = members
            .iter()
            .zip(&of)
            .filter(|(m, o)| **o == Some(a) && m.present)
            .filter_map(|(m, _)| m.version.clone());
        match policy.prefer {
            Prefer::Any => None,
            Prefer::Newer => vs.max(),
            Prefer::Older => vs.min(),
        }
    });
    let mut active = Vec::new();
    let mut canary = Vec::new();
    for (i, (m, o)) in members.iter().zip(&of).enumerate() {
        match (o, &m.version) {
            (None, _) => active.push(i),
            (Some(g), Some(v))
                if Some(*g) == active_group && chosen.as_ref().is_none_or(|c| c == v) =>
            {
                active.push(i)
            }
            (Some(g), _) if Some(*g) == active_group => {}
            (Some(g), _) if Some(*g) == canary_group => canary.push(i),
            _ => {}
        }
    }
    Plan {
        versioned: true,
        active,
        canary,
        canary_per_mille: if canary_group.is_some() {
            policy.canary_per_mille.min(1000)
        } else {
            0
        },
        groups,
        active_group,
        canary_group,
    }
}

#[cfg(test)]
mod tests;
