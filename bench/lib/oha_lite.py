#!/usr/bin/env python3
"""The subset of oha's command line and JSON output the harnesses use, for their smoke
modes (SMOKE=1) on a machine without oha (CI: oha takes minutes to build, and a smoke
run judges nothing). A few requests over a few keep-alive connections, on threads:
never a measurement.

  oha_lite.py [--no-tui] [-n N | -z 2s] [-c C] [--disable-keepalive]
              [--output-format json] [-H 'Name: value']... [-m METHOD] [-D FILE]
              [--insecure] URL

JSON: {"summary": {"successRate", "total", "requestsPerSec"},
       "statusCodeDistribution": {"200": n, ...}, "errorDistribution": {"why": n}}.
"""

import argparse
import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse


def parse_duration(s):
    s = s.strip()
    for unit, mul in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if s.endswith(unit):
            return float(s[: -len(unit)]) * mul
    return float(s)


def read_response(f):
    """Read one response from file object f; return (status, keep_alive)."""
    line = f.readline(65536)
    if not line:
        raise ConnectionError("connection closed")
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ConnectionError("not an HTTP/1.x response: %r" % line[:40])
    status = int(parts[1])
    length, chunked, close = None, False, parts[0] == "HTTP/1.0"
    while True:
        h = f.readline(65536)
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        elif name == "connection" and "close" in value.lower():
            close = True
    if chunked:
        while True:
            size = int(f.readline(65536).split(b";")[0], 16)
            f.read(size + 2) if size else None
            if size == 0:
                while f.readline(65536) not in (b"\r\n", b"\n", b""):
                    pass
                break
    elif length is not None:
        f.read(length)
    elif status >= 200 and status not in (204, 304):
        f.read()
        close = True
    return status, not close


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--no-tui", action="store_true")
    p.add_argument("-n", type=int, default=200)
    p.add_argument("-z", default=None)
    p.add_argument("-c", type=int, default=1)
    p.add_argument("--disable-keepalive", action="store_true")
    p.add_argument("--output-format", default="text")
    p.add_argument("-H", action="append", default=[])
    p.add_argument("-m", default="GET")
    p.add_argument("-D", default=None)
    p.add_argument("--insecure", action="store_true")
    p.add_argument("url")
    a = p.parse_args()
    u = urllib.parse.urlsplit(a.url)
    host, port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
    path = (u.path or "/") + ("?" + u.query if u.query else "")
    body = open(a.D, "rb").read() if a.D else b""
    headers = {"host": u.netloc}
    for h in a.H:
        k, _, v = h.partition(":")
        headers[k.strip().lower()] = v.strip()
    if body:
        headers["content-length"] = str(len(body))
    if a.disable_keepalive:
        headers["connection"] = "close"
    request = ("%s %s HTTP/1.1\r\n" % (a.m, path)).encode() + b"".join(
        ("%s: %s\r\n" % (k, v)).encode() for k, v in headers.items()) + b"\r\n" + body
    ctx = None
    if u.scheme == "https":
        ctx = ssl.create_default_context()
        if a.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + parse_duration(a.z) if a.z else None
    lock = threading.Lock()
    left = [a.n if deadline is None else 1 << 62]
    codes, errors = {}, {}

    def take():
        with lock:
            if left[0] <= 0 or (deadline and time.monotonic() >= deadline):
                return False
            left[0] -= 1
            return True

    def count(d, k):
        with lock:
            d[k] = d.get(k, 0) + 1

    def worker():
        conn = None
        while take():
            try:
                if conn is None:
                    s = socket.create_connection((host, port), timeout=10)
                    if ctx:
                        s = ctx.wrap_socket(s, server_hostname=host)
                    conn = (s, s.makefile("rb"))
                conn[0].sendall(request)
                status, keep = read_response(conn[1])
                count(codes, str(status))
                if not keep or a.disable_keepalive:
                    conn[0].close()
                    conn = None
            except Exception as e:  # noqa: BLE001 (every failure is counted, as oha does)
                count(errors, type(e).__name__ + ": " + str(e)[:80])
                if conn:
                    conn[0].close()
                conn = None
        if conn:
            conn[0].close()

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(max(1, a.c))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = max(time.monotonic() - start, 1e-6)
    done = sum(codes.values())
    tried = done + sum(errors.values())
    out = {
        "summary": {"successRate": done / tried if tried else 0.0, "total": total,
                    "requestsPerSec": done / total},
        "statusCodeDistribution": codes,
        "errorDistribution": errors,
    }
    if a.output_format == "json":
        json.dump(out, sys.stdout)
        print()
    else:
        print("oha_lite: %d answers in %.2fs; status %s; errors %s" % (done, total, codes, errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
