#!/usr/bin/env python3
"""bench/cluster.py - M real gearlb processes on 127.0.0.1 coordinating N gears.

Usage:
    python3 bench/cluster.py [--bin target/release/gearlb] [--m 30] [--n 3000]
                             [--coverage 100] [--rounds 10] [--idle 30]
                             [--stop 5,30] [--failover 0] [--start-batch 10]
                             [--json out.json]
    python3 bench/cluster.py --smoke [--bin target/debug/gearlb]   # ~30 s, judges nothing

Every balancer is a real `gearlb run` (one worker thread, health checks off so that
what is measured is coordination, gossip on the proxy port as in a gear, the default
200 ms interval). They learn each other through `set-peers` (32-hex node ids, as gear
uuids) and get the same N web gears through `update-cluster` (32-hex gear names, a
16-character namespace: the platform's real shapes). The harness talks to each control
socket directly (one JSON line per request), so no `gearlb ctl` process is timed.

What it reads from the product (`Read` below): the `peers` reply (`ctl peers --json`):
`advertise` (the gossip address), `live`, and `scaler.acting` (this balancer acts as
the scaler now); the `rotate` reply's `proxy_results`; and two kinds of log line, which
the smoke mode checks against the replies: when a balancer starts and stops acting,
and a peer declared dead.

Measured, in this order:
  convergence   time from the first set-peers until every balancer sees all M live
                (--start-batch: one by one, in parallel batches, or all at once);
  idle CPU      per balancer, % of one core, over --idle seconds of doing nothing
                (utime + stime from /proc), and RSS;
  idle gossip   per balancer, kbit/s of gossip frames sent (`peers`: gossip.bytes_sent)
                over the same window, and of its TCP connections as `ss` counts them;
  rotate-out    --rounds rotate-outs of different gears from different balancers, each
                timed from the request to the reply (which comes once every live
                balancer acknowledged), then rotated back in; acks and failures counted;
                CPU per balancer over the rotation phase;
  false deaths  "peer balancer dead or left" log lines while no balancer was stopped;
  stalls        (--stop 5,30) for each duration: SIGSTOP the acting scaler for that long,
                SIGCONT, wait --settle s; whether another acted meanwhile (`peers`);
  overlap       from every balancer's log, after set-peers and before the failovers: the
                intervals each one acted (start to stand-down; a stalled one's role ends
                when its lease lapsed, as its stand-down line says), the most acting at
                once and for how long two or more did;
  failover      (--failover K) K times: kill -9 the acting scaler and time until another
                one's `peers` reply says it acts.

Exits non-zero when a figure could not be read (no convergence, a failover never seen);
--smoke also when a field or log line it reads is missing. Results go to stdout (and
--json); bench/CLUSTER.md records them. CI runs --smoke (tests/bench_smoke.rs).
"""

import argparse
import concurrent.futures
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
import time

from cluster_logs import ActingSampler, acting_overlap, deaths_in

SECRET = "bench-cluster-secret-0123456789abcdef"
TICK = os.sysconf("SC_CLK_TCK")


class Unreadable(Exception):
    """The product did not give what the harness reads: a field, a log line."""


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


def field(reply, *path):
    """reply["data"][path...], or Unreadable naming the path."""
    v = reply.get("data")
    for k in path:
        if not isinstance(v, dict) or k not in v:
            raise Unreadable(f"the control reply has no data.{'.'.join(path)}: {json.dumps(reply)[:300]}")
        v = v[k]
    return v


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
        """Until the control socket answers `peers`; its `advertise` is the gossip address."""
        end = time.time() + limit
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.id} exited:\n{self.log_text()}")
            if os.path.exists(self.sock):
                try:
                    reply, _ = request(self.sock, {"cmd": "peers"}, timeout=5)
                except OSError:
                    reply = None
                if reply is not None:
                    self.gossip = field(reply, "advertise")
                    if not re.fullmatch(r"[0-9.]+:[1-9][0-9]*", self.gossip or ""):
                        raise Unreadable(f"{self.id}: peers.advertise is {self.gossip!r}, not host:port")
                    return
            time.sleep(0.05)
        raise RuntimeError(f"{self.id} did not start:\n{self.log_text()}")

    def peers(self, timeout=30):
        reply, _ = request(self.sock, {"cmd": "peers"}, timeout=timeout)
        return reply

    def live(self):
        return field(self.peers(), "live")

    def acting(self, timeout=30):
        """Whether this balancer acts as the scaler now (`peers`: scaler.acting)."""
        return bool(field(self.peers(timeout), "scaler", "acting"))

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/gearlb")
    ap.add_argument("--m", type=int, default=30)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--coverage", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--failover", type=int, default=0)
    ap.add_argument("--stop", default="", help="SIGSTOP the acting scaler for these seconds, e.g. 5,30")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds after each SIGCONT")
    ap.add_argument("--gossip", default="200ms")
    ap.add_argument(
        "--start-batch",
        type=int,
        default=1,
        help="set-peers sent to this many balancers at once, batch after batch, as the "
        "platform's hooks run them (1: one by one; 0: all balancers at once)",
    )
    ap.add_argument("--rotate-timeout", default="20s")
    ap.add_argument("--converge-limit", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="3 balancers, 20 gears, every phase once, checked")
    args = ap.parse_args(argv)
    if args.smoke:
        args.m, args.n, args.rounds, args.idle, args.stop, args.settle, args.failover = 3, 20, 2, 1.0, "1", 3.0, 1
        args.start_batch = 2
        args.converge_limit = 60.0
    return args


def main(argv=None):
    args = parse_args(argv)
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
    problems = []
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
        batch = args.start_batch if args.start_batch > 0 else len(lbs)
        result["start_batch"] = batch
        with concurrent.futures.ThreadPoolExecutor(max_workers=batch) as pool:
            for first in range(0, len(lbs), batch):
                group = lbs[first : first + batch]
                replies = pool.map(lambda lb: request(lb.sock, {"cmd": "set-peers", "args": [peers]})[0], group)
                for r in replies:
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
        print(
            f"M={args.m} N={args.n} C={args.coverage}%: set-peers {batch} at a time, converged in {converged}",
            flush=True,
        )
        if converged is None:
            seen = [len(lb.live()) for lb in lbs]
            print(f"  live counts: {seen}", flush=True)
            problems.append("no convergence")

        def deaths():
            return sum(deaths_in(lb.log_text()) for lb in lbs)

        deaths_start = deaths()
        measure_idle(lbs, args, result)
        measure_rotations(lbs, labels, args, result)
        result["false_deaths"] = deaths() - deaths_start
        print(
            f"  rotate-out p50 {fmt(result['rotate_out_p50_s'])} max {fmt(result['rotate_out_max_s'])} "
            f"failures {result['rotate_failures']}; CPU during rotations {result['rotation_cpu_pct_mean'] or 0:.2f}%; "
            f"false deaths {result['false_deaths']}",
            flush=True,
        )
        # Stalls of the acting scaler, sampled every 100 ms as well as read from the logs.
        sampler = ActingSampler(lbs) if args.stop or args.smoke else None
        stalls = []
        for secs in [float(x) for x in args.stop.split(",") if x]:
            found = acting_scaler(lbs, "stall")
            if found is None:
                problems.append("no single acting scaler before a stall")
                break
            victim, took_over = found
            victim.proc.send_signal(signal.SIGSTOP)
            end, seen = time.time() + secs, False
            while time.time() < end:
                seen = seen or took_over()
                time.sleep(0.1)
            took_over = seen
            victim.proc.send_signal(signal.SIGCONT)
            time.sleep(args.settle)
            stalls.append({"stop_s": secs, "took_over": took_over})
            print(f"  SIGSTOP of the acting scaler for {secs:g}s: another took over: {took_over}", flush=True)
        result["stalls"] = stalls
        sampled_acting = set()
        if sampler is not None:
            most, slots = sampler.most_at_once()
            sampled_acting = sampler.ever_acting()
            result["acting_most_at_once_sampled"] = most
            print(f"  acting scalers sampled every 100 ms through the stalls: most at once {most} ({slots} slots)", flush=True)
        most, overlap_s, intervals, logged_acting = acting_overlap(lbs, peers_known, time.time())
        result["acting_most_at_once"] = most
        result["acting_overlap_s"] = overlap_s
        print(
            f"  acting scalers from the logs since every balancer had its set-peers: {intervals} intervals, "
            f"most at once {most}, {overlap_s:.3f}s with two or more",
            flush=True,
        )
        # The logs and the replies must tell the same story: a balancer that said it acts
        # has an acting interval in its log (else the log lines read here have changed).
        if sampled_acting - logged_acting:
            problems.append(
                f"balancers {sorted(i[:8] for i in sampled_acting - logged_acting)} acted (peers: scaler.acting) "
                "but their logs show no acting interval: the log lines cluster_logs.py reads have changed"
            )
        measure_failovers(lbs, args, result, problems)
        if args.smoke and args.failover and result["failover_s"] and result["failover_s"][0] is not None:
            # The killed balancer must be declared dead in some log within a few seconds.
            end = time.time() + 15
            while deaths() == deaths_start and time.time() < end:
                time.sleep(0.2)
            if deaths() == deaths_start:
                problems.append("a balancer was killed but no log says a peer is dead: the line read for false deaths has changed")
        result["loadavg_end"] = os.getloadavg()[0]
    except Unreadable as e:
        problems.append(str(e))
    finally:
        stop_all(lbs, root)
    if args.smoke and result.get("rotate_failures"):
        problems.append(f"{result['rotate_failures']} rotate-outs failed or were not acknowledged by all")
    result["problems"] = problems
    write_json(args.json, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rotate_out_s",)}))
    for p in problems:
        print(f"cluster.py: {p}", file=sys.stderr)
    return 1 if problems else 0


def gossip_bytes_sent(lb, args):
    """Bytes of gossip frames this balancer has sent (`peers`: gossip.bytes_sent); None
    for a release without the counter (--smoke requires it)."""
    try:
        v = field(lb.peers(), "gossip", "bytes_sent")
    except Unreadable:
        if args.smoke:
            raise
        return None
    if not isinstance(v, int):
        raise Unreadable(f"{lb.id}: peers.gossip.bytes_sent is {v!r}, not a count")
    return v


def tcp_bytes_sent():
    """bytes_sent of every established TCP connection, by (pid, local, peer), as `ss`
    counts them: the kernel's count, independent of the product's own."""
    out = subprocess.run(["ss", "-tnpiH", "state", "established"], capture_output=True, text=True).stdout
    found, key = {}, None
    for line in out.splitlines():
        m = re.search(r"(\S+)\s+(\S+)\s+users:\(\(\"[^\"]*\",pid=(\d+)", line)
        if m:
            key = (int(m.group(3)), m.group(1), m.group(2))
            continue
        b = re.search(r"bytes_sent:(\d+)", line)
        if key and b:
            found[key] = int(b.group(1))
            key = None
    return found


def sent_by(pid, before, after):
    """What `pid` sent between two `tcp_bytes_sent` snapshots (connections opened
    meanwhile count whole; closed ones are missed)."""
    return sum(v - before.get(k, 0) for k, v in after.items() if k[0] == pid)


def measure_idle(lbs, args, result):
    time.sleep(2)
    before = [cpu_ticks(lb.proc.pid) for lb in lbs]
    sent_before = [gossip_bytes_sent(lb, args) for lb in lbs]
    tcp_before = tcp_bytes_sent()
    t = time.time()
    time.sleep(args.idle)
    tcp_after = tcp_bytes_sent()
    sent_after = [gossip_bytes_sent(lb, args) for lb in lbs]
    el = time.time() - t
    after = [cpu_ticks(lb.proc.pid) for lb in lbs]
    idle = [100.0 * (a - b) / TICK / el for a, b in zip(after, before)]
    # Every TCP byte a balancer sends while idle is gossip (no client, health checks off).
    wrote = [8.0 * sent_by(lb.proc.pid, tcp_before, tcp_after) / 1000.0 / el for lb in lbs]
    result["idle_cpu_pct_mean"] = statistics.mean(idle)
    result["idle_cpu_pct_max"] = max(idle)
    result["idle_tcp_kbit_s_mean"] = statistics.mean(wrote)
    if None in sent_before or None in sent_after:
        kbit = [float("nan")]
        result["idle_gossip_kbit_s_mean"] = result["idle_gossip_kbit_s_max"] = None
    else:
        kbit = [8.0 * (a - b) / 1000.0 / el for a, b in zip(sent_after, sent_before)]
        result["idle_gossip_kbit_s_mean"] = statistics.mean(kbit)
        result["idle_gossip_kbit_s_max"] = max(kbit)
    if args.smoke and min(kbit) <= 0:
        raise Unreadable(f"gossip.bytes_sent did not grow over {el:.1f} s idle: {sent_before} -> {sent_after}")
    if args.smoke:
        # The product's count and the kernel's must tell the same story (the kernel's
        # also has the upgrade requests of connections opened meanwhile).
        for lb, k, w in zip(lbs, kbit, wrote):
            if k > 2 * w + 32 or k < w / 4 - 32:
                raise Unreadable(f"{lb.id}: gossip.bytes_sent says {k:.1f} kbit/s, ss says {w:.1f} kbit/s")
    result["rss_kib_mean"] = statistics.mean(rss_kib(lb.proc.pid) for lb in lbs)
    print(
        f"  idle CPU per balancer: mean {result['idle_cpu_pct_mean']:.2f}% max {max(idle):.2f}% of a core; "
        f"gossip sent {statistics.mean(kbit):.1f} kbit/s mean, {max(kbit):.1f} max "
        f"(TCP by ss {result['idle_tcp_kbit_s_mean']:.1f} kbit/s); "
        f"RSS {result['rss_kib_mean'] / 1024:.1f} MiB",
        flush=True,
    )


def measure_rotations(lbs, labels, args, result):
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
    el = max(time.time() - t, 1e-9)
    after = [cpu_ticks(lb.proc.pid) for lb in lbs]
    rot_cpu = [100.0 * (a - b) / TICK / el for a, b in zip(after, before)]
    result["rotate_out_s"] = times
    result["rotate_out_p50_s"] = percentile(times, 50)
    result["rotate_out_max_s"] = max(times) if times else None
    result["rotate_failures"] = failures
    result["rotate_acks_min"] = min(acks) if acks else None
    result["rotate_messages"] = messages[:5]
    result["rotation_cpu_pct_mean"] = statistics.mean(rot_cpu) if args.rounds else None


def measure_failovers(lbs, args, result, problems):
    fo = []
    for _ in range(args.failover):
        found = acting_scaler(lbs, "failover")
        if found is None:
            problems.append("no single acting scaler before a failover")
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
        if took is None:
            problems.append("a failover was not seen within 30 s (no other balancer's peers reply says it acts)")
    result["failover_s"] = fo


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


def acting_scaler(lbs, phase, wait=20.0):
    """The acting scaler among the running balancers, and a function that says whether
    another one acts since; None (said) unless exactly one acts within `wait` seconds.

    The election ranks by id here (no preferred gear, no head gear): only the lowest ids
    can be the scaler, so only they are asked, through `peers` (small, unlike a status
    report with thousands of gears), as is every take-over."""
    alive = sorted((lb for lb in lbs if lb.proc.poll() is None), key=lambda lb: lb.id)
    end = time.time() + wait
    while True:
        acting = [lb for lb in alive[:3] if lb.acting()]
        if len(acting) == 1 or time.time() > end:
            break
        time.sleep(0.2)
    if len(acting) != 1:
        print(f"  {phase}: {len(acting)} acting scalers among the first three", flush=True)
        return None
    victim = acting[0]
    next_in_line = [lb for lb in alive if lb is not victim][:3]

    def took_over():
        for lb in next_in_line:
            try:
                if lb.acting(timeout=2):
                    return True
            except (OSError, RuntimeError):
                pass
        return False

    return victim, took_over


def parse_secs(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)", text)
    n, unit = int(m.group(1)), m.group(2)
    return n / 1000 if unit == "ms" else n * 60 if unit == "m" else n


def fmt(v):
    return "-" if v is None else f"{v:.3f}s"


if __name__ == "__main__":
    sys.exit(main())
