//! The router tier: `gearlb` with `[routing_spi]` in front of applications' load-balancer
//! gears, fed by origin-server's own routing plugin through Debian's ActiveMQ, both
//! started here (`support::activemq`; without the origin-server mirror the plugin's YAML
//! bytes are published directly, and the test says so). Backends are small web servers
//! on 127.0.0.1 standing in for the load-balancer gears' public ports.
//!
//! Restarts, crashes, the broker's restart and peers are in `tests/router_faults.rs`.

mod support;

use std::time::{Duration, Instant};

use support::router::*;
use support::*;

/// Created, two load-balancer endpoints, an alias: the HA name and the alias are routed
/// to both gears within a second of the event; a name nobody has is 404; the
/// application keeps every behaviour of a service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_is_routed_by_its_ha_name_and_alias_to_both_gears_within_a_second() {
    let g1 = TestBackend::start("g1").await;
    let g2 = TestBackend::start("g2").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, ""));
    src.send(create("myapp"));
    src.send(endpoint("myapp", "5a1e00000000000000000001", g1.addr));
    src.send(endpoint("myapp", "5a1e00000000000000000002", g2.addr));
    let took = until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(1));
    assert!(
        took.is_some(),
        "HA name not routed within 1 s: {}",
        r.log_text()
    );
    src.send(alias("myapp", "www.example.org"));
    let took = until_status(r.proxy, "www.example.org", 200, Duration::from_secs(1));
    assert!(
        took.is_some(),
        "alias not routed within 1 s: {}",
        r.log_text()
    );
    for _ in 0..40 {
        assert_eq!(status_of(r.proxy, &ha("myapp")), 200);
    }
    assert!(
        g1.requests() > 0 && g2.requests() > 0,
        "both gears take requests: {} {}",
        g1.requests(),
        g2.requests()
    );
    assert_eq!(status_of(r.proxy, "nobody.example.com"), 404);
    // A service like any: its report, its health, its origin.
    let (code, out, _) = r.ctl(&["services", "--json"]);
    assert_eq!(code, 0);
    let services: serde_json::Value = serde_json::from_str(&out).unwrap();
    let text = services.to_string();
    assert!(
        text.contains("myapp-ns1") && text.contains("www.example.org"),
        "{text}"
    );
    let health = get(r.status, "/health/myapp-ns1", &[]).await.unwrap();
    assert_eq!(health.status, 200);
    assert_eq!(get(r.status, "/health", &[]).await.unwrap().status, 200);
    let report = spi(&r);
    assert_eq!(report["events"]["applied"], 4, "{report}");
    assert_eq!(report["table"]["routed"], 1, "{report}");
    let status = r.status_json();
    assert!(
        status["services"]
            .to_string()
            .contains("routing SPI /topic/routinginfo"),
        "{status}"
    );
    assert!(
        status["routing_spi"]["healthy"].as_bool().unwrap(),
        "{status}"
    );
    // Metrics: the router's, and the application's backends under its service.
    let metrics = get(r.status, "/metrics", &[]).await.unwrap().text();
    for want in [
        "gearlb_routing_spi_connected 1",
        "gearlb_routing_spi_events_total{outcome=\"applied\"} 4",
        "gearlb_routing_spi_applications{state=\"routed\"} 1",
        "service=\"myapp-ns1\"",
    ] {
        assert!(metrics.contains(want), "{want} not in:\n{metrics}");
    }
    // And the CSV has the application as a proxy of its own.
    let csv = get(r.status, "/gearlb-status;csv", &[])
        .await
        .unwrap()
        .text();
    assert!(
        csv.lines().any(|l| l.starts_with("myapp-ns1,BACKEND,")),
        "{csv}"
    );
    eprintln!(
        "events published by origin-server's plugin: {}",
        src.real_plugin()
    );
}

/// `add_ssl` with a key encrypted the old OpenSSL way (DES-EDE3-CBC) and its pass
/// phrase: the alias gets its own certificate by SNI, the HA name keeps the platform's
/// wildcard; `remove_ssl` gives the alias the wildcard back. No restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_certificate_with_an_encrypted_key_is_served_by_sni() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", true, ""));
    let https = tls_addr(&r);
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    src.send(alias("myapp", "www.example.org"));
    src.send(ssl(
        "myapp",
        "www.example.org",
        &fixture_text("rsa.crt"),
        &fixture_text("rsa.des3.key"),
        Some("gearlb-test"),
    ));
    let (wildcard, own) = (der_of("wildcard.crt"), der_of("rsa.crt"));
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = sni(https, "www.example.org").await;
    while got.0 != own && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
        got = sni(https, "www.example.org").await;
    }
    assert!(
        got.0 == own,
        "the alias's own certificate: {}",
        r.log_text()
    );
    assert_eq!(got.1, 200, "the alias is routed over HTTPS");
    let (leaf, status) = sni(https, &ha("myapp")).await;
    assert!(leaf == wildcard, "the HA name keeps the wildcard");
    assert_eq!(status, 200);
    assert_eq!(spi(&r)["table"]["certificates"], 1);
    // The gear hears it came over HTTPS.
    src.send(unssl("myapp", "www.example.org"));
    let end = Instant::now() + Duration::from_secs(10);
    while sni(https, "www.example.org").await.0 != wildcard && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (leaf, status) = sni(https, "www.example.org").await;
    assert!(
        leaf == wildcard,
        "after remove_ssl the alias gets the default certificate"
    );
    assert_eq!(status, 200, "and is still routed");
}

/// Removing an endpoint, and a gear that moves (its new address, then its old one
/// removed), under a steady load: not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_removed_and_gears_moved_under_load_fail_no_request() {
    let g1 = TestBackend::start("g1").await;
    let g2 = TestBackend::start("g2").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, ""));
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    src.send(endpoint("myapp", "g2", g2.addr));
    assert!(until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(10)).is_some());
    let load = Load::start(r.proxy, &ha("myapp"), 200_000, Duration::from_secs(60));
    load.wait_ok(200, Duration::from_secs(20));
    src.send(unendpoint("myapp", "g1", g1.addr));
    load.wait_ok(300, Duration::from_secs(20));
    // g2 moves to another node: same port, another address.
    let moved = TestBackend::start_on(
        "g2-moved",
        format!("127.0.0.2:{}", g2.addr.port()).parse().unwrap(),
    )
    .await;
    src.send(endpoint("myapp", "g2", moved.addr));
    load.wait_ok(300, Duration::from_secs(20));
    src.send(unendpoint("myapp", "g2", g2.addr));
    load.wait_ok(300, Duration::from_secs(20));
    let (ok, failed, why) = load.finish();
    assert_eq!(
        failed,
        0,
        "{failed} of {} requests failed: {why:?}",
        ok + failed
    );
    assert!(ok >= 1100, "the load ran: {ok}");
    let before = moved.requests();
    for _ in 0..20 {
        assert_eq!(status_of(r.proxy, &ha("myapp")), 200);
    }
    assert_eq!(moved.requests(), before + 20, "only the moved gear is left");
}

/// `delete_application`: its names are not routed any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_application_is_404() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, ""));
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    src.send(alias("myapp", "www.example.org"));
    assert!(until_status(r.proxy, "www.example.org", 200, Duration::from_secs(10)).is_some());
    src.send(delete("myapp"));
    assert!(until_status(r.proxy, &ha("myapp"), 404, Duration::from_secs(5)).is_some());
    assert_eq!(status_of(r.proxy, "www.example.org"), 404);
    assert_eq!(
        get(r.status, "/health/myapp-ns1", &[])
            .await
            .unwrap()
            .status,
        404
    );
    assert_eq!(spi(&r)["table"]["applications"], 0);
}

/// A malformed body and a certificate that cannot be served (a wrong pass phrase, a
/// DSA key) are acknowledged, logged and reported with their reasons, and the events
/// behind them are applied. An action that is not a routing change is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_are_acknowledged_reported_and_do_not_block_the_next() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", true, ""));
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    src.send(alias("myapp", "www.example.org"));
    src.raw("---\n:action: [this is not\n  yaml at all");
    src.send(ssl(
        "myapp",
        "www.example.org",
        &fixture_text("rsa.crt"),
        &fixture_text("rsa.des3.key"),
        Some("not-the-pass-phrase"),
    ));
    src.send(ssl(
        "myapp",
        "www.example.org",
        &fixture_text("dsa.crt"),
        &fixture_text("dsa.key"),
        None,
    ));
    src.raw("---\n:action: :add_gear\n:app_name: myapp\n:namespace: ns1\n:deprecated: true\n");
    src.raw("---\n:action: :add_gear\n:app_name: myapp\n:namespace: ns1\n:deprecated: true\n");
    src.send(alias("myapp", "after.example.org"));
    assert!(
        until_status(r.proxy, "after.example.org", 200, Duration::from_secs(10)).is_some(),
        "the event behind the bad ones is applied: {}",
        r.log_text()
    );
    // The plugin does not keep events in order: wait for all nine.
    wait_taken(&r, 9);
    let report = spi(&r);
    assert_eq!(report["events"]["failed"], 3, "{report}");
    assert_eq!(report["events"]["ignored"], 2, "{report}");
    let failures = report["failures"].to_string();
    assert!(failures.contains("not YAML"), "{failures}");
    assert!(
        failures.contains("www.example.org") && failures.contains("pass phrase"),
        "{failures}"
    );
    assert!(failures.contains("DSA"), "{failures}");
    // The alias keeps the default certificate.
    let (leaf, _) = sni(tls_addr(&r), "www.example.org").await;
    assert!(leaf == der_of("wildcard.crt"));
    let log = r.log_text();
    assert_eq!(
        log.matches("not a routing change").count(),
        1,
        "logged once: {log}"
    );
    // Nothing was NACKed: the broker's dead-letter queue holds nothing.
    assert!(
        !src.broker.log().contains("ActiveMQ.DLQ"),
        "{}",
        src.broker.log()
    );
}

/// Events for an application not yet created create it; the creation that comes late
/// changes nothing that was routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_before_the_creation_create_the_application() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start(TOPIC);
    let dir = workdir();
    let r = router(dir.path(), &config(dir.path(), &src, "r1", false, ""));
    src.send(alias("late", "late.example.org"));
    src.send(endpoint("late", "g1", g1.addr));
    assert!(until_status(r.proxy, "late.example.org", 200, Duration::from_secs(10)).is_some());
    src.send(create("late"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(status_of(r.proxy, &ha("late")), 200);
    assert_eq!(status_of(r.proxy, "late.example.org"), 200);
}

/// A queue of the router's own (ActiveMQ's virtual topic): the plugin publishes to
/// `/topic/VirtualTopic.routinginfo`, the router reads
/// `/queue/Consumer.r1.VirtualTopic.routinginfo`; what comes while it is stopped waits
/// in its queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_on_a_virtual_topic_queue_loses_nothing_while_stopped() {
    let g1 = TestBackend::start("g1").await;
    let mut src = Source::start("/topic/VirtualTopic.routinginfo");
    let dir = workdir();
    let cfg = config(dir.path(), &src, "r1", false, "").replace(
        "destination = \"/topic/VirtualTopic.routinginfo\"",
        "destination = \"/queue/Consumer.r1.VirtualTopic.routinginfo\"",
    );
    let mut r = router(dir.path(), &cfg);
    src.send(create("myapp"));
    src.send(endpoint("myapp", "g1", g1.addr));
    assert!(until_status(r.proxy, &ha("myapp"), 200, Duration::from_secs(10)).is_some());
    r.signal("TERM");
    assert_eq!(r.wait(Duration::from_secs(30)), Some(0));
    src.send(alias("myapp", "while-down.example.org"));
    let r = router(dir.path(), &cfg);
    assert!(
        until_status(
            r.proxy,
            "while-down.example.org",
            200,
            Duration::from_secs(10)
        )
        .is_some(),
        "{}",
        r.log_text()
    );
    assert_eq!(
        spi(&r)["destination"],
        "/queue/Consumer.r1.VirtualTopic.routinginfo"
    );
}
