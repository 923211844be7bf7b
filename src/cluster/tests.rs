//! The cluster end to end in one process: membership over chitchat's channel transport
//! and over the authenticated TCP and UDP transports, and keys at scale.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::GossipWire;
use crate::gear::PeerSpec;
use chitchat::{spawn_chitchat, ChitchatId};
use transport::{Auth, GossipStats, GossipTransport};

/// Three balancers' clusters on `transports`, at `addrs`, knowing each other.
async fn start_three(
    transports: [&dyn chitchat::transport::Transport; 3],
    addrs: [SocketAddr; 3],
    interval: Duration,
) -> Vec<(Arc<Cluster>, CancellationToken)> {
    let known: Vec<PeerSpec> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| PeerSpec {
            id: Some(format!("lb{i}")),
            addr: (*a).into(),
            learned: false,
        })
        .collect();
    let mut out = Vec::new();
    for (i, t) in transports.into_iter().enumerate() {
        let settings = NodeSettings {
            self_id: format!("lb{i}"),
            cluster_id: "app".into(),
            gossip_interval: interval,
            advertise: addrs[i],
            listen: addrs[i],
            generation: 1,
            name: None,
        };
        let c = Cluster::start_on(t, settings, known.clone(), Arc::default(), None)
            .await
            .unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(c.clone().run(stop.clone()));
        out.push((c, stop));
    }
    out
}

/// All live within 3 s; one that crashes (no goodbye) dropped by the others within
/// the failure timeout and a round or two.
async fn membership_contract(nodes: Vec<(Arc<Cluster>, CancellationToken)>, interval: Duration) {
    let t = tokio::time::Instant::now();
    while t.elapsed() < Duration::from_secs(3)
        && !nodes.iter().all(|(c, _)| c.view().live.len() == 3)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (c, _) in &nodes {
        assert_eq!(c.view().live.len(), 3, "not all live within 3 s");
    }
    let (dead, stop) = &nodes[2];
    dead.handle.abort();
    stop.cancel();
    let t = tokio::time::Instant::now();
    while t.elapsed() < Duration::from_secs(8)
        && !nodes[..2].iter().all(|(c, _)| c.view().live.len() == 2)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = t.elapsed();
    // The timeout, plus slack for a busy CI host running tests side by side.
    let limit = failure_timeout(interval) + Duration::from_millis(1500);
    assert!(took < limit, "dead peer noticed after {took:?}");
    assert!(
        took + interval >= failure_timeout(interval) / 2,
        "noticed after {took:?}: too soon"
    );
    for (_, stop) in &nodes {
        stop.cancel();
    }
}

#[tokio::test]
async fn membership_over_chitchats_channel_transport() {
    let transport = chitchat::transport::ChannelTransport::with_mtu(65_507);
    let addrs: [SocketAddr; 3] = [
        "127.0.0.1:17001".parse().unwrap(),
        "127.0.0.1:17002".parse().unwrap(),
        "127.0.0.1:17003".parse().unwrap(),
    ];
    let interval = Duration::from_millis(200);
    let nodes = start_three([&transport, &transport, &transport], addrs, interval).await;
    membership_contract(nodes, interval).await;
}

async fn authenticated(carrier: transport::Carrier) -> Vec<GossipTransport> {
    authenticated_with(carrier, [GossipWire::Both; 3]).await
}

async fn authenticated_with(
    carrier: transport::Carrier,
    wires: [GossipWire; 3],
) -> Vec<GossipTransport> {
    let mut ts = Vec::new();
    for wire in wires {
        let t = GossipTransport::bind(
            carrier,
            wire,
            "127.0.0.1:0".parse().unwrap(),
            None,
            Auth::new("app", b"secret-0123456789abcdef"),
            Arc::new(GossipStats::default()),
        )
        .await
        .unwrap();
        ts.push(t);
    }
    ts
}

#[tokio::test]
async fn membership_over_the_authenticated_tcp_transport() {
    let ts = authenticated(transport::Carrier::Tcp).await;
    let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
    let interval = Duration::from_millis(200);
    let nodes = start_three([&ts[0], &ts[1], &ts[2]], addrs, interval).await;
    membership_contract(nodes, interval).await;
}

#[tokio::test]
async fn membership_over_authenticated_udp() {
    let ts = authenticated(transport::Carrier::Udp).await;
    let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
    let interval = Duration::from_millis(200);
    let nodes = start_three([&ts[0], &ts[1], &ts[2]], addrs, interval).await;
    membership_contract(nodes, interval).await;
}

/// A rolling upgrade: a balancer of the release before (wire v1 only) and two of this
/// one (both formats) form one cluster over connections; the two new ones speak v2
/// between them, and v1 only with the old one.
#[tokio::test]
async fn a_v1_balancer_and_v2_balancers_gossip_together_over_tcp() {
    rolling(transport::Carrier::Tcp).await;
}

#[tokio::test]
async fn a_v1_balancer_and_v2_balancers_gossip_together_over_udp() {
    rolling(transport::Carrier::Udp).await;
}

async fn rolling(carrier: transport::Carrier) {
    let wires = [GossipWire::V1, GossipWire::Both, GossipWire::Both];
    let ts = authenticated_with(carrier, wires).await;
    let stats: Vec<_> = ts.iter().map(|t| t.stats()).collect();
    let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
    let interval = Duration::from_millis(200);
    let nodes = start_three([&ts[0], &ts[1], &ts[2]], addrs, interval).await;
    membership_contract(nodes, interval).await;
    let (old, new) = (stats[0].read(), stats[1].read());
    assert!(old.frames_received > 0 && old.frames_received == old.frames_received_v1);
    assert!(new.frames_received_v1 > 0, "the new one hears the old one");
    assert!(
        new.frames_received > new.frames_received_v1,
        "and v2 from the other new one"
    );
}

/// Balancers that speak only v2 gossip with v2 alone.
#[tokio::test]
async fn v2_only_balancers_never_send_v1() {
    let ts = authenticated_with(transport::Carrier::Tcp, [GossipWire::V2; 3]).await;
    let stats: Vec<_> = ts.iter().map(|t| t.stats()).collect();
    let addrs = [ts[0].local_addr(), ts[1].local_addr(), ts[2].local_addr()];
    let interval = Duration::from_millis(200);
    let nodes = start_three([&ts[0], &ts[1], &ts[2]], addrs, interval).await;
    membership_contract(nodes, interval).await;
    for s in stats {
        let s = s.read();
        assert!(s.frames_received > 0);
        assert_eq!(s.frames_received_v1, 0);
    }
}

/// The payload cliff: ten thousand gears down, with the platform's real name
/// lengths, are published in bounded values, and keys written after them still
/// reach a peer over chitchat's own transport with its 65 507-byte message limit.
#[tokio::test]
async fn ten_thousand_gears_down_and_a_later_key_propagate() {
    let transport = chitchat::transport::ChannelTransport::with_mtu(65_507);
    let addrs: [SocketAddr; 2] = [
        "127.0.0.1:17101".parse().unwrap(),
        "127.0.0.1:17102".parse().unwrap(),
    ];
    let mut handles = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let id = ChitchatId::new(format!("lb{i}"), 1, *addr);
        let seeds = vec![addrs[1 - i].to_string()];
        let cfg = chitchat_config(id, "app", Duration::from_millis(50), *addr, seeds);
        handles.push(
            spawn_chitchat(cfg, vec![("ready".into(), "1".into())], &transport)
                .await
                .unwrap(),
        );
    }
    let labels: Vec<String> = (0..10_000)
        .map(|i| {
            format!(
                "{:032x}-abcdefghijklmnop",
                (i as u128) * 0x9e37_79b9_7f4a_7c15
            )
        })
        .collect();
    let buckets = keys::down_buckets(labels.iter().map(String::as_str));
    handles[0]
        .with_chitchat(|c| {
            let me = c.self_node_state();
            me.set(keys::SUBSET_EPOCH, "e");
            for (k, v) in &buckets {
                me.set(k, v);
            }
            me.set("ack:later", "after the big ones");
        })
        .await;
    let sender = handles[0].chitchat_id().clone();
    let t = tokio::time::Instant::now();
    let report = loop {
        let got = handles[1]
            .with_chitchat(|c| {
                let ns = c.node_state(&sender)?;
                ns.get("ack:later")?;
                keys::HealthReport::from_keys(ns.key_values())
            })
            .await;
        if let Some(r) = got {
            break r;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "keys did not propagate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(report.down.len(), 10_000);
}
