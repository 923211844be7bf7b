//! `gearlb ctl update-cluster ARGS…`: the node's entry list, `<gear-dns>|<host>:<port>`
//! words (one shell word holding spaces, or many), parsed by `gear::parse_entries`.
//!
//! Oracle: no panic, and nothing that comes out valid could route anywhere unexpected:
//! every valid entry has a valid DNS name, a label that is a valid backend/cookie value,
//! a usable port and an address that prints and parses back to itself; labels are
//! unique; every rejected entry is reported as printable ASCII.
#![no_main]

use gearlb::gear::{entry_label, is_backend_name, is_dns_name, parse_entries, Addr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Arguments as the control socket carries them: NUL separates words (argv).
    let text = String::from_utf8_lossy(data);
    let args: Vec<&str> = text.split('\0').collect();
    let words = args.iter().flat_map(|a| a.split_whitespace()).count();
    let parsed = parse_entries(&args);
    assert!(parsed.valid.len() + parsed.invalid.len() <= words);
    let mut labels = std::collections::HashSet::new();
    for e in &parsed.valid {
        assert!(is_dns_name(&e.gear_dns), "{:?}", e.gear_dns);
        assert_eq!(e.gear_dns, e.gear_dns.to_ascii_lowercase());
        assert_eq!(Some(e.label.as_str()), e.gear_dns.split('.').next());
        assert!(!e.label.is_empty() && e.label.len() <= 63);
        assert!(is_backend_name(&e.server_name()), "{:?}", e.server_name());
        assert!(is_backend_name(&e.label));
        assert_ne!(e.addr.port(), 0);
        let again: Addr = e.addr.to_string().parse().expect("printed address parses");
        assert_eq!(again, e.addr);
        assert!(labels.insert(e.label.clone()), "label {} twice", e.label);
    }
    for b in &parsed.invalid {
        assert!(b.entry.is_ascii(), "{:?}", b.entry);
        assert!(
            !b.entry.chars().any(|c| c.is_ascii_control()),
            "{:?}",
            b.entry
        );
        assert!(!b.reason.is_empty());
    }
    for w in args.iter().flat_map(|a| a.split_whitespace()) {
        if let Some(l) = entry_label(w) {
            assert!(is_backend_name(&l), "{l:?}");
        }
    }
});
