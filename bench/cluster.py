#!/usr/bin/env python3
"""bench/cluster.py - M real gearlb processes on 127.0.0.1 coordinating N gears.

Usage:
    python3 bench/cluster.py [--bin target/release/gearlb] [--m 30] [--n 3000]
                             [--coverage 100] [--rounds 10] [--idle 30]
                             [--failover 0] [--json out.json]

Every balancer is a real `gearlb run` (one worker thread, health checks off so that
what is measured is coordination, gossip on the proxy port as in a gear, the default
200 ms interval). They learn each other through `set-peers` (32-hex node ids, as gear
uuids) and get the same N web gears through `update-cluster` (32-hex gear names, a
16-character namespace: the platform's real shapes). The harness talks to each control
socket directly (one JSON line per request), so no `gearlb ctl` process is timed.

Measured, in this order:
  convergence   time from the last set-peers until every balancer sees all M live;
  idle CPU      per balancer, % of one core, over --idle seconds of doing nothing
                (utime + stime from /proc), and RSS;
  rotate-out    --rounds rotate-outs of different gears from different balancers, each
                timed from the request to the reply (which comes once every live
                balancer acknowledged), then rotated back in; acks and failures counted;
                CPU per balancer over the rotation phase;
  false deaths  "peer balancer dead or left" log lines while no balancer was stopped;
  stalls        (--stop 5,30) for each duration: SIGSTOP the acting scaler for that long,
                SIGCONT, wait 10 s; whether another took over meanwhile;
  overlap       from every balancer's log, after set-peers and before the failovers: the
                intervals each one acted ("this balancer is now the scaler" to "stands
                down" / "stopped acting"; a stalled one's role ends when its lease lapsed,
                as its stand-down line says), the most acting at once and for how long
                two or more did;
  failover      (--failover K) K times: kill -9 the acting scaler and time until another
                one acts.

Not run in CI. Results go to stdout (and --json); bench/CLUSTER.md records them.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SECRET = "bench-cluster-secret-0123456789abcdef"
TICK = os.sysconf("SC_CLK_TCK")


def hexid(rng):
    return "".join(rng.choice("0123456789abcdef") for _ in range(32))


def request(sock_path, req, timeout=300.0):
    """One control request; returns (reply, progress lines)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    s.sendall((json.dumps(req) + "\n").encode())
    buf = b""
    progress = []
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            if "progress" in msg and "exit_code" not in msg:
                progress.append(msg["progress"])
            else:
                s.close()
                return msg, progress
    s.close()
    raise RuntimeError(f"{sock_path}: connection closed without a reply")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values, p):
    if not values:
        return None
    v = sorted(values)
    i = max(0, min(len(v) - 1, int((len(v) * p + 99) // 100) - 1))
    return v[i]


class Balancer:
    def __init__(self, root, i, node_id, args, host="127.0.0.1", wrap=()):
        self.dir = os.path.join(root, f"lb{i}")
        os.makedirs(self.dir)
        self.id = node_id
        self.sock = os.path.join(self.dir, "control.sock")
        self.log_path = os.path.join(self.dir, "log")
        conf = os.path.join(self.dir, "gearlb.toml")
        with open(conf, "w") as f:
            f.write(
                f"""[runtime]
threads = 1
[listen]
proxy = "{host}:0"
status = "127.0.0.1:0"
[control]
socket = "{self.sock}"
[state]
dir = "{self.dir}/data"
[health]
enabled = false
[subset]
coverage = {args.coverage}
[cluster]
node_id = "{node_id}"
id = "bench-app"
transport = "http"
secret = "{SECRET}"
gossip_interval = "{args.gossip}"
"""
            )
        env = dict(os.environ, GEARLB_LOG="warn,gearlb::app=info,gearlb::cluster=info,gearlb::scaler=info")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*wrap, args.bin, "run", "--config", conf],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.gossip = None

    def wait_serving(self, limit=30.0):
        end = time.time() + limit
        while time.time() < end:
            with open(self.log_path) as f:
                text = f.read()
            m = re.search(r"gearlb serving.*gossip=([0-9.:]+)", text)
            if m:
                self.gossip = m.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.id} exited:\n{text}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.id} did not start")

    def live(self):
        reply, _ = request(self.sock, {"cmd": "peers"}, timeout=30)
        return reply["data"]["live"]

    def status(self):
        reply, _ = request(self.sock, {"cmd": "status"}, timeout=30)
        return reply["data"]

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/gearlb")
    ap.add_argument("--m", type=int, default=30)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--coverage", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--failover", type=int, default=0)
    ap.add_argument("--stop", default="", help="SIGSTOP the acting scaler for these seconds, e.g. 5,30")
    ap.add_argument("--gossip", default="200ms")
    ap.add_argument("--rotate-timeout", default="20s")
    ap.add_argument("--converge-limit", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    ns = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(16))
    gears = [hexid(rng) for _ in range(args.n)]
    labels = [f"{g}-{ns}" for g in gears]
    entries = [f"{g}-{ns}.example.com|127.0.0.1:{10000 + i % 50000}" for i, g in enumerate(gears)]
    ids = sorted(hexid(rng) for _ in range(args.m))
    result = {
        "bin": args.bin,
        "m": args.m,
        "n": args.n,
        "coverage": args.coverage,
        "gossip": args.gossip,
        "nproc": os.cpu_count(),
        "loadavg_start": os.getloadavg()[0],
    }
    root = tempfile.mkdtemp(prefix="gearlb-cluster-")
    lbs = []
    try:
        for i, node_id in enumerate(ids):
            lbs.append(Balancer(root, i, node_id, args))
        for lb in lbs:
            lb.wait_serving()
        peers = " ".join(f"'{lb.id}'='{lb.id}|{lb.gossip}'" for lb in lbs)
        for lb in lbs:
            r, _ = request(lb.sock, {"cmd": "update-cluster", "args": entries})
            assert r["exit_code"] == 0, r["message"]
        t0 = time.time()
        for lb in lbs:
            r, _ = request(lb.sock, {"cmd": "set-peers", "args": [peers]})
            assert r["exit_code"] == 0, r["message"]
        # Before its set-peers a balancer knows only itself and is its own scaler: the
        # overlap is counted from when every one knows the others.
        peers_known = time.time()
        converged = None
        while time.time() - t0 < args.converge_limit:
            if all(len(lb.live()) == args.m for lb in lbs):
                converged = time.time() - t0
                break
            time.sleep(0.2)
        result["convergence_s"] = converged
        print(f"M={args.m} N={args.n} C={args.coverage}%: converged in {converged}", flush=True)
        if converged is None:
            seen = [len(lb.live()) for lb in lbs]
            print(f"  live counts: {seen}", flush=True)

        def deaths():
            return sum(lb.log_text().count("peer balancer dead or left") for lb in lbs)

        deaths_start = deaths()
        # Idle.
        time.sleep(2)
        before = [cpu_ticks(lb.proc.pid) for lb in lbs]
        t = time.time()
        time.sleep(args.idle)
        el = time.time() - t
        after = [cpu_ticks(lb.proc.pid) for lb in lbs]
        idle = [100.0 * (a - b) / TICK / el for a, b in zip(after, before)]
        result["idle_cpu_pct_mean"] = statistics.mean(idle)
        result["idle_cpu_pct_max"] = max(idle)
        result["rss_kib_mean"] = statistics.mean(rss_kib(lb.proc.pid) for lb in lbs)
        print(
            f"  idle CPU per balancer: mean {result['idle_cpu_pct_mean']:.2f}% max {max(idle):.2f}% of a core; "
            f"RSS {result['rss_kib_mean'] / 1024:.1f} MiB",
            flush=True,
        )
        # Rotations.
        times, acks, failures, messages = [], [], 0, []
        before = [cpu_ticks(lb.proc.pid) for lb in lbs]
        t = time.time()
        for r in range(args.rounds):
            lb = lbs[r % len(lbs)]
            label = labels[(r * 7919) % len(labels)]
            t1 = time.time()
            reply, _ = request(
                lb.sock,
                {"cmd": "rotate", "gear": label, "op": "out", "timeout_ms": int(parse_secs(args.rotate_timeout) * 1000)},
            )
            took = time.time() - t1
            proxies = (reply.get("data") or {}).get("proxy_results") or {}
            ok_acks = sum(1 for p in proxies.values() if p.get("status") == "success")
            unreachable = sum(1 for p in proxies.values() if p.get("status") == "unreachable")
            if reply["exit_code"] == 0 and ok_acks == args.m:
                times.append(took)
            else:
                failures += 1
                messages.append(reply["message"])
            acks.append(ok_acks)
            print(
                f"  rotate-out {r + 1}/{args.rounds} from {lb.id[:8]}: {took:.3f}s exit {reply['exit_code']} "
                f"acks {ok_acks}/{args.m} unreachable {unreachable}",
                flush=True,
            )
            reply, _ = request(lb.sock, {"cmd": "rotate", "gear": label, "op": "in"})
            if reply["exit_code"] != 0:
                messages.append("rotate-in: " + reply["message"])
        el = time.time() - t
        after = [cpu_ticks(lb.proc.pid) for lb in lbs]
        rot_cpu = [100.0 * (a - b) / TICK / max(el, 1e-9) for a, b in zip(after, before)]
        el = max(el, 1e-9)
        result["rotate_out_s"] = times
        result["rotate_out_p50_s"] = percentile(times, 50)
        result["rotate_out_max_s"] = max(times) if times else None
        result["rotate_failures"] = failures
        result["rotate_acks_min"] = min(acks) if acks else None
        result["rotate_messages"] = messages[:5]
        result["rotation_cpu_pct_mean"] = statistics.mean(rot_cpu) if args.rounds else None
        result["false_deaths"] = deaths() - deaths_start
        print(
            f"  rotate-out p50 {fmt(result['rotate_out_p50_s'])} max {fmt(result['rotate_out_max_s'])} "
            f"failures {failures}; CPU during rotations {result['rotation_cpu_pct_mean'] or 0:.2f}%; "
            f"false deaths {result['false_deaths']}",
            flush=True,
        )
        # Stalls of the acting scaler, sampled every 100 ms as well as read from the logs.
        sampler = ActingSampler(lbs) if args.stop else None
        stalls = []
        for secs in [float(x) for x in args.stop.split(",") if x]:
            found = acting_scaler(lbs, "stall")
            if found is None:
                break
            victim, took_over = found
            victim.proc.send_signal(signal.SIGSTOP)
            time.sleep(secs)
            took_over = took_over()
            victim.proc.send_signal(signal.SIGCONT)
            time.sleep(10)
            stalls.append({"stop_s": secs, "took_over": took_over})
            print(f"  SIGSTOP of the acting scaler for {secs:g}s: another took over: {took_over}", flush=True)
        result["stalls"] = stalls
        if sampler is not None:
            most, slots = sampler.most_at_once()
            result["acting_most_at_once_sampled"] = most
            print(f"  acting scalers sampled every 100 ms through the stalls: most at once {most} ({slots} slots)", flush=True)
        most, overlap_s, intervals = acting_overlap(lbs, peers_known, time.time())
        result["acting_most_at_once"] = most
        result["acting_overlap_s"] = overlap_s
        print(
            f"  acting scalers from the logs since every balancer had its set-peers: {intervals} intervals, "
            f"most at once {most}, {overlap_s:.3f}s with two or more",
            flush=True,
        )
        # Failover.
        fo = []
        for _ in range(args.failover):
            found = acting_scaler(lbs, "failover")
            if found is None:
                break
            victim, took_over = found
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            t1 = time.time()
            took = None
            while time.time() - t1 < 30:
                if took_over():
                    took = time.time() - t1
                    break
                time.sleep(0.02)
            fo.append(took)
            print(f"  failover: {fmt(took)}", flush=True)
        result["failover_s"] = fo
        result["loadavg_end"] = os.getloadavg()[0]
    finally:
        stop_all(lbs, root)
    write_json(args.json, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rotate_out_s",)}))


def stop_all(lbs, root):
    """Kill every balancer; remove their directory unless KEEP is set."""
    for lb in lbs:
        lb.stop()
    if os.environ.get("KEEP") is None:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"  logs kept in {root}")


def write_json(path, result):
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


class ActingSampler:
    """Every 100 ms, from a thread per balancer: whether it acts as the scaler (its
    `peers` reply carries its own scaler report). A stopped balancer does not answer
    and is not sampled meanwhile. Only the lowest ids are asked: the election ranks by
    id here, so only they can become the scaler."""

    def __init__(self, lbs, count=4):
        self.samples = []  # (time, balancer id, acting)
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self.run, args=(lb,), daemon=True)
            for lb in sorted(lbs, key=lambda lb: lb.id)[:count]
        ]
        for t in self.threads:
            t.start()

    def run(self, lb):
        while not self.stop.is_set():
            t = time.time()
            try:
                reply, _ = request(lb.sock, {"cmd": "peers"}, timeout=5)
                acting = bool(reply["data"]["scaler"]["acting"])
                self.samples.append((t, lb.id, acting))
            except Exception:
                pass
            self.stop.wait(max(0.0, 0.1 - (time.time() - t)))

    def most_at_once(self):
        """The most balancers acting within one 100 ms slot, each counted by its
        latest sample at or before the slot."""
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        if not self.samples:
            return 0, 0
        samples = sorted(self.samples)
        start, end = samples[0][0], samples[-1][0]
        latest = {}
        i = 0
        most = 0
        slots = 0
        t = start
        while t <= end:
            while i < len(samples) and samples[i][0] <= t:
                latest[samples[i][1]] = samples[i]
                i += 1
            # A balancer not sampled for a second (stopped, busy) does not count.
            now = sum(1 for (st, _, acting) in latest.values() if acting and t - st < 1.0)
            most = max(most, now)
            slots += 1
            t += 0.1
        return most, slots


def acting_scaler(lbs, phase):
    """The acting scaler among the running balancers, and a function that says whether
    another one has taken over since; None (said) unless exactly one acts.

    The election ranks by id here (no preferred gear, no head gear): only the lowest ids
    can be the scaler, so only they are asked (a status report with thousands of gears
    is a few MB). A take-over is seen in the new scaler's own log line, not by polling
    status reports."""
    alive = sorted((lb for lb in lbs if lb.proc.poll() is None), key=lambda lb: lb.id)
    acting = [lb for lb in alive[:3] if lb.status()["scaler"]["acting"]]
    if len(acting) != 1:
        print(f"  {phase}: {len(acting)} acting scalers among the first three", flush=True)
        return None
    victim = acting[0]
    others = [lb for lb in alive if lb is not victim]
    line = "this balancer is now the scaler"
    marks = {lb.id: lb.log_text().count(line) for lb in others}
    return victim, lambda: any(lb.log_text().count(line) > marks[lb.id] for lb in others)


STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s.*?(this balancer is now the scaler|stands down as the scaler|stopped acting as scaler)(.*)$")


def wall(stamp):
    from datetime import datetime, timezone

    return datetime.fromisoformat(stamp[:26]).replace(tzinfo=timezone.utc).timestamp()


def acting_overlap(lbs, since, until):
    """From the logs: (most acting at once, seconds with two or more, intervals) over
    [since, until]. A stand-down after a stall ends the role when its lease lapsed."""
    events = []
    intervals = 0
    for lb in lbs:
        start = None
        for line in lb.log_text().splitlines():
            m = STAMP.match(line)
            if not m:
                continue
            t = wall(m.group(1))
            if m.group(2) == "this balancer is now the scaler":
                start = start if start is not None else t
                continue
            if start is None:
                continue
            lapsed = re.search(r"its role lapsed (\d+) ms ago", m.group(3))
            end = t - int(lapsed.group(1)) / 1000 if lapsed else t
            events.append((max(start, since), 1))
            events.append((max(end, since), -1))
            intervals += 1
            start = None
        if start is not None:
            events.append((max(start, since), 1))
            events.append((until, -1))
            intervals += 1
    events = [(t, d) for t, d in events if t <= until]
    events.sort()
    cur = most = 0
    overlap = 0.0
    last = since
    for t, d in events:
        if cur >= 2:
            overlap += t - last
        cur += d
        most = max(most, cur)
        last = t
    return most, overlap, intervals


def parse_secs(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)", text)
    n, unit = int(m.group(1)), m.group(2)
    return n / 1000 if unit == "ms" else n * 60 if unit == "m" else n


def fmt(v):
    return "-" if v is None else f"{v:.3f}s"


if __name__ == "__main__":
    sys.exit(main())
