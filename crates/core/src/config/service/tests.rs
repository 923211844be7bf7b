use super::*;
use crate::config::{from_toml, Env};

struct NoEnv;
impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

#[test]
fn services_from_the_configuration_file() {
    let cfg = from_toml(
        r#"
[[services]]
name = "shop"
hosts = ["shop.example.com", "*.shop.example.com"]
paths = ["/", "/api"]
sticky_cookie = "SHOP"
queue_timeout = "2s"
health = { path = "/healthz", port = 9001, expect = "^2" }
timeouts = { connect = "1s", server = "30s" }
[[services.backends]]
name = "s1"
addr = "127.0.0.1:9000"
max_connections = 2
[[services.backends]]
name = "s2"
addr = "127.0.0.1:9002"
backup = true

[[services]]
name = "blog"
hosts = ["~^blog[0-9]*\\.example\\.com$"]
listen = "127.0.0.1:18090"
"#,
        &NoEnv,
    )
    .unwrap();
    assert!(
        !cfg.default_service(),
        "no top-level backends: no default service"
    );
    let shop = &cfg.services[0];
    assert_eq!(shop.paths, ["/", "/api"]);
    assert_eq!(shop.sticky_cookie.as_deref(), Some("SHOP"));
    assert_eq!(shop.queue_timeout, Some(Duration::from_secs(2)));
    assert_eq!(shop.health.port, Some(9001));
    assert_eq!(shop.timeouts.server, Some(Duration::from_secs(30)));
    assert_eq!(shop.backends[0].max_connections, Some(2));
    assert!(!shop.backends[0].backup && shop.backends[1].backup);
    assert_eq!(cfg.services[1].paths, ["/"], "paths default to /");
    assert_eq!(cfg.services[1].listen.unwrap().port(), 18090);
}

#[test]
fn every_problem_of_a_service_is_listed_with_its_key() {
    let e = from_toml(
        r#"
[[services]]
name = "bad name"
hosts = ["a b"]
paths = ["api"]
colour = "blue"
[[services.backends]]
name = "x"
addr = "nowhere"
[[services.backends]]
name = "x"
addr = "127.0.0.1:1"
max_connections = 0
"#,
        &NoEnv,
    )
    .unwrap_err();
    let paths: Vec<&str> = e.0.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "services[0].name",
        "services[0].hosts",
        "services[0].paths",
        "services[0].colour",
        "services[0].backends[0].addr",
        "services[0].backends[1].name",
        "services[0].backends[1].max_connections",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
}

#[test]
fn conflicting_routes_in_the_file_name_both_services() {
    let e = from_toml(
        r#"
[[backends]]
name = "app"
addr = "127.0.0.1:9000"
[[services]]
name = "shop"
hosts = ["shop.example.com"]
[[services]]
name = "shop2"
hosts = ["SHOP.example.com."]
[[services]]
name = "all"
"#,
        &NoEnv,
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("\"shop2\"") && text.contains("\"shop\""),
        "{text}"
    );
    // A service without hosts takes every host: the top-level backends' already do.
    assert!(
        text.contains("\"all\"") && text.contains("\"default\""),
        "{text}"
    );
}

#[test]
fn a_watched_yaml_file_holds_one_service_at_its_top_level() {
    let yaml = "name: api\nhosts:\n  - api.example.com\npaths: [/v1]\nbackends:\n  - name: web-1\n    addr: 10.0.0.5:8080\n  - {name: web-2, addr: \"10.0.0.6:8080\", backup: true, max_connections: 5}\n";
    let s = parse_service_file(FileFormat::Yaml, yaml).unwrap();
    assert_eq!(s.name, "api");
    assert_eq!(s.hosts, ["api.example.com"]);
    assert_eq!(s.paths, ["/v1"]);
    assert_eq!(s.backends.len(), 2);
    assert_eq!(s.backends[1].max_connections, Some(5));
    let toml = "name = \"api\"\nhosts = [\"api.example.com\"]\npaths = [\"/v1\"]\n[[backends]]\nname = \"web-1\"\naddr = \"10.0.0.5:8080\"\n[[backends]]\nname = \"web-2\"\naddr = \"10.0.0.6:8080\"\nbackup = true\nmax_connections = 5\n";
    assert_eq!(parse_service_file(FileFormat::Toml, toml).unwrap(), s);
}

#[test]
fn a_bad_or_half_written_file_is_refused_with_every_problem() {
    // Cut in the middle of a backend, as a file being written.
    let half =
        "name: api\nhosts: [api.example.com]\nbackends:\n  - name: web-1\n    addr: \"10.0.0.5:80";
    let e = parse_service_file(FileFormat::Yaml, half).unwrap_err();
    assert!(e.to_string().contains("not valid YAML"), "{e}");
    assert!(parse_service_file(FileFormat::Yaml, "").is_err());
    assert!(parse_service_file(FileFormat::Yaml, "- a\n- b\n").is_err());
    let e = parse_service_file(FileFormat::Yaml, "hosts: [a.example.com]\nport: 3\n").unwrap_err();
    let paths: Vec<&str> = e.0.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["name", "port"], "{e}");
    assert_eq!(
        service_file_format(Path::new("/d/a.yml")),
        Some(FileFormat::Yaml)
    );
    assert_eq!(
        service_file_format(Path::new("/d/a.toml")),
        Some(FileFormat::Toml)
    );
    assert_eq!(service_file_format(Path::new("/d/a.yml.tmp")), None);
    assert_eq!(service_file_format(Path::new("/d/.12345")), None);
}
