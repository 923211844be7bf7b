//! The known membership at start: the configured peers (`cluster.peers`) and the saved
//! list (`set-peers`, identities learnt at addresses), and which one wins ([`combine_peers`]).

use crate::gear::PeerSpec;

/// Where the known membership at start came from ([`combine_peers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerSource {
    /// Nothing saved yet: `cluster.peers`.
    Configured,
    /// The saved list (the last `set-peers`, and identities learnt from addresses):
    /// `cluster.peers` is what it was when it was saved.
    Saved,
    /// `cluster.peers` changed since the list was saved: the configuration wins, and
    /// this many saved peers were dropped.
    ConfigurationChanged { dropped: usize },
}

/// What a state file remembers of `cluster.peers`, to tell whether it changed.
pub fn peers_fingerprint(configured: &[crate::gear::Addr]) -> String {
    let mut v: Vec<String> = configured.iter().map(|a| a.to_string()).collect();
    v.sort();
    v.dedup();
    v.join(" ")
}

/// The known membership at start (pure): the saved list, unless `cluster.peers`
/// changed since it was saved (`saved_fingerprint`, [`peers_fingerprint`]), in which
/// case the configuration wins, keeping identities learnt at addresses it still lists.
/// A state file without a fingerprint (older versions) counts as unchanged when every
/// configured address is in the saved list.
pub fn combine_peers(
    configured: &[crate::gear::Addr],
    saved: &[PeerSpec],
    saved_fingerprint: Option<&str>,
) -> (Vec<PeerSpec>, PeerSource) {
    let from_config = || -> Vec<PeerSpec> {
        configured
            .iter()
            .map(|a| {
                let learnt = saved.iter().find(|p| p.learned && p.addr == *a);
                PeerSpec {
                    id: learnt.and_then(|p| p.id.clone()),
                    addr: a.clone(),
                    learned: learnt.is_some(),
                }
            })
            .collect()
    };
    if saved.is_empty() {
        return (from_config(), PeerSource::Configured);
    }
    let unchanged = match saved_fingerprint {
        Some(f) => f == peers_fingerprint(configured),
        None => configured
            .iter()
            .all(|a| saved.iter().any(|p| p.addr == *a)),
    };
    if unchanged {
        (saved.to_vec(), PeerSource::Saved)
    } else {
        (
            from_config(),
            PeerSource::ConfigurationChanged {
                dropped: saved.len(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_and_saved_peers_combine_by_the_fingerprint() {
        let a = |s: &str| -> crate::gear::Addr { s.parse().unwrap() };
        let spec = |id: Option<&str>, addr: &str, learned: bool| PeerSpec {
            id: id.map(str::to_string),
            addr: a(addr),
            learned,
        };
        let conf = [a("10.0.0.1:7001"), a("10.0.0.2:7001")];
        // Nothing saved: the configuration.
        let (k, src) = combine_peers(&conf, &[], None);
        assert_eq!(src, PeerSource::Configured);
        assert_eq!(k.len(), 2);
        // Saved with the same configuration: the saved list (learnt ids, set-peers).
        let saved = vec![
            spec(Some("lb1"), "10.0.0.1:7001", true),
            spec(None, "10.0.0.2:7001", false),
        ];
        let fp = peers_fingerprint(&conf);
        assert_eq!(
            combine_peers(&conf, &saved, Some(&fp)),
            (saved.clone(), PeerSource::Saved)
        );
        // The ports changed in the configuration: it wins; a learnt id stays with the
        // address still listed.
        let moved = [a("10.0.0.1:7001"), a("10.0.0.2:8001")];
        let (k, src) = combine_peers(&moved, &saved, Some(&fp));
        assert_eq!(src, PeerSource::ConfigurationChanged { dropped: 2 });
        assert_eq!(
            k,
            vec![
                spec(Some("lb1"), "10.0.0.1:7001", true),
                spec(None, "10.0.0.2:8001", false)
            ]
        );
        // set-peers lists survive a configuration without cluster.peers.
        let hook = vec![spec(Some("u1"), "10.0.0.9:35561", false)];
        let none = peers_fingerprint(&[]);
        assert_eq!(combine_peers(&[], &hook, Some(&none)).1, PeerSource::Saved);
        // An older state file (no fingerprint): unchanged while it has every address.
        assert_eq!(combine_peers(&conf, &saved, None).1, PeerSource::Saved);
        assert!(matches!(
            combine_peers(&moved, &saved, None).1,
            PeerSource::ConfigurationChanged { .. }
        ));
    }
}
