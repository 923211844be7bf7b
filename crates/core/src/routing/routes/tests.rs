use super::*;

fn spec(service: &str, hosts: &[&str], paths: &[&str]) -> RouteSpec {
    RouteSpec {
        service: service.into(),
        hosts: hosts
            .iter()
            .map(|h| HostPattern::parse(h).unwrap())
            .collect(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
    }
}

#[test]
fn hosts_are_matched_without_case_port_or_trailing_dot() {
    assert_eq!(normalize_host("Shop.Example.COM:8080"), "shop.example.com");
    assert_eq!(normalize_host("shop.example.com."), "shop.example.com");
    assert_eq!(normalize_host("[::1]:8443"), "[::1]");
    assert_eq!(normalize_host("10.0.0.1"), "10.0.0.1");
    let t = RouteTable::new(&[spec("shop", &["shop.example.com"], &[])]).unwrap();
    assert_eq!(t.lookup("SHOP.example.com:80", "/cart"), Some("shop"));
    assert_eq!(t.lookup("shop.example.com.", "/"), Some("shop"));
    assert_eq!(t.lookup("other.example.com", "/"), None, "no route: a 404");
}

#[test]
fn the_most_specific_host_with_a_matching_path_wins_then_the_longest_prefix() {
    let t = RouteTable::new(&[
        spec("api-v2", &["api.example.com"], &["/v2"]),
        spec("api", &["api.example.com"], &["/"]),
        spec("domain", &["*.example.com"], &[]),
        spec("deep", &["*.eu.example.com"], &[]),
        spec("numbered", &["~^shop-[0-9]+\\."], &[]),
        spec("default", &["*"], &[]),
        spec("static", &["*"], &["/static"]),
    ])
    .unwrap();
    assert_eq!(t.len(), 7);
    assert_eq!(t.lookup("api.example.com", "/v2/items?x=1"), Some("api-v2"));
    assert_eq!(t.lookup("api.example.com", "/v2"), Some("api-v2"));
    assert_eq!(
        t.lookup("api.example.com", "/v2x"),
        Some("api"),
        "element-wise"
    );
    assert_eq!(t.lookup("api.example.com", "/v1"), Some("api"));
    assert_eq!(t.lookup("www.example.com", "/"), Some("domain"));
    assert_eq!(
        t.lookup("a.b.example.com", "/"),
        Some("domain"),
        "any depth"
    );
    assert_eq!(
        t.lookup("x.eu.example.com", "/"),
        Some("deep"),
        "the longest wildcard"
    );
    assert_eq!(
        t.lookup("example.com", "/"),
        Some("default"),
        "not the name itself"
    );
    assert_eq!(t.lookup("SHOP-12.shop.net", "/"), Some("numbered"));
    assert_eq!(t.lookup("shop-x.shop.net", "/static/a.css"), Some("static"));
    assert_eq!(t.lookup("shop-x.shop.net", "/index"), Some("default"));
}

#[test]
fn a_host_whose_paths_do_not_match_falls_through_to_less_specific_hosts() {
    let t = RouteTable::new(&[
        spec("admin", &["app.example.com"], &["/admin"]),
        spec("domain", &["*.example.com"], &[]),
    ])
    .unwrap();
    assert_eq!(t.lookup("app.example.com", "/admin/users"), Some("admin"));
    assert_eq!(t.lookup("app.example.com", "/"), Some("domain"));
    let none = RouteTable::new(&[spec("admin", &["app.example.com"], &["/admin"])]).unwrap();
    assert_eq!(none.lookup("app.example.com", "/"), None);
}

#[test]
fn a_conflict_names_both_services_and_builds_nothing() {
    let errors = RouteTable::new(&[
        spec("catalog", &["shop.example.com"], &["/catalog"]),
        spec("catalog-old", &["SHOP.example.com"], &["/catalog/"]),
        spec("x", &["shop.example.com"], &["catalog"]),
        // The same service twice is no conflict.
        spec("catalog", &["shop.example.com"], &["/catalog"]),
    ])
    .unwrap_err();
    assert_eq!(
        errors,
        vec![
            RouteError::Conflict {
                host: "shop.example.com".into(),
                path: "/catalog/".into(),
                first: "catalog".into(),
                later: "catalog-old".into(),
            },
            RouteError::BadPath {
                service: "x".into(),
                path: "catalog".into(),
            },
        ]
    );
    assert!(
        errors[0].to_string().contains("\"catalog\""),
        "{}",
        errors[0]
    );
}

#[test]
fn bad_host_patterns_are_refused_with_the_reason() {
    for bad in [
        "",
        "shop example.com",
        "shop.example.com:80",
        "a..b",
        "*.",
        "~",
        "~(",
        "a/b",
        "*x.com",
    ] {
        let e = HostPattern::parse(bad).unwrap_err();
        assert!(e.contains("host"), "{bad:?}: {e}");
    }
    assert!(matches!(HostPattern::parse("*").unwrap(), HostPattern::Any));
    assert!(matches!(
        HostPattern::parse("[::1]").unwrap(),
        HostPattern::Exact(_)
    ));
    assert_eq!(
        HostPattern::parse("*.Example.com").unwrap().key(),
        "*.example.com"
    );
}

#[test]
fn ten_thousand_routes_are_found_as_one() {
    let specs: Vec<RouteSpec> = (0..10_000)
        .map(|i| {
            spec(
                &format!("s{i}"),
                &[&format!("app{i}.example.com")],
                &["/", "/api"],
            )
        })
        .chain([spec("wild", &["*.apps.example.com"], &[])])
        .collect();
    let t = RouteTable::new(&specs).unwrap();
    assert_eq!(t.len(), 20_001);
    assert_eq!(t.lookup("app9999.example.com", "/api/x"), Some("s9999"));
    assert_eq!(t.lookup("app0.example.com", "/"), Some("s0"));
    assert_eq!(t.lookup("x.apps.example.com", "/"), Some("wild"));
    assert_eq!(t.lookup("app10000.example.com", "/"), None);
}

#[test]
fn build_refuses_a_later_claimant_whole_and_routes_the_rest() {
    let spec = |service: &str, hosts: &[&str], paths: &[&str]| RouteSpec {
        service: service.into(),
        hosts: hosts
            .iter()
            .map(|h| HostPattern::parse(h).unwrap())
            .collect(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
    };
    let specs = [
        spec("shop", &["shop.example.com"], &["/"]),
        // Its /api is free, its / is not: refused whole.
        spec("api", &["shop.example.com"], &["/api", "/"]),
        spec("blog", &["blog.example.com"], &[]),
        spec("shop", &["SHOP.example.com"], &["/cart"]),
    ];
    let (t, refused) = RouteTable::build(&specs);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].0, "api");
    assert!(matches!(
        &refused[0].1[..],
        [RouteError::Conflict { first, later, .. }] if first == "shop" && later == "api"
    ));
    assert_eq!(t.lookup("shop.example.com", "/api/x"), Some("shop"));
    assert_eq!(t.lookup("blog.example.com", "/"), Some("blog"));
    assert_eq!(t.services(), ["shop", "blog"]);
    assert_eq!(t.lookup("shop.example.com", "/cart/1"), Some("shop"));
    assert_eq!(t.lookup_index("blog.example.com", "/"), Some(1));
}
