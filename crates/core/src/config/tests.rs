//! Unit tests of loading: defaults, the file, the environment and validation together,
//! through [`from_toml`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn empty_file_gives_defaults() {
    let c = from_toml("", &env(&[])).unwrap();
    assert_eq!(c, Config::default());
}

#[test]
fn full_file() {
    let c = from_toml(
        r#"
        [listen]
        proxy = "127.0.0.1:9080"
        status = "127.0.0.1:9081"
        [[backends]]
        name = "web1"
        addr = "127.0.0.1:9001"
        [[backends]]
        name = "web2"
        addr = "localhost:9002"
        [timeouts]
        connect = "2s"
        server = "1m 30s"
        [limits]
        max_connections = 50
        "#,
        &env(&[]),
    )
    .unwrap();
    assert_eq!(c.listen.proxy.port(), 9080);
    assert_eq!(c.backends.len(), 2);
    assert_eq!(c.backends[1].addr.to_string(), "localhost:9002");
    assert_eq!(c.timeouts.connect, Duration::from_secs(2));
    assert_eq!(c.timeouts.server, Duration::from_secs(90));
    assert_eq!(c.limits.max_connections, 50);
}

#[test]
fn every_problem_is_listed_with_its_path() {
    let err = from_toml(
        r#"
        bogus = 1
        [listen]
        proxy = "nowhere"
        [timeouts]
        connect = "ten seconds"
        client = [5]
        colour = "blue"
        [limits]
        max_header_size = 100
        [[backends]]
        name = "web 1"
        addr = "127.0.0.1:0"
        [[backends]]
        addr = "127.0.0.1:9002"
        "#,
        &env(&[]),
    )
    .unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "bogus",
        "listen.proxy",
        "timeouts.connect",
        "timeouts.client",
        "timeouts.colour",
        "limits.max_header_size",
        "backends[0].name",
        "backends[0].addr",
        "backends[1].name",
    ] {
        assert!(paths.contains(&want), "missing {want} in {paths:?}");
    }
}

#[test]
fn syntax_error_names_the_line() {
    let err = from_toml("[listen]\nproxy = \n", &env(&[])).unwrap_err();
    assert_eq!(err.0.len(), 1);
    assert!(err.0[0].path.starts_with("line "), "{:?}", err.0);
}

#[test]
fn env_overrides_file() {
    let c = from_toml(
        "[listen]\nproxy = \"127.0.0.1:1000\"\n",
        &env(&[
            ("OPENSHIFT_GEARLB_IP", "127.1.2.3"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
            ("OPENSHIFT_DATA_DIR", "/home/gear/app-root/data/"),
            ("OPENSHIFT_NAMESPACE", "ns"),
        ]),
    )
    .unwrap();
    assert_eq!(c.listen.proxy, "127.1.2.3:8080".parse().unwrap());
    assert_eq!(
        c.state.dir,
        PathBuf::from("/home/gear/app-root/data/gearlb")
    );
    assert_eq!(c.gear.namespace.as_deref(), Some("ns"));
}

#[test]
fn stats_socket_next_to_the_control_socket_unless_set() {
    let c = from_toml("", &env(&[])).unwrap();
    assert_eq!(c.control.stats_socket_path(), PathBuf::from("run/stats"));
    let c = from_toml("[control]\nsocket = \"/tmp/x/c.sock\"\n", &env(&[])).unwrap();
    assert_eq!(c.control.stats_socket_path(), PathBuf::from("/tmp/x/stats"));
    let c = from_toml("[control]\nstats_socket = \"/tmp/s\"\n", &env(&[])).unwrap();
    assert_eq!(c.control.stats_socket_path(), PathBuf::from("/tmp/s"));
    // Cartridge mode: both sockets in $OPENSHIFT_GEARLB_DIR/run.
    let c = from_toml(
        "[control]\nstats_socket = \"/tmp/s\"\n",
        &env(&[("OPENSHIFT_GEARLB_DIR", "/home/g/gearlb")]),
    )
    .unwrap();
    assert_eq!(
        c.control.stats_socket_path(),
        PathBuf::from("/home/g/gearlb/run/stats")
    );
    for (bad, why) in [
        ("stats_socket = \"\"", "must not be empty"),
        ("stats_socket = 5", "expected a string"),
        ("stats_socket = \"run/control.sock\"", "must differ"),
    ] {
        let err = from_toml(&format!("[control]\n{bad}\n"), &env(&[])).unwrap_err();
        assert!(
            err.0
                .iter()
                .any(|p| p.path == "control.stats_socket" && p.message.contains(why)),
            "{bad}: {:?}",
            err.0
        );
    }
    let long = format!("[control]\nstats_socket = \"/{}\"\n", "x".repeat(120));
    assert!(from_toml(&long, &env(&[])).is_err());
}

#[test]
fn health_env_names_and_aliases() {
    let c = from_toml(
        "",
        &env(&[
            ("OPENSHIFT_HAPROXY_HTTPCHK_URI", "/old"),
            ("HAPROXY_CARTRIDGE_HTTPCHK_EXPECT_RSTATUS", "200"),
        ]),
    )
    .unwrap();
    assert_eq!(
        (c.health.uri.as_str(), c.health.expect.as_str()),
        ("/old", "200")
    );
    let c = from_toml(
        "",
        &env(&[
            ("OPENSHIFT_GEARLB_HTTPCHK_URI", "/new"),
            ("OPENSHIFT_HAPROXY_HTTPCHK_URI", "/old"),
        ]),
    )
    .unwrap();
    assert_eq!(c.health.uri, "/new");
    let err = from_toml("[health]\nexpect = \"2..(\"\nuri = \"nope\"", &env(&[])).unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, vec!["health.uri", "health.expect"]);
}

#[test]
fn sealed_cookies_need_a_secret() {
    let err = from_toml("[sticky]\nseal = true", &env(&[])).unwrap_err();
    assert_eq!(err.0[0].path, "sticky.seal");
    let c = from_toml(
        "[sticky]\nseal = true",
        &env(&[("OPENSHIFT_SECRET_TOKEN", "0123456789abcdef0123")]),
    )
    .unwrap();
    assert!(c.sticky.seal);
    assert!(
        !format!("{c:?}").contains("0123456789abcdef"),
        "secret must not be printed"
    );
}

#[test]
fn bad_env_is_a_problem() {
    let err = from_toml(
        "",
        &env(&[
            ("OPENSHIFT_GEARLB_IP", "x"),
            ("OPENSHIFT_GEARLB_PORT", "8080"),
        ]),
    )
    .unwrap_err();
    assert_eq!(err.0[0].path, "env OPENSHIFT_GEARLB_IP");
    let err = from_toml("", &env(&[("OPENSHIFT_GEARLB_PORT", "8080")])).unwrap_err();
    assert!(err.0[0].message.contains("together"));
}

#[test]
fn gossip_wire_from_file_and_env() {
    use super::GossipWire;
    let c = from_toml("", &env(&[])).unwrap();
    assert_eq!(c.cluster.gossip_wire, GossipWire::Both);
    let c = from_toml("[cluster]\ngossip_wire = \"v2\"\n", &env(&[])).unwrap();
    assert_eq!(c.cluster.gossip_wire, GossipWire::V2);
    let c = from_toml(
        "[cluster]\ngossip_wire = \"v2\"\n",
        &env(&[("GEARLB_GOSSIP_WIRE", "v1\n")]),
    )
    .unwrap();
    assert_eq!(c.cluster.gossip_wire, GossipWire::V1, "the gear's env wins");
    let err = from_toml("[cluster]\ngossip_wire = \"v3\"\n", &env(&[])).unwrap_err();
    assert_eq!(err.0[0].path, "cluster.gossip_wire");
    assert!(
        err.0[0].message.contains("\"both\""),
        "{}",
        err.0[0].message
    );
    let err = from_toml("", &env(&[("GEARLB_GOSSIP_WIRE", "tls")])).unwrap_err();
    assert_eq!(err.0[0].path, "env GEARLB_GOSSIP_WIRE");
}

#[test]
fn forwarded_headers_list() {
    let d = from_toml("", &env(&[])).unwrap().proxy.forwarded_headers;
    assert!(d.x_forwarded_for && d.x_forwarded_proto);
    assert!(!d.x_forwarded_host && !d.x_forwarded_port && !d.forwarded);

    let c = from_toml(
        "[proxy]\nforwarded_headers = [\"Forwarded\", \"x-forwarded-port\"]\n",
        &env(&[]),
    )
    .unwrap();
    let f = c.proxy.forwarded_headers;
    assert!(f.forwarded && f.x_forwarded_port);
    assert!(!f.x_forwarded_for && !f.x_forwarded_proto && !f.x_forwarded_host);

    let c = from_toml("[proxy]\nforwarded_headers = []\n", &env(&[])).unwrap();
    assert_eq!(c.proxy.forwarded_headers, ForwardedHeaders::NONE);

    let err = from_toml(
        "[proxy]\nforwarded_headers = [\"x-forwarded-for\", \"x-real-ip\", 3]\n",
        &env(&[]),
    )
    .unwrap_err();
    assert_eq!(err.0.len(), 2);
    assert_eq!(err.0[0].path, "proxy.forwarded_headers");
    assert!(err.0[0].message.contains("\"x-real-ip\" is not one of"));
    assert!(err.0[1].message.contains("integer value is not one of"));

    let err = from_toml("[proxy]\nforwarded_headers = \"forwarded\"\n", &env(&[])).unwrap_err();
    assert!(err.0[0].message.contains("expected a list of header names"));
}

#[test]
fn dns_ttl_is_a_positive_duration() {
    let c = from_toml("", &env(&[])).unwrap();
    assert_eq!(
        c.proxy.dns_ttl,
        Duration::from_secs(10),
        "HAProxy's hold valid"
    );
    let c = from_toml("[proxy]\ndns_ttl = \"1m\"\n", &env(&[])).unwrap();
    assert_eq!(c.proxy.dns_ttl, Duration::from_secs(60));
    for bad in ["\"0s\"", "\"soon\"", "-10", "true"] {
        let err = from_toml(&format!("[proxy]\ndns_ttl = {bad}\n"), &env(&[])).unwrap_err();
        assert_eq!(err.0[0].path, "proxy.dns_ttl", "{bad}");
    }
}

#[test]
fn h2_max_concurrent_streams_bounds() {
    let c = from_toml("", &env(&[])).unwrap();
    assert_eq!(c.proxy.h2_max_concurrent_streams, 100, "HAProxy's default");
    let c = from_toml("[proxy]\nh2_max_concurrent_streams = 8\n", &env(&[])).unwrap();
    assert_eq!(c.proxy.h2_max_concurrent_streams, 8);
    for bad in ["0", "10001", "-1", "\"many\""] {
        let err = from_toml(
            &format!("[proxy]\nh2_max_concurrent_streams = {bad}\n"),
            &env(&[]),
        )
        .unwrap_err();
        assert_eq!(err.0[0].path, "proxy.h2_max_concurrent_streams", "{bad}");
    }
}

#[test]
fn connection_affinity_bounds() {
    assert_eq!(
        from_toml("", &env(&[])).unwrap().proxy.connection_affinity,
        16
    );
    let c = from_toml("[proxy]\nconnection_affinity = 0\n", &env(&[])).unwrap();
    assert_eq!(c.proxy.connection_affinity, 0);
    for bad in ["-1", "2000000", "\"lots\"", "1.5"] {
        let err = from_toml(
            &format!("[proxy]\nconnection_affinity = {bad}\n"),
            &env(&[]),
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 1, "{bad}: {err:?}");
        assert_eq!(err.0[0].path, "proxy.connection_affinity", "{bad}");
    }
}

#[test]
fn duplicate_backend_names() {
    let err = from_toml(
        "[[backends]]\nname=\"a\"\naddr=\"127.0.0.1:1\"\n[[backends]]\nname=\"a\"\naddr=\"127.0.0.1:2\"\n",
        &env(&[]),
    )
    .unwrap_err();
    assert_eq!(err.0[0].path, "backends[1].name");
    // Reported with the other problems, even when the first entry has one of its own.
    let err = from_toml(
        "[timeouts]\nconnect = \"soon\"\n[[backends]]\nname=\"a\"\naddr=\"nowhere\"\n\
         [[backends]]\nname=\"a\"\naddr=\"127.0.0.1:2\"\n",
        &env(&[]),
    )
    .unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|p| p.path.as_str()).collect();
    for want in ["timeouts.connect", "backends[0].addr", "backends[1].name"] {
        assert!(paths.contains(&want), "{want} not in {paths:?}");
    }
}

#[test]
fn fingerprint_tracks_the_list() {
    let a = vec![BackendConfig {
        send_proxy: None,
        name: "a".into(),
        addr: "127.0.0.1:1".parse().unwrap(),
    }];
    let mut b = a.clone();
    assert_eq!(backends_fingerprint(&a), backends_fingerprint(&b));
    b[0].addr = "127.0.0.1:2".parse().unwrap();
    assert_ne!(backends_fingerprint(&a), backends_fingerprint(&b));
}

#[test]
fn one_duration_rule_for_file_and_environment() {
    let c = from_toml(
        "[rotate]\ntimeout = \"500ms\"\n[timeouts]\nconnect = \"3\"\n",
        &env(&[]),
    )
    .unwrap();
    assert_eq!(c.rotate.timeout, Duration::from_millis(500));
    assert_eq!(c.timeouts.connect, Duration::from_secs(3));
    let c = from_toml("", &env(&[("OPENSHIFT_GEARLB_ROTATE_TIMEOUT", "500ms")])).unwrap();
    assert_eq!(c.rotate.timeout, Duration::from_millis(500));
    let c = from_toml("", &env(&[("OPENSHIFT_GEARLB_ROTATE_TIMEOUT", "3d")])).unwrap();
    assert_eq!(c.rotate.timeout, Duration::from_secs(3 * 86_400));
    for bad in ["0s", "8d", "soon"] {
        let file = from_toml(&format!("[rotate]\ntimeout = \"{bad}\"\n"), &env(&[])).unwrap_err();
        let var = from_toml("", &env(&[("OPENSHIFT_GEARLB_ROTATE_TIMEOUT", bad)])).unwrap_err();
        assert_eq!(file.0[0].path, "rotate.timeout");
        assert_eq!(var.0[0].path, "env OPENSHIFT_GEARLB_ROTATE_TIMEOUT");
        assert_eq!(file.0[0].message, var.0[0].message, "{bad}");
        assert_eq!(Err(file.0[0].message.clone()), parse_duration(bad));
    }
}

#[test]
fn tcp_mode_keys_and_their_mistakes() {
    let cfg = from_toml(
        "[listen]\nmode = \"tcp\"\n[tcp]\nbalance = \"source\"\nunknown_sni = \"close\"\n\
         check = \"connect\"\ninspect_timeout = \"2s\"\naccept_proxy = [\"10.0.0.0/8\", \"192.0.2.7\"]\n\
         [[backends]]\nname = \"a\"\naddr = \"127.0.0.1:1\"\nsend_proxy = \"v2\"\n",
        &env(&[]),
    )
    .unwrap();
    assert_eq!(cfg.listen.mode, Mode::Tcp);
    assert_eq!(cfg.tcp.balance, Balance::Source);
    assert_eq!(cfg.tcp.unknown_sni, UnknownSni::Close);
    assert_eq!(cfg.tcp.check, TcpCheck::Connect);
    assert_eq!(cfg.tcp.inspect_timeout, Duration::from_secs(2));
    assert!(cfg.tcp.accept_proxy[0].contains("10.9.8.7".parse().unwrap()));
    assert_eq!(
        cfg.backends[0].send_proxy,
        Some(crate::routing::SendProxy::V2)
    );

    // Every mistake named, nothing else changed.
    let err = from_toml(
        "[listen]\nmode = \"udp\"\ntls = \"127.0.0.1:8443\"\n[tcp]\nbalance = \"roundrobin\"\n\
         accept_proxy = [\"10.0.0.0/33\", 7]\ninspect_timeout = \"0s\"\n\
         [[backends]]\nname = \"a\"\naddr = \"127.0.0.1:1\"\nsend_proxy = \"v3\"\n",
        &env(&[]),
    )
    .unwrap_err();
    let paths: Vec<&str> = err.0.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "listen.mode",
        "tcp.balance",
        "tcp.accept_proxy",
        "tcp.inspect_timeout",
        "backends[0].send_proxy",
    ] {
        assert!(paths.contains(&want), "{want} not in {paths:?}");
    }
    // The HTTPS listener cannot sit in front of TLS backends.
    let err = from_toml(
        "[listen]\nmode = \"tcp\"\ntls = \"127.0.0.1:8443\"\n[tls]\ncert = \"c\"\nkey = \"k\"\n",
        &env(&[]),
    )
    .unwrap_err();
    assert!(err.0.iter().any(|p| p.path == "listen.tls"), "{err:?}");
    // A service without its own listener in another mode than listen.proxy's.
    let err = from_toml(
        "[[services]]\nname = \"db\"\nmode = \"tcp\"\nhosts = [\"db.example\"]\n\
         [[services.backends]]\nname = \"d\"\naddr = \"127.0.0.1:1\"\n",
        &env(&[]),
    )
    .unwrap_err();
    assert!(
        err.0.iter().any(|p| p.path == "services[0].mode"),
        "{err:?}"
    );
}

#[test]
fn ssl_to_gear_is_tcp_mode_only_in_a_gear_and_only_on_1() {
    let gear = |v: &str| {
        from_toml(
            "",
            &env(&[
                ("OPENSHIFT_GEARLB_IP", "127.0.0.1"),
                ("OPENSHIFT_GEARLB_PORT", "8080"),
                ("SSL_TO_GEAR", v),
            ]),
        )
        .unwrap()
    };
    assert_eq!(gear("1").listen.mode, Mode::Tcp);
    assert_eq!(gear("1\n").listen.mode, Mode::Tcp, "trimmed");
    assert_eq!(gear("1").tcp.check, TcpCheck::TlsHello);
    for other in ["0", "", "true", "yes", "2"] {
        assert_eq!(gear(other).listen.mode, Mode::Http, "{other:?}");
    }
    // Outside a gear it is not the platform's.
    let cfg = from_toml("", &env(&[("SSL_TO_GEAR", "1")])).unwrap();
    assert_eq!(cfg.listen.mode, Mode::Http);
}

#[test]
fn durations_may_be_whole_seconds_as_integers_and_mistakes_say_what_to_write() {
    let cfg = from_toml("[timeouts]\nserver = 30\n", &env(&[])).unwrap();
    assert_eq!(cfg.timeouts.server, Duration::from_secs(30));
    let err = from_toml(
        "[timeouts]\nserver = -1\nclient = true\nconnect = \"5x\"\n",
        &env(&[]),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("timeouts.server") && text.contains("negative"),
        "{text}"
    );
    assert!(
        text.contains("timeouts.client") && text.contains("expected a duration"),
        "{text}"
    );
    assert!(
        text.contains("timeouts.connect") && text.contains("units: ms, s, m, h, d"),
        "{text}"
    );
    assert!(
        !text.contains("months") && !text.contains("expected number at"),
        "{text}"
    );
}

#[test]
fn problems_name_the_file_and_a_syntax_error_its_column() {
    let dir = std::env::temp_dir().join(format!("gearlb-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gearlb.toml");
    std::fs::write(&file, "[timeouts]\nconnect = \"soon\"\n").unwrap();
    let err = load(Some(&file), &env(&[("OPENSHIFT_GEARLB_PORT", "x")])).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("{}: timeouts.connect", file.display())),
        "{text}"
    );
    assert!(
        text.contains("  env OPENSHIFT_GEARLB_"),
        "env problems keep their name: {text}"
    );
    std::fs::write(&file, "[timeouts]\nconnect = \n").unwrap();
    let err = load(Some(&file), &env(&[])).unwrap_err();
    assert!(err.0[0].path.ends_with("line 2, column 11"), "{:?}", err.0);
    std::fs::remove_dir_all(&dir).unwrap();
}
