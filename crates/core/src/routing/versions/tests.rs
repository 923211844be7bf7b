use super::*;

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

fn m(version: &str) -> Member {
    Member {
        version: Some(v(version)),
        compatible: vec![],
        present: true,
    }
}

#[test]
fn versions_parse_with_or_without_a_name_and_order_by_number() {
    assert_eq!(v("catalog-2.4.1").to_string(), "catalog-2.4.1");
    assert_eq!(v("2.4").to_string(), "2.4.0");
    assert_eq!(v("v3").major, 3);
    assert_eq!(v("my-service-v1.2.3").name, "my-service");
    assert!(v("catalog-2.4.10") > v("catalog-2.4.9"));
    for bad in ["", "catalog", "1.2.3.4", "1..2", "x-1.a", "1.2 3"] {
        assert!(Version::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_newer_incompatible_group_waits_for_the_last_of_the_older_one() {
    let policy = Policy::default();
    let mut ms = vec![m("catalog-1.0.1"), m("catalog-1.0.2"), m("catalog-1.1.0")];
    let p = plan(&ms, &policy);
    assert!(p.versioned);
    assert_eq!(p.active, [0, 1], "1.0.1 and 1.0.2 serve side by side");
    assert!(p.canary.is_empty() || p.canary_per_mille == 0);
    assert_eq!(p.groups.len(), 2);
    // The last 1.0.x goes: 1.1.0 takes everything.
    ms[0].present = false;
    ms[1].present = false;
    assert_eq!(plan(&ms, &policy).active, [2]);
}

#[test]
fn prefer_canary_cutover_and_hold() {
    let ms = vec![m("c-1.0.1"), m("c-1.0.2"), m("c-1.1.0"), m("c-1.2.0")];
    let newer = Policy {
        prefer: Prefer::Newer,
        ..Policy::default()
    };
    assert_eq!(plan(&ms, &newer).active, [1]);
    let older = Policy {
        prefer: Prefer::Older,
        ..Policy::default()
    };
    assert_eq!(plan(&ms, &older).active, [0]);
    let canary = Policy {
        canary_per_mille: 100,
        ..Policy::default()
    };
    let p = plan(&ms, &canary);
    assert_eq!(
        (p.active.clone(), p.canary.clone(), p.canary_per_mille),
        (vec![0, 1], vec![2], 100)
    );
    let cut = Policy {
        cutover: Some(v("c-1.2.0")),
        ..Policy::default()
    };
    assert_eq!(plan(&ms, &cut).active, [3], "the older groups drain");
    let held = Policy {
        held: [v("c-1.1.0")].into_iter().collect(),
        canary_per_mille: 100,
        ..Policy::default()
    };
    let p = plan(&ms, &held);
    assert_eq!(p.canary, [3], "a held group is skipped");
}

#[test]
fn unversioned_backends_serve_with_every_group_and_alone_change_nothing() {
    let plain = Member::default();
    let p = plan(&[plain.clone(), plain.clone()], &Policy::default());
    assert!(!p.versioned);
    assert_eq!(p.active, [0, 1]);
    let mut b = plain.clone();
    b.present = true;
    let p = plan(&[b, m("x-1.0.0"), m("x-2.0.0")], &Policy::default());
    assert_eq!(p.active, [0, 1]);
}

#[test]
fn rules_major_and_explicit() {
    let ms = vec![m("c-1.0.0"), m("c-1.4.0"), m("c-2.0.0")];
    let major = Policy {
        rule: Rule::Major,
        ..Policy::default()
    };
    assert_eq!(plan(&ms, &major).active, [0, 1]);
    let mut explicit = ms.clone();
    explicit[2].compatible = vec![v("c-1.4.0")];
    let p = plan(
        &explicit,
        &Policy {
            rule: Rule::Explicit,
            ..Policy::default()
        },
    );
    assert_eq!(p.active, [0], "1.0.0 is compatible with nothing else");
    assert_eq!(p.groups.len(), 2);
    assert_eq!(p.groups[1], [v("c-1.4.0"), v("c-2.0.0")]);
}
