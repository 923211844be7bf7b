#!/usr/bin/env python3
"""A normal client's latency, for bench/slow_read.sh: for SECONDS, every INTERVAL
seconds, GET each PATH in turn on a new connection (Connection: close), and time it from
connect to the last byte of the body. A request that fails, or takes longer than
TIMEOUT seconds, counts as an error with TIMEOUT as its latency (a stall is not left
out). Prints one line per path: `path count errors p50_ms p99_ms max_ms`.

Usage: latency_probe.py HOST PORT SECONDS INTERVAL TIMEOUT PATH[=BYTES]...
   (BYTES: the body length every answer must have; with SLOW_MS set, each request
   slower than that many milliseconds is also printed to stderr with its start time)
"""

import os
import socket
import sys
import time


def fetch(host, port, path, timeout):
    """One request on a new connection: returns the body's length, raises on failure."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        )
        data = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline")
            s.settimeout(left)
            chunk = s.recv(262144)
            if not chunk:
                break
            data += chunk
    head, sep, body = bytes(data).partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.1 200"):
        raise ValueError(f"bad answer: {head[:60]!r}")
    return len(body)


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    seconds, interval, timeout = (float(x) for x in sys.argv[3:6])
    paths = []
    for arg in sys.argv[6:]:
        path, _, size = arg.partition("=")
        paths.append((path, int(size) if size else None))
    lat = {p: [] for p, _ in paths}
    errors = {p: 0 for p, _ in paths}
    slow_ms = float(os.environ.get("SLOW_MS", "inf"))
    start = time.monotonic()
    end = start + seconds
    next_at = time.monotonic()
    while time.monotonic() < end:
        for path, size in paths:
            t0 = time.monotonic()
            try:
                n = fetch(host, port, path, timeout)
                if size is not None and n != size:
                    raise ValueError(f"{n} bytes, expected {size}")
                lat[path].append(time.monotonic() - t0)
                if lat[path][-1] * 1000 > slow_ms:
                    print(f"slow: {t0 - start:.2f}s {path} {lat[path][-1] * 1000:.1f} ms", file=sys.stderr)
            except (OSError, ValueError) as e:
                errors[path] += 1
                lat[path].append(timeout)
                print(f"probe: {path}: {e}", file=sys.stderr)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    for path, _ in paths:
        v = sorted(lat[path])
        print(
            f"{path} {len(v)} {errors[path]} {percentile(v, 50) * 1000:.1f} "
            f"{percentile(v, 99) * 1000:.1f} {(v[-1] if v else float('nan')) * 1000:.1f}"
        )


if __name__ == "__main__":
    main()
