//! The state file `<state.dir>/state.json`, read at start-up by `state::parse`.
//!
//! Oracle: no panic; what is accepted has format 1 and valid, unique backend names, and
//! survives a save/load round trip unchanged (what gearlb writes, it reads back).
#![no_main]

use gearlb::gear::is_backend_name;
use gearlb::state::{parse, FORMAT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(st) = parse(text) else { return };
    assert_eq!(st.format, FORMAT);
    let mut names = std::collections::HashSet::new();
    for b in &st.backends {
        assert!(is_backend_name(&b.name), "{:?}", b.name);
        assert!(names.insert(b.name.clone()));
        assert_ne!(b.addr.port(), 0);
    }
    let written = serde_json::to_string_pretty(&st).expect("serialises");
    let again = parse(&written).expect("what gearlb writes, it reads back");
    assert_eq!(again, st);
});
