//! The settings a reload does not change: they take effect when the balancer restarts.
//! Each is listed once, in [`RESTART_ONLY`], with how to tell it changed and how to keep
//! the running value; [`keep_restart_only`] applies the list.

use super::schema::Config;

/// A setting that only a restart changes.
pub struct RestartOnly {
    /// How the operator is told about it (`"listen"`, `"state.dir"`).
    pub name: &'static str,
    changed: fn(&Config, &Config) -> bool,
    keep: fn(&mut Config, &Config),
}

/// Every restart-only setting.
pub const RESTART_ONLY: &[RestartOnly] = &[
    RestartOnly {
        name: "listen",
        changed: |a, b| a.listen != b.listen,
        keep: |new, old| new.listen = old.listen.clone(),
    },
    RestartOnly {
        name: "control (socket, stats_socket)",
        changed: |a, b| a.control != b.control,
        keep: |new, old| new.control = old.control.clone(),
    },
    RestartOnly {
        name: "state.dir",
        changed: |a, b| a.state != b.state,
        keep: |new, old| new.state = old.state.clone(),
    },
    RestartOnly {
        name: "runtime.threads",
        changed: |a, b| a.runtime != b.runtime,
        keep: |new, old| new.runtime = old.runtime.clone(),
    },
    // The whole section is kept: the rest of it (the peers) is read at start only.
    RestartOnly {
        name: "cluster (listen, advertise, node_id, id, secret, transport, gossip_interval, gossip_wire)",
        changed: |a, b| {
            let (a, b) = (&a.cluster, &b.cluster);
            a.listen != b.listen
                || a.advertise != b.advertise
                || a.node_id != b.node_id
                || a.id != b.id
                || a.secret != b.secret
                || a.transport != b.transport
                || a.gossip_interval != b.gossip_interval
                || a.gossip_wire != b.gossip_wire
        },
        keep: |new, old| new.cluster = old.cluster.clone(),
    },
    RestartOnly {
        name: "limits.max_connections",
        changed: |a, b| a.limits.max_connections != b.limits.max_connections,
        keep: |new, old| new.limits.max_connections = old.limits.max_connections,
    },
    // The watcher and the etcd follower start with the balancer.
    RestartOnly {
        name: "discovery (dir, etcd, etcd_prefix)",
        changed: |a, b| {
            let (a, b) = (&a.discovery, &b.discovery);
            a.dir != b.dir || a.etcd != b.etcd || a.etcd_prefix != b.etcd_prefix
        },
        keep: |new, old| {
            new.discovery.dir = old.discovery.dir.clone();
            new.discovery.etcd = old.discovery.etcd.clone();
            new.discovery.etcd_prefix = old.discovery.etcd_prefix.clone();
        },
    },
    // A router's consumer, its reconciliation and its keep-seen task start with it.
    RestartOnly {
        name: "routing_spi",
        changed: |a, b| a.routing_spi != b.routing_spi,
        keep: |new, old| new.routing_spi = old.routing_spi.clone(),
    },
    // The idler's keep-seen task is started (or not) with the balancer.
    RestartOnly {
        name: "idler",
        changed: |a, b| a.idler != b.idler,
        keep: |new, old| new.idler = old.idler.clone(),
    },
    RestartOnly {
        name: "limits.max_idle_per_backend",
        changed: |a, b| a.limits.max_idle_per_backend != b.limits.max_idle_per_backend,
        keep: |new, old| new.limits.max_idle_per_backend = old.limits.max_idle_per_backend,
    },
];

/// Keep in `new` the `running` value of every restart-only setting; the names of those
/// whose value differed, in [`RESTART_ONLY`]'s order.
pub fn keep_restart_only(new: &mut Config, running: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    for setting in RESTART_ONLY {
        if (setting.changed)(running, new) {
            changed.push(setting.name);
        }
        (setting.keep)(new, running);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_settings_are_reported_and_kept() {
        let running = Config::default();
        let mut new = Config::default();
        new.listen.proxy = "127.0.0.1:9999".parse().unwrap();
        new.limits.max_connections += 1;
        new.cluster.peers = vec!["10.0.0.9:80".parse().unwrap()];
        new.timeouts.connect *= 2;
        let changed = keep_restart_only(&mut new, &running);
        assert_eq!(changed, vec!["listen", "limits.max_connections"]);
        assert_eq!(new.listen, running.listen);
        assert_eq!(new.limits.max_connections, running.limits.max_connections);
        // The peers are not a restart-only change, yet the running section is kept.
        assert_eq!(new.cluster.peers, running.cluster.peers);
        // Anything else is the new value.
        assert_eq!(new.timeouts.connect, running.timeouts.connect * 2);
    }

    #[test]
    fn nothing_changed_nothing_reported() {
        let running = Config::default();
        let mut new = Config::default();
        assert!(keep_restart_only(&mut new, &running).is_empty());
    }
}
