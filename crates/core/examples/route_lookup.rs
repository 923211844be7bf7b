//! How long a route lookup takes with 1, 100 and 10 000 services (`routing::routes`):
//! the lookup must not grow with the number of routes.
//!
//! `cargo run --release -p gearlb-core --example route_lookup`

use std::hint::black_box;
use std::time::Instant;

use gearlb_core::routing::routes::{HostPattern, RouteSpec, RouteTable};

fn table(services: usize) -> RouteTable {
    let mut specs: Vec<RouteSpec> = (0..services)
        .map(|i| RouteSpec {
            service: format!("s{i}"),
            hosts: vec![HostPattern::parse(&format!("app{i}.example.com")).expect("host")],
            paths: vec!["/".into(), "/api".into(), "/api/v2".into()],
        })
        .collect();
    specs.push(RouteSpec {
        service: "wild".into(),
        hosts: vec![HostPattern::parse("*.apps.example.com").expect("host")],
        paths: vec![],
    });
    RouteTable::new(&specs).expect("no conflicts")
}

fn main() {
    const LOOKUPS: usize = 2_000_000;
    for services in [1usize, 100, 10_000] {
        let t = table(services);
        let hosts: Vec<String> = (0..1024)
            .map(|i| match i % 4 {
                0 => format!("app{}.example.com:8080", i % services),
                1 => format!("APP{}.example.com", (i * 7) % services),
                2 => format!("x{i}.apps.example.com"),
                _ => format!("nothing{i}.example.org"),
            })
            .collect();
        let paths = [
            "/api/v2/items?page=3",
            "/",
            "/api/users/17",
            "/static/app.js",
        ];
        let start = Instant::now();
        let mut found = 0usize;
        for i in 0..LOOKUPS {
            let h = &hosts[i % hosts.len()];
            let p = paths[i % paths.len()];
            found += usize::from(black_box(t.lookup(h, p)).is_some());
        }
        let ns = start.elapsed().as_nanos() as f64 / LOOKUPS as f64;
        println!(
            "{services:>6} services ({:>6} routes): {ns:6.1} ns per lookup ({:.0}% found)",
            t.len(),
            100.0 * found as f64 / LOOKUPS as f64
        );
    }
}
