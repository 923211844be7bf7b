"""bench/cluster_logs.py - what bench/cluster.py and bench/partition.py read about the
scaler role: the `peers` replies sampled every 100 ms, and the balancers' logs.

The log lines read are all here (LOG_*). They are messages, not a format: each harness's
smoke mode (tests/bench_smoke.rs) checks them against the `peers` replies, so a changed
line fails CI instead of emptying a figure.
"""

import re
import threading
import time
from datetime import datetime, timezone

# A balancer starts acting as the scaler (with a broker configured / without one).
LOG_ACTS = ("this balancer is now the scaler", "this balancer holds the scaler role")
# It stops acting: it stood down (with a reason, after a stall: "its role lapsed N ms
# ago"), or another ranks higher.
LOG_STOPS = ("stands down as the scaler", "stopped acting as scaler")
# A peer declared dead (or gone): the false deaths, while none was stopped.
LOG_DEATH = "peer balancer dead or left"

STAMP = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s.*?("
    + "|".join(re.escape(x) for x in LOG_ACTS + LOG_STOPS)
    + r")(.*)$"
)


def deaths_in(text):
    return text.count(LOG_DEATH)


def wall(stamp):
    return datetime.fromisoformat(stamp[:26]).replace(tzinfo=timezone.utc).timestamp()


def acting_overlap(lbs, since, until):
    """From the logs over [since, until]: (most acting at once, seconds with two or more,
    intervals, ids of the balancers with an interval). A stand-down after a stall ends
    the role when its lease lapsed."""
    events = []
    intervals = 0
    logged = set()
    for lb in lbs:
        start = None
        for line in lb.log_text().splitlines():
            m = STAMP.match(line)
            if not m:
                continue
            t = wall(m.group(1))
            if m.group(2) in LOG_ACTS:
                start = start if start is not None else t
                continue
            if start is None:
                continue
            lapsed = re.search(r"its role lapsed (\d+) ms ago", m.group(3))
            end = t - int(lapsed.group(1)) / 1000 if lapsed else t
            events.append((max(start, since), 1))
            events.append((max(end, since), -1))
            intervals += 1
            logged.add(lb.id)
            start = None
        if start is not None:
            events.append((max(start, since), 1))
            events.append((until, -1))
            intervals += 1
            logged.add(lb.id)
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
    return most, overlap, intervals, logged


class ActingSampler:
    """Every 100 ms, from a thread per balancer: whether it acts as the scaler (its
    `peers` reply carries its own scaler report, `scaler.acting`). A stopped balancer
    does not answer and is not sampled meanwhile. Only the lowest ids are asked: the
    election ranks by id here, so only they can become the scaler."""

    def __init__(self, lbs, count=4):
        self.samples = []  # (time, balancer id, acting)
        self.errors = []
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
                self.samples.append((t, lb.id, lb.acting(timeout=5)))
            except (OSError, RuntimeError):
                pass  # stopped, killed or busy past the timeout: not sampled
            except Exception as e:  # the reply lacks the field: said by ever_acting
                self.errors.append(e)
                return
            self.stop.wait(max(0.0, 0.1 - (time.time() - t)))

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        if self.errors:
            raise self.errors[0]

    def ever_acting(self):
        """Ids of the balancers sampled acting at least once."""
        self.finish()
        return {i for (_, i, acting) in self.samples if acting}

    def most_at_once(self):
        """The most balancers acting within one 100 ms slot, each counted by its
        latest sample at or before the slot, and the number of slots."""
        self.finish()
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
