#!/usr/bin/env python3
"""Pool the paired rounds recorded in bench/history/: python3 bench/pool.py

Each run's table in the history of RESULTS.md (bench/history/*.md, one file per date)
lists its per-round ratios (gearlb / haproxy-reuse) for
peak req/s and fixed-rate p99, and gearlb's N=1000 / N=3 ratio per round. This reads
those lists back from the sections named below and prints the median per-round ratio of
all of them, with the same order-statistic interval bench/run.sh prints for one run
(rounds independent and alike; no assumption on the shape of the noise).
"""

import re
import sys
from pathlib import Path

# Invocations pooled, by the commit in their section heading; FINAL: builds with phased
# writes reported as a full or 12-round run.
PEAK_P99 = ["a82351c", "9c1148a", "51ab87e", "16e668a", "fed3701", "05efc43",
            "237bd8c", "3b8902d", "389f11a", "7f2fb69", "6d1712f"]
N_RATIO = ["a82351c", "9c1148a", "51ab87e", "16e668a", "fed3701", "237bd8c",
           "389f11a", "7f2fb69", "4a8fec7"]
FINAL = {"a82351c", "9c1148a", "51ab87e", "16e668a"}

PEAK_ROW = re.compile(r"^\| (1 peak|peak req/s)")
P99_ROW = re.compile(r"^\| (2 fixed rate|2 p99|p99 ms at)")
RATIOS = re.compile(r"\((\d\.\d\d(?: \d\.\d\d)+)\)")
N_ROW = re.compile(r"N=1000 / N=3.*?gearlb ((?:[01]\.\d{3} ?){5,})")
N_TEXT = re.compile(r"on the next build \((\w{7})\b.*?per round ((?:[01]\.\d{3},? (?:and )?){4}[01]\.\d{3})",
                    re.S)


def sections(text):
    """(heading, body) for every markdown heading."""
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def commit_of(heading, names):
    found = [c for c in names if c in heading]
    return found[0] if found else None


def first_list(body, row, pattern):
    for line in body.splitlines():
        if row.search(line):
            m = pattern.search(line)
            if m:
                return [float(x) for x in m.group(1).split()]
    return None


def stats(values, better):
    q = sorted(values)
    n = len(q)
    med = q[n // 2] if n % 2 else (q[n // 2 - 1] + q[n // 2]) / 2
    ci, tail, c = "too few rounds for a 90% interval", 0.0, 1.0
    for k in range(1, n // 2 + 1):
        tail += c / 2**n
        c = c * (n - k + 1) / k
        if 1 - 2 * tail < 0.9:
            break
        ci = f"{100 * (1 - 2 * tail):.0f}% interval {q[k - 1]:.3f}-{q[n - k]:.3f}"
    if better == "band":
        count = f"no more than 5% slower in {sum(x >= 0.95 for x in q)} of {n}"
    else:
        wins = sum((x > 1) if better == "higher" else (x < 1) for x in q)
        level = sum(x == 1.0 for x in q)
        count = f"gearlb better in {wins} of {n}, level in {level}"
    return f"median {med:.3f} ({ci}); {count}"


def main():
    # Newest first, as RESULTS.md was: the first section naming a commit counts.
    path = Path(__file__).with_name("history")
    files = sorted((f for f in path.glob("*.md") if f.name != "README.md"), reverse=True)
    text = "\n".join(f.read_text() for f in files)
    peak, p99, nr = {}, {}, {}
    for heading, body in sections(text):
        c = commit_of(heading, PEAK_P99)
        if c and c not in peak:
            peak[c] = first_list(body, PEAK_ROW, RATIOS)
            p99[c] = first_list(body, P99_ROW, RATIOS)
        c = commit_of(heading, N_RATIO)
        if c and c not in nr:
            m = N_ROW.search(body)
            if m:
                nr[c] = [float(x) for x in m.group(1).split()]
        for m in N_TEXT.finditer(body):
            if m.group(1) in N_RATIO and m.group(1) not in nr:
                nr[m.group(1)] = [float(x) for x in re.findall(r"[01]\.\d{3}", m.group(2))]
    missing = [f"{name} {c}" for name, got, want in
               (("peak", peak, PEAK_P99), ("p99", p99, PEAK_P99), ("N", nr, N_RATIO))
               for c in want if not got.get(c)]
    if missing:
        sys.exit(f"pool.py: no per-round list found in {path} for: {', '.join(missing)}")
    for name, got, better in (("peak req/s", peak, "higher"), ("fixed-rate p99", p99, "lower"),
                              ("N=1000 / N=3", nr, "band")):
        every = [x for c in got for x in got[c]]
        final = [x for c in got if c in FINAL for x in got[c]]
        print(f"{name:15} all {len(every)} rounds: {stats(every, better)}")
        print(f"{'':15} final path, {len(final)} rounds: {stats(final, better)}")
        for c, xs in got.items():
            print(f"{'':15}   {c}: {' '.join(f'{x:g}' for x in xs)}")


if __name__ == "__main__":
    main()
