#!/usr/bin/env python3
"""Request smuggling and response splitting, differential: gearlb beside HAProxy.

Each case is raw bytes a client sends on one connection (request side: HTTP/1, or HTTP/2
frames built by hand for the downgrade cases), or a raw answer a backend gives (response
side). The same case goes through gearlb and through HAProxy, each in front of a
recording backend of its own, and this script checks what gearlb passed on:

  upstream   every byte gearlb wrote to a backend parses strictly (RFC 9112: CRLF only, no
             obs-fold, token names, no control bytes, one unambiguous length, chunks well
             formed). A message cut short is allowed only on a connection gearlb then closed.
  client     every response gearlb wrote to an HTTP/1 client parses strictly the same
             way, and no backend's extra bytes (a second, unasked-for response) reach the
             client as a response.
  haproxy    gearlb's backend never receives a request that HAProxy's did not, except the
             differences listed in ACCEPTED with the reason they are safe; and gearlb never
             waits for more bytes where HAProxy answered or closed (a timing scanner's
             finding), except those listed in WAITS.

    python3 tests/support/differential.py --gearlb target/release/gearlb --haproxy /usr/sbin/haproxy
    ... [-v] [case-name-substring ...]

Prints one line per case and exits 1 if any case has a finding. Traffic to 127.0.0.1 only.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import differential_cases as cases  # noqa: E402

# Cases where gearlb forwards what HAProxy 2.6 refuses, and why that is safe.
ACCEPTED = {
    "te-comma-empty": "an empty list element is allowed (RFC 9110 5.6.1); gearlb forwards "
    "`transfer-encoding: chunked`, one coding, re-framed (HAProxy answers 422)",
    "te-comma-empty+cl": "as te-comma-empty; Content-Length is dropped and the connection closed",
    "r-no-length-close": "a close-delimited answer is passed on chunked to an HTTP/1.1 "
    "client, so its connection stays usable and its next request is served (HAProxy closes it)",
    "r-head-line-only": "as r-no-length-close, with an empty body",
    "r-http10-close-delimited": "as r-no-length-close, from an HTTP/1.0 backend",
    "rx-te-http10": "as r-http10-close-delimited: Transfer-Encoding on an HTTP/1.0 answer "
    "is faulty framing (RFC 9112 6.1), read to the close and passed on chunked",
    "rx-h10-ka-no-length": "as r-http10-close-delimited, with Connection: keep-alive",
    "rx-cl-i64-overflow": "a length beyond a signed 64-bit number is a 502 (a client holding "
    "it signed would overflow) and the client's next request is served; HAProxy passes the "
    "length on and waits for that many bytes",
    "r-te-empty": "as r-no-length-close: an empty Transfer-Encoding names no chunked "
    "coding, so the body runs to the close (RFC 9112 6.3); the client gets it chunked",
    "ws-upgrade-bad-version": "no tunnel is opened unless the backend answers 101; the "
    "backend answered 200, so the next bytes were parsed as a request (HAProxy 400s the "
    "version)",
}

# Cases where gearlb waits for more bytes (a timing scanner would see a timeout) where
# HAProxy 2.6 answers, and why that is right.
WAITS = {
    "rx-101-with-cl-asked": "the gear switched protocols: its Content-Length is dropped "
    "from the 101, the bytes after it are the tunnel's, and a tunnel waits for its peers "
    "(HAProxy answers 502)",
}

TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
FIELD_VALUE_BAD = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# A chunk size gearlb may write: below 2^52 (HAProxy's bound, and gearlb's).
HEX = re.compile(rb"^0*[0-9A-Fa-f]{1,13}$")


class Strict(Exception):
    pass


def _port_span():
    """(base, span): ports outside the kernel's ephemeral range, above 10000."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(n) for n in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if low - 10000 >= 65535 - high:
        return 10000, low - 10000
    return high + 1, 65535 - high


_PORTS = _port_span()
_NEXT = [os.getpid() * 7919 % _PORTS[1]]


def free_port():
    """A port for a process started later. Not a `bind(0)` port: once let go, that one is
    back in the ephemeral range, where any outgoing connection may take it as its source
    port before the process binds it. This one comes from outside that range, tried with
    a bind, and never given twice (as tests/support/mod.rs's `free_port`)."""
    base, span = _PORTS
    for _ in range(span):
        port = base + _NEXT[0] % span
        _NEXT[0] += 1
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port outside the ephemeral range")


# --------------------------------------------------------------------------------------
# A lenient parser (what a naive backend would do) and a strict one (the checks).

def lenient_one(buf):
    """(method, target, used) for one request at the start of buf, or None if incomplete."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None
    lines = buf[:i].split(b"\r\n")
    parts = lines[0].split(b" ")
    method, target = (parts + [b"", b""])[:2]
    hdrs = {}
    for line in lines[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            hdrs.setdefault(k.strip().lower(), []).append(v.strip())
    pos = i + 4
    if b"chunked" in b",".join(hdrs.get(b"transfer-encoding", [])).lower():
        while True:
            j = buf.find(b"\r\n", pos)
            if j < 0:
                return None
            try:
                n = int(buf[pos:j].split(b";")[0], 16)
            except ValueError:
                n = 0
            pos = j + 2
            if n == 0:
                k = buf.find(b"\r\n\r\n", pos - 2)
                if k < 0:
                    return None
                pos = k + 4
                break
            if len(buf) < pos + n + 2:
                return None
            pos += n + 2
    elif b"content-length" in hdrs:
        try:
            n = int(hdrs[b"content-length"][0])
        except ValueError:
            n = 0
        if len(buf) < pos + n:
            return None
        pos += n
    return method.decode("latin1"), target.decode("latin1"), pos


def strict_head(buf, request):
    """Parses one head strictly: (start-line parts, {name: [values]}, end) or None when
    incomplete; raises Strict on anything RFC 9112 does not allow a sender to write."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        if b"\n" in buf.replace(b"\r\n", b"") or b"\r" in buf.replace(b"\r\n", b""):
            raise Strict("bare CR or LF in a head")
        return None
    head = buf[:i]
    if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
        raise Strict("bare CR or LF in a head")
    lines = head.split(b"\r\n")
    first = lines[0]
    if request:
        m = re.match(rb"^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP/1\.[01]$", first)
        if not m:
            raise Strict("request line %r" % first[:80])
        start = (m.group(1), m.group(2))
        if re.search(rb"[\x00-\x20\x7f-\xff#]", start[1]):
            raise Strict("request target %r" % start[1][:80])
        # Origin-form (or `*` for OPTIONS): what a proxy sends a server (RFC 9112 §3.2).
        if not (start[1].startswith(b"/") or (start[1] == b"*" and start[0] == b"OPTIONS")):
            raise Strict("request target not in origin-form %r" % start[1][:80])
    else:
        m = re.match(rb"^HTTP/1\.[01] ([1-5][0-9][0-9]) [\t !-~\x80-\xff]*$", first)
        if not m:
            raise Strict("status line %r" % first[:80])
        start = (int(m.group(1)),)
    fields = {}
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise Strict("obs-fold")
        if b":" not in line:
            raise Strict("field line without a colon %r" % line[:80])
        name, value = line.split(b":", 1)
        if not TOKEN.match(name):
            raise Strict("field name %r" % name[:80])
        value = value.strip(b" \t")
        if FIELD_VALUE_BAD.search(value):
            raise Strict("control byte in %r" % name)
        fields.setdefault(name.lower(), []).append(value)
    return start, fields, i + 4


def strict_length(fields, request, method=b"GET", status=200):
    """("chunked"|"length"|"none"|"close", n) for a strictly framed message."""
    te = fields.get(b"transfer-encoding")
    cl = fields.get(b"content-length")
    if te and cl:
        raise Strict("Content-Length beside Transfer-Encoding")
    if not request and (status < 200 or status in (204, 304) or method == b"HEAD"):
        if te and (status < 200 or status == 204):
            raise Strict("Transfer-Encoding on a %d" % status)
        return "none", 0
    if te:
        codings = [c.strip().lower() for c in b",".join(te).split(b",")]
        if any(not TOKEN.match(c) for c in codings):
            raise Strict("Transfer-Encoding %r" % b",".join(te))
        if codings.count(b"chunked") > 1 or (b"chunked" in codings and codings[-1] != b"chunked"):
            raise Strict("Transfer-Encoding %r" % b",".join(te))
        if codings[-1] == b"chunked":
            return "chunked", 0
        if request:
            raise Strict("a request's last coding is not chunked")
        return "close", 0
    if cl:
        if len(cl) != 1 or not re.match(rb"^[0-9]{1,18}$", cl[0]):
            raise Strict("Content-Length %r" % cl)
        return "length", int(cl[0])
    return ("none", 0) if request else ("close", 0)


def strict_chunked(buf, pos):
    """End of a strict chunked body starting at pos, or None if incomplete."""
    while True:
        j = buf.find(b"\r\n", pos)
        if j < 0:
            if len(buf) - pos > 200:
                raise Strict("chunk-size line too long")
            return None
        line = buf[pos:j]
        size, _, ext = line.partition(b";")
        if not HEX.match(size):
            raise Strict("chunk size %r" % line[:40])
        if ext and (b"\r" in ext or b"\n" in ext or FIELD_VALUE_BAD.search(ext)):
            raise Strict("chunk extension %r" % ext[:40])
        n = int(size, 16)
        pos = j + 2
        if n == 0:
            # Trailer section: field lines, then CRLF.
            while True:
                k = buf.find(b"\r\n", pos)
                if k < 0:
                    return None
                line = buf[pos:k]
                if line == b"":
                    return k + 2
                if b"\n" in line or b"\r" in line or line[:1] in (b" ", b"\t") or b":" not in line:
                    raise Strict("trailer line %r" % line[:40])
                if not TOKEN.match(line.split(b":", 1)[0]):
                    raise Strict("trailer name %r" % line[:40])
                pos = k + 2
        if len(buf) < pos + n + 2:
            return None
        if buf[pos + n:pos + n + 2] != b"\r\n":
            raise Strict("chunk data not followed by CRLF")
        pos += n + 2


def strict_messages(buf, request, closed, methods=()):
    """Splits one connection's bytes into strict messages: [(start, fields, raw)], and
    whether a message was left incomplete. Raises Strict on a violation."""
    out = []
    pos = 0
    methods = list(methods)
    finals = 0  # final responses so far: the n-th answers the n-th request's method
    while pos < len(buf):
        h = strict_head(buf[pos:], request)
        if h is None:
            return out, True
        start, fields, end = h
        method = methods[finals] if not request and finals < len(methods) else b"GET"
        if not request and start[0] >= 200:
            finals += 1
        kind, n = strict_length(fields, request, method, 0 if request else start[0])
        body = pos + end
        if kind == "length":
            if len(buf) < body + n:
                return out + [(start, fields, buf[pos:])], True
            stop = body + n
        elif kind == "chunked":
            stop = strict_chunked(buf, body)
            if stop is None:
                return out + [(start, fields, buf[pos:])], True
        elif kind == "close":
            if not closed:
                raise Strict("a close-delimited response on a connection left open")
            stop = len(buf)
        else:
            stop = body
        out.append((start, fields, buf[pos:stop]))
        pos = stop
    return out, False


# --------------------------------------------------------------------------------------
# The recording backend: one per proxy. Answers each request it can frame leniently, with
# the case's raw answer for the targets the case names, else `seen TARGET`.

class Backend:
    def __init__(self):
        self.port = free_port()
        self.lock = threading.Lock()
        self.conns = []           # [bytearray received, closed by the peer?]
        self.answers = {}
        self.last = time.monotonic()  # when bytes last arrived
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(128)
        threading.Thread(target=self.accept, args=(s,), daemon=True).start()

    def accept(self, s):
        while True:
            c, _ = s.accept()
            rec = [bytearray(), False]
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self.serve, args=(c, rec), daemon=True).start()

    def serve(self, c, rec):
        buf = b""
        c.settimeout(30)
        try:
            while True:
                d = c.recv(65536)
                if not d:
                    with self.lock:
                        rec[1] = True
                    return
                with self.lock:
                    rec[0] += d
                    self.last = time.monotonic()
                buf += d
                while True:
                    r = lenient_one(buf)
                    if r is None:
                        break
                    _, target, used = r
                    buf = buf[used:]
                    raw = self.answers.get(target)
                    if raw is None:
                        body = ("seen " + target).encode("latin1")
                        raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    c.sendall(raw.replace(cases.CLOSE, b""))
                    if raw.endswith(cases.CLOSE):
                        c.close()
                        with self.lock:
                            rec[1] = True
                        return
        except OSError:
            with self.lock:
                rec[1] = True
        finally:
            c.close()

    def mark(self):
        """How much each connection has received so far (pooled connections carry on)."""
        with self.lock:
            return [len(b) for b, _ in self.conns]

    def settle(self, quiet=0.25, cap=5.0):
        """Waits until nothing has arrived for `quiet` s (a request the proxy forwards late
        belongs to this case, not the next)."""
        end = time.monotonic() + cap
        while time.monotonic() < end:
            with self.lock:
                idle = time.monotonic() - self.last
            if idle >= quiet:
                return
            time.sleep(quiet - idle)

    def since(self, mark):
        """What each connection received after `mark`, and whether it is closed."""
        with self.lock:
            got = []
            for i, (b, closed) in enumerate(self.conns):
                start = mark[i] if i < len(mark) else 0
                if len(b) > start:
                    got.append((bytes(b[start:]), closed))
            return got


# --------------------------------------------------------------------------------------

def start(tmp, gearlb, haproxy, g_backend, h_backend):
    gport, sport = free_port(), free_port()
    os.makedirs(f"{tmp}/data")
    with open(f"{tmp}/gearlb.toml", "w") as f:
        f.write(f"""[runtime]
threads = 1
[listen]
proxy = "127.0.0.1:{gport}"
status = "127.0.0.1:{sport}"
[control]
socket = "{tmp}/control.sock"
[state]
dir = "{tmp}/data"
[health]
enabled = false
[sticky]
enabled = false
[[backends]]
name = "web1"
addr = "127.0.0.1:{g_backend.port}"
""")
    procs = [subprocess.Popen([gearlb, "run", "--config", f"{tmp}/gearlb.toml"],
                              stdout=open(f"{tmp}/gearlb.log", "w"), stderr=subprocess.STDOUT,
                              env=dict(os.environ, GEARLB_LOG="warn"))]
    ports = {"gearlb": gport}
    if haproxy:
        hport = free_port()
        # The old cartridge's HAProxy settings that bear on parsing (defaults: no
        # accept-invalid-http-*), keep-alive on both sides as in bench/run.sh's haproxy-reuse.
        with open(f"{tmp}/haproxy.cfg", "w") as f:
            f.write(f"""global
    maxconn 1000
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout http-request 10s
    timeout connect 10s
    timeout client 30s
    timeout server 30s
    timeout http-keep-alive 10s
listen express
    bind 127.0.0.1:{hport}
    server web1 127.0.0.1:{h_backend.port}
""")
        procs.append(subprocess.Popen([haproxy, "-db", "-f", f"{tmp}/haproxy.cfg"],
                                      stdout=open(f"{tmp}/haproxy.log", "w"),
                                      stderr=subprocess.STDOUT))
        ports["haproxy"] = hport
    deadline = time.time() + 30
    for who, port in ports.items():
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.time() > deadline or any(p.poll() is not None for p in procs):
                    sys.exit(f"{who} did not start; logs in {tmp}")
                time.sleep(0.05)
    return ports, procs


def exchange(port, sends, idle=0.3, cap=5.0):
    """Sends the parts (with a pause between), reads until EOF or `idle` s of silence."""
    s = socket.create_connection(("127.0.0.1", port))
    out = b""
    closed = False
    try:
        for i, part in enumerate(sends):
            if i:
                # Let the proxy answer the part before the next one goes.
                out += read_some(s, 0.15)
            s.sendall(part)
        end = time.time() + cap
        s.settimeout(idle)
        while time.time() < end:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            out += d
    except socket.timeout:
        pass
    except OSError:
        closed = True
    s.close()
    return out, closed


def read_some(s, wait):
    s.settimeout(wait)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, OSError):
        pass
    return out


def requested_methods(sends):
    return re.findall(rb"(?:^|\r\n\r\n)([A-Z]+) /", b"".join(sends))


def run_case(case, ports, backends):
    res = {}

    def one(who):
        b = backends[who]
        b.answers = dict(case.answers)
        mark = b.mark()
        out, closed = exchange(ports[who], case.sends)
        b.settle()
        # The client has gone: a request it left unfinished must not stay open upstream.
        end = time.monotonic() + 5
        while True:
            got = b.since(mark)
            if time.monotonic() > end or all(c or unfinished(buf) is None for buf, c in got):
                break
            time.sleep(0.05)
        res[who] = (out, closed, got)

    threads = [threading.Thread(target=one, args=(w,)) for w in ports]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res


def split(buf):
    """The targets of the whole requests at the start of buf (absolute-form cut to its
    path), and the start of one left incomplete after them, or None."""
    seen = []
    while buf:
        r = lenient_one(buf)
        if r is None:
            return seen, buf
        seen.append(re.sub(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]*", "", r[1]) or "/")
        buf = buf[r[2]:]
    return seen, None


def unfinished(buf):
    """The start of a request left incomplete at the end of buf, or None."""
    return split(buf)[1]


def targets(conns):
    """The targets of the requests a backend received, `(incomplete)` for one cut short."""
    seen = []
    for buf, _ in conns:
        whole, rest = split(buf)
        seen += whole + (["(incomplete)"] if rest is not None else [])
    return seen


# The HPACK Huffman codes of the ten digits (RFC 7541 Appendix B): enough to read a
# `:status` a server sends Huffman-coded.
HUFFMAN_DIGITS = {"00000": "0", "00001": "1", "00010": "2", "011001": "3", "011010": "4",
                  "011011": "5", "011100": "6", "011101": "7", "011110": "8", "011111": "9"}
# `:status` values in HPACK's static table (RFC 7541 Appendix A).
STATIC_STATUS = {8: "200", 9: "204", 10: "206", 11: "304", 12: "400", 13: "404", 14: "500"}


def h2_status(block):
    """The `:status` at the start of a response's header block, or "?"."""
    if not block:
        return "?"
    b = block[0]
    if b & 0x80:
        return STATIC_STATUS.get(b & 0x7F, "?")
    index = b & (0x3F if b & 0x40 else 0x0F)
    if index not in STATIC_STATUS or len(block) < 2:
        return "?"
    n = block[1] & 0x7F
    value = block[2:2 + n]
    if not block[1] & 0x80:
        return value.decode("latin1")
    bits = "".join(f"{c:08b}" for c in value)
    out, code = "", ""
    for bit in bits:
        code += bit
        if code in HUFFMAN_DIGITS:
            out += HUFFMAN_DIGITS[code]
            code = ""
    return out if len(out) == 3 else "?"


def h2_answers(out):
    """What an HTTP/2 server sent: on stream 1 each header block's status (`?` for one
    without, such as trailers), `RST` for a reset; `GOAWAY`. A frame cut short ends it."""
    seen, pos = [], 0
    while pos + 9 <= len(out):
        n = int.from_bytes(out[pos:pos + 3], "big")
        if pos + 9 + n > len(out):
            break
        kind, stream = out[pos + 3], int.from_bytes(out[pos + 5:pos + 9], "big") & 0x7FFFFFFF
        payload = out[pos + 9:pos + 9 + n]
        if kind == 1 and stream == 1:
            flags = out[pos + 4]
            if flags & 0x8 and payload:  # PADDED
                payload = payload[1:max(1, len(payload) - payload[0])]
            if flags & 0x20:  # PRIORITY
                payload = payload[5:]
            seen.append(h2_status(payload))
        elif kind == 3 and stream == 1:
            seen.append("RST")
        elif kind == 7:
            seen.append("GOAWAY")
        pos += 9 + n
    return seen


def answers(case, out):
    return h2_answers(out) if is_h2(case) else statuses(out)


def is_h2(case):
    return case.sends[0].startswith(cases.H2_PREFACE)


def final_answers(out):
    return [s for s in statuses(out) if not s.startswith("1")]


def statuses(out):
    return [s.decode() for s in re.findall(rb"HTTP/1\.[01] (\d{3})", out)]


def check(case, res):
    findings = []
    g_out, g_closed, g_conns = res["gearlb"]
    for buf, closed in g_conns:
        try:
            _, incomplete = strict_messages(buf, True, closed)
            if incomplete and not closed:
                findings.append("upstream: a message left incomplete on an open connection")
        except Strict as e:
            findings.append(f"upstream: {e}")
    if not is_h2(case):
        # (To an HTTP/2 client, what reaches the backend is what is checked.)
        findings += client_findings(case, g_out, g_closed)
    if "haproxy" in res:
        # A timing scanner's finding: gearlb still waits for bytes where HAProxy has
        # answered or closed.
        h_out, h_closed, _ = res["haproxy"]
        answered = h_closed or final_answers(h_out)
        if answered and not is_h2(case) and not g_closed and not final_answers(g_out):
            if case.name not in WAITS:
                findings.append("client: gearlb waits for more where HAProxy answered")
        h_targets = targets(res["haproxy"][2])
        extra = [t for t in targets(g_conns) if t != "(incomplete)" and t not in h_targets]
        if extra and case.name not in ACCEPTED:
            findings.append(f"haproxy: gearlb forwarded {extra}, HAProxy did not")
    return findings


def client_findings(case, g_out, g_closed):
    """What is wrong with the HTTP/1 bytes gearlb wrote to the client."""
    findings = []
    try:
        msgs, _ = strict_messages(g_out, False, g_closed, requested_methods(case.sends))
        # The backend's second, unasked-for answer must never be a response of its own
        # (inside a close-delimited body passed on as data it is only bytes).
        if any(raw.endswith(b"\r\n\r\nPOISON") for _, _, raw in msgs):
            findings.append("client: the backend's unasked-for response reached the client")
        finals = [m for m in msgs if m[0][0] >= 200]
        # One answer per request sent, or one error answer for bytes that are none.
        if len(finals) > max(1, sum(p.count(b" HTTP/") for p in case.sends)):
            findings.append("client: more responses than requests")
    except Strict as e:
        findings.append(f"client: {e}")
    return findings


def self_test():
    """The checks catch what they are for (run before the cases: a checker that accepts
    everything would pass every case)."""
    ok = [
        (b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", True),
        (b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2;a=b\r\nok\r\n0\r\nt: v\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", False),
        (b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n", False),
    ]
    bad = [
        (b"GET / HTTP/1.1\nhost: x\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nhost: x\r\n y\r\n\r\n", True),
        (b"GET /a#b HTTP/1.1\r\nhost: x\r\n\r\n", True),
        (b"POST / HTTP/1.1\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n", True),
        (b"POST / HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok", True),
        (b"POST / HTTP/1.1\r\ntransfer-encoding: chunked, gzip\r\n\r\n", True),
        (b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n", True),
        (b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokk0\r\n\r\n", True),
        (b"HTTP/1.1 600 X\r\ncontent-length: 0\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nx: a\x00b\r\ncontent-length: 0\r\n\r\n", False),
    ]
    for raw, request in ok:
        strict_messages(raw, request, False)
    for raw, request in bad:
        try:
            strict_messages(raw, request, False)
        except Strict:
            continue
        sys.exit(f"self-test: the strict check accepted {raw!r}")
    if targets([(b"GET http://x/c HTTP/1.1\r\n\r\nGET /d HTTP/1.1\r\n\r\n", False)]) != ["/c", "/d"]:
        sys.exit("self-test: targets")
    # Statuses read out of HTTP/2 header blocks: indexed, literal, Huffman-coded.
    for block, status in [(b"\x88", "200"), (b"\x08\x03502", "502"), (b"\x48\x82\x6c\x02", "502")]:
        if h2_status(block) != status:
            sys.exit(f"self-test: h2_status({block!r})")


def report(case, res, verbose):
    """The case's lines, and whether it has findings."""
    findings = check(case, res)
    line = f"{case.name:28s} gearlb {answers(case, res['gearlb'][0])} -> {targets(res['gearlb'][2])}"
    if "haproxy" in res:
        line += f"  haproxy {answers(case, res['haproxy'][0])} -> {targets(res['haproxy'][2])}"
    lines = [("FAIL " if findings else "ok   ") + line]
    lines += ["     " + f for f in findings]
    if case.name in ACCEPTED and verbose:
        lines.append("     accepted: " + ACCEPTED[case.name])
    if verbose or findings:
        for who, (out, closed, conns) in res.items():
            lines.append(f"     {who} to client{' (closed)' if closed else ''}: {out[:300]!r}")
            for buf, c in conns:
                lines.append(f"     {who} to backend{' (closed)' if c else ''}: {buf[:300]!r}")
    return lines, bool(findings)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gearlb", required=True)
    ap.add_argument("--haproxy")
    ap.add_argument("--lanes", type=int, default=4,
                    help="sets of proxies and backends that run cases side by side")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("only", nargs="*")
    a = ap.parse_args()
    self_test()
    todo = [c for c in cases.ALL if not a.only or any(o in c.name for o in a.only)]
    tmp = tempfile.mkdtemp(prefix="gearlb-diff-")
    lanes, procs = [], []
    try:
        for i in range(max(1, a.lanes)):
            backends = {"gearlb": Backend(), "haproxy": Backend()}
            ports, p = start(f"{tmp}/{i}", a.gearlb, a.haproxy, backends["gearlb"], backends["haproxy"])
            lanes.append((ports, backends))
            procs += p
        results = [None] * len(todo)

        def lane(k):
            ports, backends = lanes[k]
            for n in range(k, len(todo), len(lanes)):
                results[n] = report(todo[n], run_case(todo[n], ports, backends), a.verbose)

        threads = [threading.Thread(target=lane, args=(k,)) for k in range(len(lanes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dead = [p.args[0] for p in procs if p.poll() is not None]
        if dead:
            sys.exit(f"a proxy exited during the run ({dead}); logs in {tmp}")
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    bad = 0
    for n, r in enumerate(results):
        if r is None:
            sys.exit(f"case {todo[n].name} did not run; logs in {tmp}")
        print("\n".join(r[0]))
        bad += r[1]
    print(f"{len(todo)} cases, {bad} with findings")
    if not bad:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
