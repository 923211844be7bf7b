#!/usr/bin/env python3
"""A 3|2 partition of real balancers, and its heal: never two acting scalers.

Five `gearlb run` processes, each in a network namespace of its own joined to one
bridge (10.77.0.0/24), gossip on their proxy ports as in gears. Every 100 ms each
balancer's `peers` reply says whether it acts as the scaler (`scaler.acting`); the logs
say it again (`acting_overlap` of bench/cluster_logs.py, a stand-down after a stall
ending at its lease).

Trials: the network is cut 3|2 (blackhole routes in every namespace towards the other
side) with the acting scaler on the minority side, held, healed; then again with the
acting scaler on the majority side. What must hold: at most one acting at every
sample and in the logs; during the cut the majority side has an acting scaler and the
minority none; after the heal, exactly one.

    sudo python3 bench/partition.py --bin target/release/gearlb [--hold 20] [--json F]
    sudo python3 bench/partition.py --smoke --bin target/debug/gearlb   # ~30 s, checked

Needs root (namespaces, a bridge, veth pairs); everything it creates is removed at the
end, and a previous run's leftovers at the start. Exits non-zero when what it reads
cannot be read (a field of the `peers` reply; with --smoke also the log lines, checked
against the replies). CI runs --smoke (tests/bench_smoke.rs).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster as c  # noqa: E402
from cluster_logs import acting_overlap  # noqa: E402

BRIDGE = "glbpart0"
M = 5


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def ns_name(i):
    return f"glbpart{i}"


def addr(i):
    return f"10.77.0.{i + 1}"


def teardown():
    for i in range(M):
        sh("ip", "link", "del", f"glbpv{i}", check=False)
        sh("ip", "netns", "del", ns_name(i), check=False)
    sh("ip", "link", "del", BRIDGE, check=False)


def setup():
    teardown()
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "link", "set", BRIDGE, "up")
    for i in range(M):
        ns = ns_name(i)
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"glbpv{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", f"glbpv{i}", "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr(i)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def cut(side_a, side_b):
    for a in side_a:
        for b in side_b:
            sh("ip", "-n", ns_name(a), "route", "add", "blackhole", f"{addr(b)}/32")
            sh("ip", "-n", ns_name(b), "route", "add", "blackhole", f"{addr(a)}/32")


def heal(side_a, side_b):
    for a in side_a:
        for b in side_b:
            sh("ip", "-n", ns_name(a), "route", "del", "blackhole", f"{addr(b)}/32", check=False)
            sh("ip", "-n", ns_name(b), "route", "del", "blackhole", f"{addr(a)}/32", check=False)


class Sampler(threading.Thread):
    """Every 100 ms: which balancers act (from their `peers` replies)."""

    def __init__(self, lbs):
        super().__init__(daemon=True)
        self.lbs = lbs
        self.samples = []  # (time, [indices acting])
        self.error = None
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            t = time.time()
            acting = []
            for i, lb in enumerate(self.lbs):
                try:
                    if lb.acting(timeout=5):
                        acting.append(i)
                except (OSError, RuntimeError):  # busy past the timeout: not known
                    pass
                except c.Unreadable as e:
                    self.error = e
                    return
            self.samples.append((t, acting))
            self.stop.wait(max(0.0, 0.1 - (time.time() - t)))

    def between(self, t0, t1):
        return [a for t, a in self.samples if t0 <= t <= t1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/gearlb")
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=15.0)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="holds of 3 s, checked")
    args = ap.parse_args()
    if args.smoke:
        args.hold, args.settle = 3.0, 4.0
    if os.geteuid() != 0:
        sys.exit("needs root: network namespaces")
    # What Balancer reads from the arguments of bench/cluster.py.
    args.coverage = 100
    args.gossip = "200ms"
    rng = random.Random(7)
    ids = sorted(c.hexid(rng) for _ in range(M))
    root = tempfile.mkdtemp(prefix="gearlb-partition-")
    setup()
    lbs = []
    result = {"bin": args.bin, "m": M, "hold_s": args.hold, "trials": []}
    problems = []
    sampler = None
    try:
        for i, node_id in enumerate(ids):
            lbs.append(c.Balancer(root, i, node_id, args, host=addr(i), wrap=("ip", "netns", "exec", ns_name(i))))
        for lb in lbs:
            lb.wait_serving()
        peers = " ".join(f"'{lb.id}'='{lb.id}|{lb.gossip}'" for lb in lbs)
        for lb in lbs:
            r, _ = c.request(lb.sock, {"cmd": "update-cluster", "args": ["g0-ns.example.com|10.77.0.200:8080"]})
            assert r["exit_code"] == 0, r["message"]
            r, _ = c.request(lb.sock, {"cmd": "set-peers", "args": [peers]})
            assert r["exit_code"] == 0, r["message"]
        peers_known = time.time()
        t0 = time.time()
        while not all(len(lb.live()) == M for lb in lbs):
            if time.time() - t0 > 60:
                raise RuntimeError("did not converge")
            time.sleep(0.2)
        print(f"M={M}: converged in {time.time() - t0:.1f}s", flush=True)
        sampler = Sampler(lbs)
        sampler.start()
        for trial, scaler_side in enumerate(["minority", "majority"]):
            end = time.time() + 20
            acting = []
            while time.time() < end:
                acting = [i for i, lb in enumerate(lbs) if lb.acting()]
                if len(acting) == 1:
                    break
                time.sleep(0.2)
            if len(acting) != 1:
                raise RuntimeError(f"trial {trial}: {len(acting)} acting before the cut")
            s = acting[0]
            others = [i for i in range(M) if i != s]
            if scaler_side == "minority":
                small, big = [s, others[0]], others[1:]
            else:
                small, big = others[:2], [s] + others[2:]
            t_cut = time.time()
            cut(small, big)
            time.sleep(args.hold)
            t_heal = time.time()
            heal(small, big)
            time.sleep(args.settle)
            t_end = time.time()
            during = sampler.between(t_cut, t_heal)
            late = sampler.between(t_heal - args.hold / 2, t_heal)
            after = sampler.between(t_end - 3, t_end)
            most = max((len(a) for a in sampler.between(t_cut, t_end)), default=0)
            trial_result = {
                "scaler_side": scaler_side,
                "scaler": s,
                "minority": small,
                "majority": big,
                "samples": len(sampler.between(t_cut, t_end)),
                "most_acting_sampled": most,
                "majority_acting_late_in_cut": all(len(a) == 1 and a[0] in big for a in late) if late else False,
                "minority_ever_acting_late_in_cut": any(i in small for a in late for i in a),
                "one_acting_after_heal": all(len(a) == 1 for a in after) if after else False,
                "samples_without_scaler_during_cut": sum(1 for a in during if not a),
            }
            result["trials"].append(trial_result)
            print(f"  trial {trial + 1} (scaler on the {scaler_side} side): {json.dumps(trial_result)}", flush=True)
        if sampler.error is not None:
            raise sampler.error
        most, overlap_s, intervals, logged = acting_overlap(lbs, peers_known, time.time())
        sampled = {ids[i] for _, a in sampler.samples for i in a}
        if sampled - logged:
            problems.append("balancers acted (peers: scaler.acting) but their logs show no acting "
                            "interval: the log lines bench/cluster_logs.py reads have changed")
        if not sampler.samples:
            problems.append("no sample of the peers replies")
        result["logs_most_acting"] = most
        result["logs_overlap_s"] = overlap_s
        result["logs_intervals"] = intervals
        print(f"  from the logs: {intervals} acting intervals, most at once {most}, {overlap_s:.3f}s with two or more", flush=True)
    finally:
        if sampler is not None:
            sampler.stop.set()
        c.stop_all(lbs, root)
        teardown()
    result["problems"] = problems
    c.write_json(args.json, result)
    for p in problems:
        print(f"partition.py: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
