//! `gearlb ctl set-peers ARGS…`: the subscriber hook's peer list
//! (`'uuid'='uuid|host:port'`, `uuid|host:port`, `host:port`), parsed by
//! `gear::parse_peers`.
//!
//! Oracle: no panic; all or nothing: either every peer is valid (ids are valid peer ids,
//! unique; ports usable; addresses print and parse back) or there is at least one
//! reported problem, printable ASCII.
#![no_main]

use gearlb::gear::{is_peer_id, parse_peers, Addr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Arguments as the control socket carries them: NUL separates words (argv).
    let text = String::from_utf8_lossy(data);
    let args: Vec<&str> = text.split('\0').collect();
    match parse_peers(&args) {
        Ok(peers) => {
            let words = args.iter().flat_map(|a| a.split_whitespace()).count();
            assert!(peers.len() <= words);
            let mut ids = std::collections::HashSet::new();
            for p in &peers {
                if let Some(id) = &p.id {
                    assert!(is_peer_id(id), "{id:?}");
                    assert!(ids.insert(id.clone()), "id {id} twice");
                }
                assert_ne!(p.addr.port(), 0);
                let again: Addr = p.addr.to_string().parse().expect("printed address parses");
                assert_eq!(again, p.addr);
            }
        }
        Err(bad) => {
            assert!(!bad.is_empty());
            for b in &bad {
                assert!(b.entry.is_ascii(), "{:?}", b.entry);
                assert!(
                    !b.entry.chars().any(|c| c.is_ascii_control()),
                    "{:?}",
                    b.entry
                );
            }
        }
    }
});
