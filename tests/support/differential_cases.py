"""The cases of tests/support/differential.py: what a client sends (request side) and what
a backend answers (response side). Collected from the request smuggling literature
(CL.TE, TE.CL, TE.TE obfuscations and smuggler.py's permutations; chunk-size,
chunk-extension and trailer tricks; request-line and field-syntax oddities; upgrades
and Expect; timing scanners' payloads; HTTP/2 downgrades) and from response splitting
(two answers to one request, conflicting lengths, 1xx/204/304 with bodies)."""
from collections import namedtuple

Case = namedtuple("Case", "name sends answers")
# An answer ending in CLOSE is sent without it and the backend then closes.
CLOSE = b"#CLOSE"
# A request the client hides behind the first one; it must only ever reach a backend as
# a request of its own, framed the way the client framed it.
S = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
# A request whose body is S.
FRONT = b"POST /front HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(S)
ALL = []


def req(name, data):
    ALL.append(Case(name, data if isinstance(data, list) else [data], {}))


def post(name, hdrs, body):
    req(name, b"POST /c HTTP/1.1\r\nHost: x\r\n" + hdrs + b"\r\n" + body)


# --- CL / TE conflicts and obfuscations -------------------------------------------
post("cl-te", b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + S)
post("te-cl", b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", b"5c\r\n" + S + b"\r\n0\r\n\r\n")
for n, te in [
    ("te-xchunked", b"Transfer-Encoding: xchunked"),
    ("te-leading-space", b"Transfer-Encoding:  chunked"),
    ("te-tab", b"Transfer-Encoding:\tchunked"),
    ("te-space-before-colon", b"Transfer-Encoding : chunked"),
    ("te-chunked-identity", b"Transfer-Encoding: chunked, identity"),
    ("te-identity-chunked", b"Transfer-Encoding: identity, chunked"),
    ("te-gzip-chunked", b"Transfer-Encoding: gzip, chunked"),
    ("te-chunked-gzip", b"Transfer-Encoding: chunked, gzip"),
    ("te-dup", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: x"),
    ("te-dup2", b"Transfer-Encoding: x\r\nTransfer-Encoding: chunked"),
    ("te-dup-chunked", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"),
    ("te-case", b"Transfer-Encoding: cHuNkEd"),
    ("te-quoted", b'Transfer-Encoding: "chunked"'),
    ("te-param", b"Transfer-Encoding: chunked;q=1"),
    ("te-nul", b"Transfer-Encoding: chunked\x00"),
    ("te-vt", b"Transfer-Encoding:\x0bchunked"),
    ("te-ff", b"Transfer-Encoding: chunked\x0c"),
    ("te-underscore", b"Transfer_Encoding: chunked"),
    ("te-obsfold", b"Transfer-Encoding:\r\n chunked"),
    ("te-obsfold2", b"X: y\r\n Transfer-Encoding: chunked"),
    ("te-bare-lf", b"X: y\nTransfer-Encoding: chunked"),
    ("te-bare-cr", b"X: y\rTransfer-Encoding: chunked"),
    ("te-comma-empty", b"Transfer-Encoding: ,chunked"),
    ("te-chunked-comma", b"Transfer-Encoding: chunked,"),
    ("te-empty", b"Transfer-Encoding: "),
    ("te-identity", b"Transfer-Encoding: identity"),
    ("te-trailing-junk", b"Transfer-Encoding: chunked x"),
    ("te-nbsp", b"Transfer-Encoding: \xa0chunked"),
    ("te-name-nul", b"Transfer-Encoding\x00: chunked"),
]:
    post(n + "+cl", te + b"\r\nContent-Length: 5\r\n", b"0\r\n\r\n" + S)
    post(n, te + b"\r\n", b"0\r\n\r\n" + S)
for n, cl in [
    ("cl-dup-same", b"Content-Length: 5\r\nContent-Length: 5"),
    ("cl-dup-diff", b"Content-Length: 5\r\nContent-Length: 0"),
    ("cl-list-same", b"Content-Length: 5, 5"),
    ("cl-list-diff", b"Content-Length: 0, 5"),
    ("cl-plus", b"Content-Length: +5"),
    ("cl-minus", b"Content-Length: -5"),
    ("cl-hex", b"Content-Length: 0x5"),
    ("cl-leading-zero", b"Content-Length: 005"),
    ("cl-space-inside", b"Content-Length: 5 0"),
    ("cl-trailing-junk", b"Content-Length: 5x"),
    ("cl-huge", b"Content-Length: 99999999999999999999999"),
    ("cl-empty", b"Content-Length: "),
    ("cl-space-before-colon", b"Content-Length : 5"),
    ("cl-obsfold", b"Content-Length:\r\n 5"),
    ("cl-tab", b"Content-Length:\t5\t"),
    ("cl-underscore", b"Content_Length: 5"),
    ("cl-decimal", b"Content-Length: 5.0"),
    ("cl-unicode-digit", "Content-Length: \u0665".encode()),
]:
    post(n, cl + b"\r\n", b"hello" + S)

# --- chunk framing ---------------------------------------------------------------
for n, body in [
    ("chunk-hex-prefix", b"0x5\r\nhello\r\n0\r\n\r\n"),
    ("chunk-ext", b"5;a=b\r\nhello\r\n0\r\n\r\n"),
    ("chunk-ext-quoted-crlf", b'5;a="x\r\n0\r\n\r\n' + S + b'"\r\nhello\r\n0\r\n\r\n'),
    ("chunk-space-size", b"5 \r\nhello\r\n0\r\n\r\n"),
    ("chunk-leading-space", b" 5\r\nhello\r\n0\r\n\r\n"),
    ("chunk-overflow", b"FFFFFFFFFFFFFFFF1\r\nhello\r\n0\r\n\r\n"),
    ("chunk-overflow2", b"10000000000000005\r\nhello\r\n0\r\n\r\n"),
    ("chunk-negative", b"-5\r\nhello\r\n0\r\n\r\n"),
    ("chunk-underscore", b"0_5\r\nhello\r\n0\r\n\r\n"),
    ("chunk-bare-lf", b"5\nhello\n0\n\n"),
    ("chunk-bare-lf-end", b"5\r\nhello\n0\r\n\r\n"),
    ("chunk-missing-crlf", b"5\r\nhelloXX0\r\n\r\n"),
    ("chunk-too-long-data", b"3\r\nhello\r\n0\r\n\r\n"),
    ("chunk-last-ext", b"0;x\r\n\r\n"),
    ("chunk-trailer", b"0\r\nX-T: y\r\n\r\n"),
    ("chunk-trailer-te", b"0\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ("chunk-trailer-cl", b"0\r\nContent-Length: 5\r\n\r\nhello"),
    ("chunk-trailer-obsfold", b"0\r\nX: y\r\n z\r\n\r\n"),
    ("chunk-trailer-bare-lf", b"0\r\nX: y\n\r\n"),
    # TERM.TRAIL: a front end that ends lines at LF sees the trailer section end and a
    # request /front carrying S as its body; a decoder that reads on to CRLF CRLF takes
    # /front's head in as trailer lines and S as a request.
    # TERM.EXT / EXT.TERM: a bare LF or CR ending a chunk extension for one parser only.
    ("chunk-ext-bare-lf", b"2;\nxx\r\n0\r\n\r\n"),
    ("chunk-ext-bare-lf-data", b"2;a\nxx\r\n45\r\n0\r\n\r\n"),
    ("chunk-ext-value-lf", b"2;a=b\nc\r\nxx\r\n0\r\n\r\n"),
    ("chunk-trailer-bare-lf-hides", b"0\r\nX: y\n\r\n" + FRONT),
    ("chunk-trailer-lf-end-hides", b"0\r\n\n" + FRONT),
    ("chunk-zero-leading", b"005\r\nhello\r\n0000\r\n\r\n"),
    ("chunk-bare-cr-ext", b"5;a\rb\r\nhello\r\n0\r\n\r\n"),
    ("chunk-ext-space", b"5 ;a=b\r\nhello\r\n0\r\n\r\n"),
    ("chunk-ext-bad-token", b"5;a b\r\nhello\r\n0\r\n\r\n"),
    ("chunk-0-no-final-crlf", b"0\r\n"),
]:
    post(n, b"Transfer-Encoding: chunked\r\n", body + S)

# --- request line ----------------------------------------------------------------
for n, line in [
    ("rl-double-space", b"GET  /c HTTP/1.1"),
    ("rl-trailing-space", b"GET /c HTTP/1.1 "),
    ("rl-tab", b"GET\t/c\tHTTP/1.1"),
    ("rl-http110", b"GET /c HTTP/1.10"),
    ("rl-http12", b"GET /c HTTP/1.2"),
    ("rl-http20", b"GET /c HTTP/2.0"),
    ("rl-http09", b"GET /c HTTP/0.9"),
    ("rl-lower-proto", b"GET /c http/1.1"),
    ("rl-bad-method", b"G(ET /c HTTP/1.1"),
    ("rl-lower-method", b"get /c HTTP/1.1"),
    ("rl-space-target", b"GET /c d HTTP/1.1"),
    ("rl-absolute", b"GET http://x/c HTTP/1.1"),
    ("rl-absolute-other-host", b"GET http://evil/c HTTP/1.1"),
    ("rl-absolute-userinfo", b"GET http://a@x/c HTTP/1.1"),
    ("rl-asterisk-get", b"GET * HTTP/1.1"),
    ("rl-options-asterisk", b"OPTIONS * HTTP/1.1"),
    ("rl-connect", b"CONNECT x:80 HTTP/1.1"),
    ("rl-fragment", b"GET /c#frag HTTP/1.1"),
    ("rl-nul", b"GET /c\x00 HTTP/1.1"),
    ("rl-vt", b"GET /c\x0bHTTP/1.1"),
    ("rl-bare-cr", b"GET /c\r HTTP/1.1"),
    ("rl-no-slash", b"GET c HTTP/1.1"),
    ("rl-high-byte", b"GET /c\xff HTTP/1.1"),
    ("rl-backslash", b"GET /c\\d HTTP/1.1"),
    ("rl-leading-crlf", b"\r\nGET /c HTTP/1.1"),
    ("rl-leading-space", b" GET /c HTTP/1.1"),
    ("rl-no-version", b"GET /c"),
    ("rl-TRACE", b"TRACE /c HTTP/1.1"),
    ("rl-long-method", b"A" * 200 + b" /c HTTP/1.1"),
]:
    req(n, line + b"\r\nHost: x\r\n\r\n" + S)

# --- header syntax ---------------------------------------------------------------
for n, h in [
    ("h-space-before-colon", b"X-A : b"),
    ("h-no-colon", b"X-A b"),
    ("h-bad-name", b"X@A: b"),
    ("h-empty-name", b": b"),
    ("h-nul-value", b"X-A: b\x00c"),
    ("h-cr-value", b"X-A: b\rc"),
    ("h-obsfold", b"X-A: b\r\n c"),
    ("h-leading-ws-first", b" X-A: b"),
    ("h-bare-lf", b"X-A: b\nX-B: c"),
    ("h-del-value", b"X-A: b\x7fc"),
    ("h-high-value", b"X-A: \xe9t\xe9"),
    ("h-name-space", b"X A: b"),
    ("h-name-high", b"X\xe9: b"),
    ("host-dup", b"Host: y"),
    ("host-bad-char", b"Host: a b"),
    ("host-at", b"Host: a@b"),
    ("conn-close-cl", b"Connection: close, Content-Length\r\nContent-Length: 5"),
    ("conn-te", b"Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked"),
    ("conn-host", b"Connection: Host"),
    ("conn-keepalive-cl", b"Connection: keep-alive, content-length\r\nContent-Length: 0"),
    ("expect-unknown", b"Expect: foo"),
    ("expect-100-nobody", b"Expect: 100-continue"),
    ("te-trailers", b"TE: trailers"),
    ("upgrade-h2c", b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__"),
    ("max-forwards", b"Max-Forwards: 0"),
]:
    req(n, b"GET /c HTTP/1.1\r\nHost: x\r\n" + h + b"\r\n\r\n" + S)
req("host-missing-11", b"GET /c HTTP/1.1\r\n\r\n" + S)
req("host-missing-10", b"GET /c HTTP/1.0\r\n\r\n")
req("whole-bare-lf", b"GET /c HTTP/1.1\nHost: x\n\n" + S)
req("get-with-cl-body", b"GET /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)
req("get-with-te-body", b"GET /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + S)
req("head-with-cl-body", b"HEAD /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)
req("http10-te", b"POST /c HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n" + S)
req("http10-te-only", b"POST /c HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + S)
req("post-no-length", b"POST /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("pipelined-two", b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("expect-100-body", [b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", b"hello" + S])
req("ws-upgrade-no-101", [b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", S])
req("ws-upgrade-bad-version", [b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 1337\r\n\r\n", S])
req("huge-header", b"GET /c HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 70000 + b"\r\n\r\n")
req("many-headers", b"GET /c HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(200)) + b"\r\n")
req("null-first", b"\x00GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
req("tls-on-http", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40)
req("h2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

# --- response side: the backend answers GET /r with these bytes ----------------------
# An answer whose length is its connection (a last coding other than chunked) ends with
# CLOSE, as a server's does: else its body never ends and the next request waits.
def resp(name, raw, follow=b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n", method=b"GET"):
    """The backend answers `method` /r with `raw`; the client then sends a second request
    on the same connection, which must get its own answer (`seen /c2`) or none."""
    first = method + b" /r HTTP/1.1\r\nHost: x\r\n\r\n"
    ALL.append(Case(name, [first, follow], {"/r": raw}))


P = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON"
resp("r-ok", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-two-responses", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + P)
resp("r-cl-te", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + P)
resp("r-te-cl-short", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n2\r\nok\r\n0\r\n\r\n" + P)
resp("r-cl-dup-diff", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\nok" + P)
resp("r-cl-list", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok" + P)
resp("r-cl-plus", b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok" + P)
resp("r-cl-bad", b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok" + P)
resp("r-te-xchunked", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + P + CLOSE)
resp("r-te-space-colon", b"HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + P)
resp("r-te-gzip", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nokok" + P + CLOSE)
resp("r-te-chunked-gzip", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n2\r\nok\r\n0\r\n\r\n" + P + CLOSE)
resp("r-te-obsfold", b"HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 2\r\n\r\nok" + P)
resp("r-bare-lf", b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok" + P)
resp("r-bare-lf-te", b"HTTP/1.1 200 OK\r\nX: y\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nok" + P)
resp("r-obsfold", b"HTTP/1.1 200 OK\r\nX: y\r\n z\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-4digit", b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-2digit", b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-noreason", b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-nospace", b"HTTP/1.1 200OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-alpha", b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-099", b"HTTP/1.1 099 X\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-600", b"HTTP/1.1 600 X\r\nContent-Length: 2\r\n\r\nok")
resp("r-http2-line", b"HTTP/2 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-http10", b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-icy", b"ICY 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-100-then-200", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-103-then-200", b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-101-unasked", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + P)
resp("r-204-body", b"HTTP/1.1 204 No Content\r\nContent-Length: 6\r\n\r\n" + b"POISON")
resp("r-204-body-nocl", b"HTTP/1.1 204 No Content\r\n\r\n" + P)
resp("r-304-body", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 6\r\n\r\n" + P)
resp("r-nul-value", b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 2\r\n\r\nok")
resp("r-cr-value", b"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 2\r\n\r\nok")
resp("r-name-space", b"HTTP/1.1 200 OK\r\nX Y: a\r\nContent-Length: 2\r\n\r\nok")
resp("r-space-before-colon", b"HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 2\r\n\r\nok")
resp("r-no-colon", b"HTTP/1.1 200 OK\r\nXY\r\nContent-Length: 2\r\n\r\nok")
resp("r-chunk-overflow", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF1\r\nok\r\n0\r\n\r\n" + P)
resp("r-chunk-bare-lf", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\n0\n\n" + P)
resp("r-chunk-short", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nok\r\n0\r\n\r\n" + P)
resp("r-chunk-trailer-cl", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nContent-Length: 6\r\n\r\nPOISON")
resp("r-no-length-close", b"HTTP/1.1 200 OK\r\n\r\nok" + CLOSE)
resp("r-conn-close-more", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok" + P)
resp("r-conn-hop-cl", b"HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\nok" + P)
resp("r-conn-hop-te", b"HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + P)
resp("r-huge-header", b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000 + b"\r\nContent-Length: 2\r\n\r\nok")
resp("r-set-cookie-crlf", b"HTTP/1.1 200 OK\r\nSet-Cookie: a=b\r\n\rContent-Length: 2\r\n\r\nok")
resp("r-leading-crlf", b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-garbage", b"hello world\r\n\r\n")
resp("r-head-line-only", b"HTTP/1.1 200 OK\r\n\r\n" + CLOSE)
resp("r-head-with-body", b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n" + P, method=b"HEAD")
resp("r-head-chunked-body", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + P, method=b"HEAD")
resp("r-100-with-cl", b"HTTP/1.1 100 Continue\r\nContent-Length: 6\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-many-100", b"HTTP/1.1 100 Continue\r\n\r\n" * 5 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
resp("r-cl-leading-zero", b"HTTP/1.1 200 OK\r\nContent-Length: 002\r\n\r\nok" + P)
resp("r-chunk-ext-crlf", b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a="\r\n"\r\nok\r\n0\r\n\r\n' + P)
resp("r-chunk-hex-prefix", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nok\r\n0\r\n\r\n" + P)
resp("r-short-cl-close", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok" + CLOSE)
resp("r-reason-custom", b"HTTP/1.1 299 Fine\r\nContent-Length: 2\r\n\r\nok")
resp("r-reason-obs-text", b"HTTP/1.1 299 \xe9t\xe9 \xff\r\nContent-Length: 2\r\n\r\nok")
resp("r-status-599", b"HTTP/1.1 599 X\r\nContent-Length: 2\r\n\r\nok")
resp("r-upgrade-asked-101", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nFRAMES",
     follow=b"tunnel bytes", method=b"GET")

req("chunk-many-zeros", b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + b"0" * 40 + b"5\r\nhello\r\n0\r\n\r\n" + S)
req("chunk-long-ext", b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;" + b"a" * 70000 + b"\r\nhello\r\n0\r\n\r\n" + S)
req("cl-short-body-then-close", b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nhello")
req("get-cl-te", b"GET /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + S)
req("expect-cl-te", [b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", b"0\r\n\r\n" + S])
req("ws-upgrade-post-body", [b"POST /c HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 5\r\n\r\nhello", S])
req("te-chunked-http11-space-version", b"POST /c HTTP/1.1 \r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + S)
req("cl-cl-te-mixed-case", b"POST /c HTTP/1.1\r\nHost: x\r\ncontent-length: 5\r\nCONTENT-LENGTH: 6\r\n\r\nhello" + S)

# --- smuggler.py-style mutations of Transfer-Encoding beside a Content-Length ------------
# (defparam/smuggler's "permutations": a byte at each place in the field line, and the
# named variants). Each is sent CL.TE (the length covers the last chunk only) and TE
# alone; the hidden request must only ever reach a backend as a request of its own.
def te_variant(name, line):
    post("sm-" + name + "+cl", line + b"\r\nContent-Length: 5\r\n", b"0\r\n\r\n" + S)
    post("sm-" + name, line + b"\r\n", b"0\r\n\r\n" + S)


for byte in [0x00, 0x01, 0x09, 0x0B, 0x0C, 0x0D, 0x1F, 0x20, 0x7F, 0xA0, 0xFF]:
    b = bytes([byte])
    te_variant("pre-%02x" % byte, b + b"Transfer-Encoding: chunked")
    te_variant("name-%02x" % byte, b"Transfer-Encoding" + b + b": chunked")
    te_variant("colon-%02x" % byte, b"Transfer-Encoding:" + b + b"chunked")
    te_variant("end-%02x" % byte, b"Transfer-Encoding: chunked" + b)
    te_variant("mid-%02x" % byte, b"Transfer-Enc" + b + b"oding: chunked")
for name, line in [
    ("vertwrap", b"Transfer-Encoding:\n\x0bchunked"),
    ("tabwrap", b"Transfer-Encoding:\n\tchunked"),
    ("lf-before-colon", b"Transfer-Encoding\n: chunked"),
    ("upper", b"TRANSFER-ENCODING: CHUNKED"),
    ("aposed", b"Transfer-Encoding: 'chunked'"),
    ("lazy", b"Transfer-Encoding: chunk"),
    ("cow-then-chunked", b"Transfer-Encoding: cow\r\nTransfer-Encoding: chunked"),
    ("chunked-then-cow", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: cow"),
    ("nested", b"Transfer-Encoding: cow chunked bar"),
    ("spjunk", b"Transfer-Encoding x: chunked"),
    ("backslash", b"Transfer\\Encoding: chunked"),
    ("comma-cow", b"Transfer-Encoding: chunked, cow"),
    ("cow-comma", b"Transfer-Encoding: cow, chunked"),
    ("double-colon", b"Transfer-Encoding:: chunked"),
    ("no-space", b"Transfer-Encoding:chunked"),
    ("long-ws", b"Transfer-Encoding:" + b" " * 300 + b"chunked"),
    ("x-prefix", b"X-Transfer-Encoding: chunked"),
    ("content-encoding", b"Content-Encoding: chunked"),
    ("cr-in-name", b"Tra\rnsfer-Encoding: chunked"),
]:
    te_variant(name, line)
for name, line in [
    ("cl-name-vt", b"Content-Length\x0b: 5"),
    ("cl-value-vt", b"Content-Length: \x0b5"),
    ("cl-value-nul", b"Content-Length: 5\x00"),
    ("cl-value-cr", b"Content-Length: 5\r"),
    ("cl-upper", b"CONTENT-LENGTH: 5"),
    ("cl-then-cl-obsfold", b"Content-Length: 5\r\n 0"),
]:
    post("sm-" + name, line + b"\r\n", b"hello" + S)

# --- more answers ---------------------------------------------------------------------
resp("r-many-fields", b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(150)) + b"Content-Length: 2\r\n\r\nok")
resp("r-long-reason", b"HTTP/1.1 200 " + b"R" * 9000 + b"\r\nContent-Length: 2\r\n\r\nok")
resp("r-cl0-with-body", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" + P)
resp("r-http10-keepalive", b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok")
resp("r-http10-close-delimited", b"HTTP/1.0 200 OK\r\n\r\nok" + CLOSE)
resp("r-head-end-bare-lf", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok" + P)
resp("r-te-identity", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nok" + P + CLOSE)
resp("r-te-empty", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\nContent-Length: 2\r\n\r\nok" + P + CLOSE)
resp("r-cl-negative", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nok" + P)
resp("r-304-chunked", b"HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n" + P)
resp("r-1xx-with-te", b"HTTP/1.1 103 Early Hints\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
ALL.append(Case("r-early-answer-to-post",
                [b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello",
                 b"world" + b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n"],
                {"/r": b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" + CLOSE}))

# ======================================================================================
# A second pass through the literature: funky chunks (Weikop), trailers with framing
# fields, Expect and HTTP/1.0 keep-alive with bodies, Content-Length spellings,
# absolute-form, byte path <-> hyper pipelining and parking, split heads, control and
# non-ASCII bytes, upgrades with bodies, odd methods, empty lines.
TE = b"Transfer-Encoding: chunked\r\n"
GET = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
PAUSE = [b""] * 8  # about 1.2 s of silence between parts: long enough for a park

# --- funky chunks: terminators, spills, sizes, extensions (Weikop) ---------------------
for n, body in [
    ("fc-spill-two", b"5\r\nhelloXX\r\n0\r\n\r\n"),
    ("fc-spill-hides", b"2\r\nxxAA\r\n0\r\n\r\n" + FRONT),
    ("fc-term-cr-only", b"5\r\nhello\r0\r\n\r\n"),
    ("fc-term-lf-only-hides", b"2\r\nxx\n23\r\n" + b"0\r\n\r\n" + FRONT),
    ("fc-term-any-two", b"2\r\nxxAB2\r\nxx\r\n0\r\n\r\n"),
    ("fc-size-plus", b"+5\r\nhello\r\n0\r\n\r\n"),
    ("fc-size-tab-after", b"5\t\r\nhello\r\n0\r\n\r\n"),
    ("fc-size-tab-before", b"\t5\r\nhello\r\n0\r\n\r\n"),
    ("fc-size-16-digits", b"0000000000000005\r\nhello\r\n0\r\n\r\n"),
    ("fc-size-u64max", b"ffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
    ("fc-size-nul", b"5\x00\r\nhello\r\n0\r\n\r\n"),
    ("fc-size-ff", b"5\x0c\r\nhello\r\n0\r\n\r\n"),
    ("fc-ext-nul", b"5;a=\x00\r\nhello\r\n0\r\n\r\n"),
    ("fc-ext-quoted-lf", b'5;a="\n"\r\nhello\r\n0\r\n\r\n'),
    ("fc-ext-many", b"5" + b";a" * 5000 + b"\r\nhello\r\n0\r\n\r\n"),
    ("fc-ext-bare-cr-end", b"2;\rxx\r\n0\r\n\r\n"),
    ("fc-last-size-lf", b"0\n\r\n"),
    ("fc-last-ext-lf-hides", b"0;\n\r\n" + FRONT),
    ("fc-last-double-zero", b"00\r\n\r\n"),
    # Trailer sections: a request line, framing and routing fields, bad bytes.
    ("fc-trailer-request-line", b"0\r\n"),  # S itself is the trailer section
    ("fc-trailer-host", b"0\r\nHost: evil\r\n\r\n"),
    ("fc-trailer-conn-close", b"0\r\nConnection: close\r\n\r\n"),
    ("fc-trailer-te-cl", b"0\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n"),
    ("fc-trailer-nul", b"0\r\nX: a\x00b\r\n\r\n"),
    ("fc-trailer-bare-cr", b"0\r\nX: a\rb\r\n\r\n"),
    ("fc-trailer-no-colon", b"0\r\nXY\r\n\r\n"),
    ("fc-trailer-name-space", b"0\r\nX Y: z\r\n\r\n"),
    ("fc-trailer-many-lf", b"0\r\nA: 1\nB: 2\nC: 3\r\n\r\n"),
    ("fc-trailer-lf-lf-hides", b"0\r\nX: y\n\n" + FRONT),
    ("fc-trailer-cr-crlf", b"0\r\n\r\r\n\r\n"),
]:
    post(n, TE, body + S)

# --- Content-Length spellings ----------------------------------------------------------
for n, cl in [
    ("cl2-trailing-space", b"Content-Length: 5 "),
    ("cl2-no-space", b"Content-Length:5"),
    ("cl2-zeros-22", b"Content-Length: 0000000000000000000005"),
    ("cl2-u64max", b"Content-Length: 18446744073709551615"),
    ("cl2-2pow64", b"Content-Length: 18446744073709551616"),
    ("cl2-list-nospace", b"Content-Length: 5,5"),
    ("cl2-list-trailing-comma", b"Content-Length: 5,"),
    ("cl2-list-leading-comma", b"Content-Length: ,5"),
    ("cl2-list-empty-mid", b"Content-Length: 5,,5"),
    ("cl2-minus-zero", b"Content-Length: -0"),
    ("cl2-exponent", b"Content-Length: 5e0"),
    ("cl2-nbsp", b"Content-Length: \xa05"),
    ("cl2-dup-lines-one-empty", b"Content-Length: 5\r\nContent-Length: "),
]:
    post(n, cl + b"\r\n", b"hello" + S)

# --- Expect: 100-continue with bodies, HTTP/1.0, pipelining ----------------------------
EXP = b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
req("exp-chunked", [EXP + TE + b"\r\n", b"5\r\nhello\r\n0\r\n\r\n" + S])
req("exp-one-packet", EXP + b"Content-Length: 5\r\n\r\nhello" + S)
req("exp-chunked-trailer-lf-hides", [EXP + TE + b"\r\n", b"0\r\nX: y\n\r\n" + FRONT + S])
req("exp-http10", b"POST /c HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello" + S)
req("exp-case", [b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n", b"hello" + S])
req("exp-list", [b"POST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue, foo\r\nContent-Length: 5\r\n\r\n", b"hello" + S])
req("exp-get-cl0", b"GET /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n" + S)
req("exp-body-never-sent", [EXP + b"Content-Length: %d\r\n\r\n" % len(S)] + PAUSE + [S])

# --- HTTP/1.0 keep-alive with bodies -----------------------------------------------------
H10 = b"POST /c HTTP/1.0\r\nHost: x\r\n"
req("h10-ka-cl-body", H10 + b"Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello" + S)
req("h10-close-cl-body", H10 + b"Content-Length: 5\r\n\r\nhello" + S)
req("h10-ka-no-length", H10 + b"Connection: keep-alive\r\n\r\n" + S)
req("h10-ka-get", b"GET /c HTTP/1.0\r\nHost: x\r\nConnection: Keep-Alive\r\n\r\n" + S)
req("h10-ka-no-host", b"GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + S)
req("h10-ka-cl-te-dup", H10 + b"Connection: keep-alive\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello" + S)

# --- absolute-form -------------------------------------------------------------------------
for n, line, host in [
    ("abs-port", b"GET http://x:80/c HTTP/1.1", b"Host: x:80\r\n"),
    ("abs-port-host-no-port", b"GET http://x:80/c HTTP/1.1", b"Host: x\r\n"),
    ("abs-https", b"GET https://x/c HTTP/1.1", b"Host: x\r\n"),
    ("abs-upper-scheme", b"GET HTTP://X/c HTTP/1.1", b"Host: x\r\n"),
    ("abs-no-path", b"GET http://x HTTP/1.1", b"Host: x\r\n"),
    ("abs-query-only", b"GET http://x?a=b HTTP/1.1", b"Host: x\r\n"),
    ("abs-no-host-header", b"GET http://x/c HTTP/1.1", b""),
    ("abs-ftp", b"GET ftp://x/c HTTP/1.1", b"Host: x\r\n"),
    ("abs-empty-authority", b"GET http:///c HTTP/1.1", b"Host: x\r\n"),
    ("abs-double-slash", b"GET //evil/c HTTP/1.1", b"Host: x\r\n"),
    ("abs-path-crlf-encoded", b"GET http://x/c%0d%0aX:y HTTP/1.1", b"Host: x\r\n"),
]:
    req(n, line + b"\r\n" + host + b"\r\n" + S)
req("abs-post-body", b"POST http://x/c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)

# --- pipelining across the byte path and hyper, and parking --------------------------------
req("pipe-get-post-cl", GET + b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)
req("pipe-post-get", b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + GET + S)
req("pipe-get-trailer-lf-hides", GET + b"POST /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n0\r\nX: y\n\r\n" + FRONT + S)
req("pipe-get-h10-post", GET + H10 + b"Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello" + S)
req("pipe-get-split-into-te", [GET + b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Enc",
                               b"oding: chunked\r\n\r\n0\r\n\r\n" + S])
req("pipe-ten-gets", GET * 10 + S)
req("park-after-post", [b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"] + PAUSE + [GET + S])
req("park-after-h10", [b"GET /c HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"] + PAUSE +
    [b"POST /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n0\r\nX: y\n\r\n" + FRONT + S])
req("park-after-expect", [EXP + b"Content-Length: 5\r\n\r\n", b"hello"] + PAUSE + [GET + S])
req("park-mid-head", [b"GET /c HTTP/1.1\r\nHost: x\r\n"] + PAUSE + [b"\r\n" + S])
req("park-after-chunked", [b"POST /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n5\r\nhello\r\n0\r\n\r\n"] + PAUSE + [GET + S])
req("park-lf-lf-partial", [b"GET /c HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", b"\n\n"] + PAUSE +
    [b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S])

# --- heads split awkwardly -------------------------------------------------------------------
req("split-cr-lf", [b"GET /c HTTP/1.1\r\nHost: x\r", b"\n\r\n" + S])
req("split-cl-digits", [b"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1", b"0\r\n\r\nhello12345" + S])
req("split-te-name", [b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Enc", b"oding: chunked\r\n\r\n0\r\n\r\n" + S])
req("split-bare-lf-end", [b"GET /c HTTP/1.1\nHost: x\n", b"\n" + S])
req("split-bytewise", [bytes([b]) for b in b"POST /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n0\r\nX: y\n\r\n"] + [FRONT + S])
req("split-chunk-size", [b"POST /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n1", b"0\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n" + S])

# --- control and non-ASCII bytes ------------------------------------------------------------
for n, h in [
    ("ctl-name-del", b"X\x7fA: b"),
    ("ctl-name-nul", b"X\x00A: b"),
    ("ctl-value-cr-before-crlf", b"X-A: b\r"),
    ("ctl-value-esc", b"X-A: b\x1bc"),
    ("ctl-host-utf8", b"X-B: c\r\nHost: \xc3\xa9"),
    ("ctl-value-lone-cr-te", b"X-A: b\r Transfer-Encoding: chunked"),
]:
    req(n, b"GET /c HTTP/1.1\r\nHost: x\r\n" + h + b"\r\n\r\n" + S)
for n, t in [
    ("ctl-target-del", b"/c\x7f"),
    ("ctl-target-soh", b"/c\x01"),
    ("ctl-target-utf8", b"/c\xc3\xa9"),
    ("ctl-query-utf8", b"/c?\xc3\xa9"),
    ("ctl-target-quote-brace", b'/c"{}'),
    ("ctl-target-lt-gt", b"/c<x>"),
]:
    req(n, b"GET " + t + b" HTTP/1.1\r\nHost: x\r\n\r\n" + S)

# --- upgrades with bodies, and answers that are or are not a switch --------------------------
WS = b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
req("upg-ws-chunked-body", b"GET /c HTTP/1.1\r\nHost: x\r\n" + WS + TE + b"\r\n0\r\n\r\n" + S)
req("upg-h10", b"GET /c HTTP/1.0\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n" + S)
SW = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
ALL.append(Case("upg-101-after-body", [b"POST /u HTTP/1.1\r\nHost: x\r\n" + WS + b"Content-Length: 5\r\n\r\nhello", S], {"/u": SW}))
ALL.append(Case("upg-101-no-upgrade-field", [b"GET /u HTTP/1.1\r\nHost: x\r\n" + WS + b"\r\n", S],
                {"/u": b"HTTP/1.1 101 Switching Protocols\r\n\r\n"}))
ALL.append(Case("upg-101-other-protocol", [b"GET /u HTTP/1.1\r\nHost: x\r\n" + WS + b"\r\n", S],
                {"/u": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"}))
ALL.append(Case("upg-101-without-connection-upgrade", [b"GET /u HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n", S], {"/u": SW}))
ALL.append(Case("upg-426-then-more", [b"GET /u HTTP/1.1\r\nHost: x\r\n" + WS + b"\r\n", S],
                {"/u": b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n"}))

# --- methods with odd tokens --------------------------------------------------------------
for n, m in [
    ("m-bang", b"GET!"), ("m-msearch", b"M-SEARCH"), ("m-hash", b"#"), ("m-obs-text", b"G\xc3\xa9T"),
    ("m-pri-not-h2", b"PRI"), ("m-del-byte", b"GE\x7fT"),
]:
    req(n, m + b" /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("m-connect-cl-body", b"CONNECT x:80 HTTP/1.1\r\nHost: x:80\r\nContent-Length: %d\r\n\r\n" % len(S) + S)
req("m-connect-te-body", b"CONNECT x:80 HTTP/1.1\r\nHost: x:80\r\n" + TE + b"\r\n0\r\n\r\n" + S)
req("m-options-star-te", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n0\r\nX: y\n\r\n" + FRONT + S)
req("m-head-te-body", b"HEAD /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n0\r\n\r\n" + S)

# --- empty lines ---------------------------------------------------------------------------
req("empty-1000-crlf", b"\r\n" * 1000 + b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("empty-20000-crlf", b"\r\n" * 20000 + b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("empty-1000-lf", b"\n" * 1000 + b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("empty-between-pipelined", GET + b"\r\n" * 10 + S)
req("empty-space-line", b"\r\n \r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("empty-before-post-hides", b"\r\n\r\nPOST /c HTTP/1.1\r\nHost: x\r\n" + TE + b"\r\n0\r\nX: y\n\r\n" + FRONT + S)


# --- answers with funky chunks --------------------------------------------------------------
CH = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
resp("r-fc-ext-bare-cr", CH + b"2;a\rb\r\nok\r\n0\r\n\r\n" + P)
resp("r-fc-data-lf-term", CH + b"2\r\nok\n0\r\n\r\n" + P)
resp("r-fc-spill", CH + b"2\r\nokXX\r\n0\r\n\r\n" + P)
resp("r-fc-trailer-bare-lf", CH + b"2\r\nok\r\n0\r\nX: y\n\r\n" + P)
resp("r-fc-trailer-cr-crlf", CH + b"2\r\nok\r\n0\r\n\r\r\n" + P)
resp("r-fc-size-16-digits", CH + b"0000000000000002\r\nok\r\n0\r\n\r\n" + P)
resp("r-fc-size-ws-ff", CH + b"2\x0c\r\nok\r\n0\r\n\r\n" + P)
resp("r-fc-last-ext-cr", CH + b"2\r\nok\r\n0;\r\r\n\r\n" + P)
# upg-h10 with a backend that does switch; absolute-form targets with a query and no
# path; a non-ASCII target on hyper's path.
ALL.append(Case("upg-h10-101", [b"GET /u HTTP/1.0\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n", S], {"/u": SW}))
ALL.append(Case("upg-h10-101-no-ka", [b"GET /u HTTP/1.0\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", S], {"/u": SW}))
req("abs-empty-query", b"GET http://x? HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("abs-query-post", b"POST http://x?a=b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)
req("ctl-target-utf8-post", b"POST /c\xc3\xa9 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)

# --- refusals with Expect: 100-continue, and HTTP/1.0 clients of chunked or unframed answers --
req("exp-refused-body-later", [b"POST http://evil/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(S), S])
req("exp-refused-body-with-head", b"POST http://evil/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(S) + S + S)
req("exp-refused-chunked-later", [b"POST http://evil/c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n" + TE + b"\r\n", b"0\r\n\r\n" + S])
req("refused-cl-body-then-s", b"POST http://evil/c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + S)
H10GET = b"GET /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
ALL.append(Case("r-h10-client-close-delimited", [H10GET, b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n"], {"/r": b"HTTP/1.1 200 OK\r\n\r\nok" + CLOSE}))
ALL.append(Case("r-h10-client-chunked", [H10GET, b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n"], {"/r": CH + b"2\r\nok\r\n0\r\n\r\n"}))
ALL.append(Case("r-h10-client-chunked-trailers", [H10GET, b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n"], {"/r": CH + b"2\r\nok\r\n0\r\nX: y\r\n\r\n"}))
ALL.append(Case("r-h10-client-101", [b"GET /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", S], {"/r": SW}))
ALL.append(Case("r-h10-client-100-then-200", [H10GET, b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n"], {"/r": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}))
# Origin-form without its path; authority-form on other methods than CONNECT.
req("rl-query-only-target", b"GET ?a=b HTTP/1.1\r\nHost: x\r\n\r\n" + S)
req("rl-authority-form-get", b"GET x:80 HTTP/1.1\r\nHost: x:80\r\n\r\n" + S)
req("rl-authority-form-post", b"POST x:80 HTTP/1.1\r\nHost: x:80\r\nContent-Length: 5\r\n\r\nhello" + S)
req("abs-options-no-path", b"OPTIONS http://x HTTP/1.1\r\nHost: x\r\n\r\n" + S)


# rx-: a third pass over the response side (what a gear answers and what reaches the
# client): status-line and field spellings, Content-Length / Transfer-Encoding on the
# response, bodiless answers carrying framing, interim responses, chunk edge cases with
# the gear closing mid-body, and tails after a complete answer on pipelined connections.
C2 = b"GET /c2 HTTP/1.1\r\nHost: x\r\n\r\n"
R = b"GET /r HTTP/1.1\r\nHost: x\r\n\r\n"
OK2 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
PCH = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nPOISON\r\n0\r\n\r\n"


def rx(name, raw, method=b"GET"):
    resp("rx-" + name, raw, method=method)


def rx_case(name, sends, answers):
    ALL.append(Case("rx-" + name, sends, answers))


# --- status lines ----------------------------------------------------------------------
for n, line in [
    ("sl-tab-sep", b"HTTP/1.1\t200\tOK"),
    ("sl-double-space", b"HTTP/1.1  200 OK"),
    ("sl-lower-proto", b"http/1.1 200 OK"),
    ("sl-leading-zero-ver", b"HTTP/01.1 200 OK"),
    ("sl-http12", b"HTTP/1.2 200 OK"),
    ("sl-leading-space", b" HTTP/1.1 200 OK"),
    ("sl-status-leading-zero", b"HTTP/1.1 0200 OK"),
    ("sl-reason-del", b"HTTP/1.1 299 a\x7fb"),
    ("sl-reason-esc", b"HTTP/1.1 299 \x1b[31mred"),
    ("sl-reason-http", b"HTTP/1.1 299 HTTP/1.1 200 OK"),
]:
    rx(n, line + b"\r\nContent-Length: 2\r\n\r\nok" + P)
rx("sl-leading-lf", b"\n\n" + OK2 + P)
rx("sl-many-leading-crlf", b"\r\n" * 200 + OK2 + P)

# --- Content-Length spellings on an answer (P follows the body) ----------------------------
for n, cl in [
    ("cl-dup-same", b"Content-Length: 2\r\nContent-Length: 2"),
    ("cl-dup-zero", b"Content-Length: 2\r\nContent-Length: 0"),
    ("cl-list-diff", b"Content-Length: 2, 8"),
    ("cl-list-trailing-comma", b"Content-Length: 2,"),
    ("cl-19-digits", b"Content-Length: 0000000000000000002"),
    ("cl-20-digits", b"Content-Length: 00000000000000000002"),
    ("cl-obsfold", b"Content-Length:\r\n 2"),
]:
    rx(n, b"HTTP/1.1 200 OK\r\n" + cl + b"\r\n\r\nok" + P)
# A length a signed 64-bit reader overflows on (9.99e18 > 2^63-1); the gear then closes.
rx("cl-i64-overflow", b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\nok" + CLOSE)
rx("cl-u64-overflow", b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551617\r\n\r\nok" + P)

# --- Transfer-Encoding spellings on an answer ---------------------------------------------
CHB = b"2\r\nok\r\n0\r\n\r\n"
for n, te, tail in [
    ("te-trailing-comma", b"Transfer-Encoding: chunked,", P),
    ("te-leading-comma", b"Transfer-Encoding: ,chunked", P),
    ("te-second-empty", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: ", P),
    ("te-split-gzip-chunked", b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked", P),
    ("te-quoted", b'Transfer-Encoding: "chunked"', P + CLOSE),
    ("te-obs-text", b"Transfer-Encoding: chunked\xff", P + CLOSE),
    ("te-space-in-coding", b"Transfer-Encoding: gzip x, chunked", P),
    ("te-bad-param", b"Transfer-Encoding: gzip;=, chunked", P),
    ("te-dup-lines-chunked", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", P),
    ("te-cl-zero", b"Content-Length: 0\r\nTransfer-Encoding: chunked", P),
    ("te-gzip-chunked", b"Transfer-Encoding: gzip, chunked", P),
]:
    rx(n, b"HTTP/1.1 200 OK\r\n" + te + b"\r\n\r\n" + CHB + tail)
rx("te-http10", b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + CHB + P)

# --- Connection, Keep-Alive, hop-by-hop -----------------------------------------------------
for n, h in [
    ("conn-close-semicolon", b"Connection: close;"),
    ("conn-names-date", b"Connection: Date\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT"),
    ("conn-upgrade-on-200", b"Connection: Upgrade\r\nUpgrade: websocket"),
    ("set-cookie-obs-text", b"Set-Cookie: a=\xe9\xff; Path=/"),
    ("field-del-value", b"X: a\x7fb"),
    ("field-esc-value", b"X: \x1b[2J"),
    ("field-obs-text", b"X: \xff\xfe\x80"),
    ("field-long-name", b"X" * 8000 + b": a"),
    ("obsfold-set-cookie", b"Set-Cookie: a=b\r\n c=d"),
]:
    rx(n, b"HTTP/1.1 200 OK\r\n" + h + b"\r\nContent-Length: 2\r\n\r\nok" + P)
rx("ws-before-first-field", b"HTTP/1.1 200 OK\r\n X: y\r\nContent-Length: 2\r\n\r\nok" + P)
rx("h10-ka-no-length", b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nok" + P + CLOSE)
rx("head-300k", b"HTTP/1.1 200 OK\r\nX: " + b"a" * 300000 + b"\r\nContent-Length: 2\r\n\r\nok")

# --- chunked bodies -----------------------------------------------------------------------
for n, body, tail in [
    ("ch-size-trailing-sp", b"2 \r\nok\r\n0\r\n\r\n", P),
    ("ch-ext-long", b"2;" + b"a" * 5000 + b"\r\nok\r\n0\r\n\r\n", P),
    ("ch-second-too-long", b"2\r\nok\r\n2\r\nokXX\r\n0\r\n\r\n", P),
    ("ch-second-too-short", b"2\r\nok\r\n4\r\nok\r\n0\r\n\r\n", P),
    ("ch-no-last-chunk-close", b"2\r\nok\r\n", CLOSE),
    ("ch-close-in-trailers", b"2\r\nok\r\n0\r\nX: y\r\n", CLOSE),
    ("ch-size-nul", b"2\x00\r\nok\r\n0\r\n\r\n", P),
    ("ch-lf-after-last", b"2\r\nok\r\n0\r\n\n", P),
    ("ch-then-chunked-poison", b"2\r\nok\r\n0\r\n\r\n", PCH),
    ("ch-trailer-obsfold", b"2\r\nok\r\n0\r\nX-T: a\r\n b\r\n\r\n", P),
    ("ch-trailer-no-colon", b"2\r\nok\r\n0\r\nXT\r\n\r\n", P),
    ("ch-trailer-response-line", b"2\r\nok\r\n0\r\nHTTP/1.1 200 OK\r\n\r\n", P),
]:
    rx(n, CH + body + tail)
for n, tr in [
    ("ch-trailer-declared", b"X-T: v"),
    ("ch-trailer-declared-cl", b"Content-Length: 6"),
]:
    name = tr.split(b":")[0]
    rx(n, b"HTTP/1.1 200 OK\r\nTrailer: " + name + b"\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n" + tr + b"\r\n\r\n" + P)

# --- bodiless answers with framing fields ------------------------------------------------
rx("head-cl-bad", b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n" + P, method=b"HEAD")
rx("head-cl-conflict", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\n" + P, method=b"HEAD")
rx("head-cl-list-diff", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 8\r\n\r\n" + P, method=b"HEAD")
rx("head-te-cl", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + P, method=b"HEAD")
rx("head-te-bad", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n" + P, method=b"HEAD")
rx("304-cl-conflict", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\n" + P)
rx("204-te-chunked-body", b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n" + CHB + P)
rx("204-cl-bad", b"HTTP/1.1 204 No Content\r\nContent-Length: abc\r\n\r\n" + P)
rx_case("head-h10-cl-bad", [b"HEAD /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", C2],
        {"/r": b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n" + P})
rx_case("head-h10-cl-conflict", [b"HEAD /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", C2],
        {"/r": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\n" + P})

# --- interim responses --------------------------------------------------------------------
EH = b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n"
rx("103-cl", EH + b"Content-Length: 6\r\n\r\n" + OK2)
rx("103-body-then-200", EH + b"\r\nPOISON" + OK2)
rx("199-then-200", b"HTTP/1.1 199 Whatever\r\nX: y\r\n\r\n" + OK2)
rx("103-x40", (EH + b"\r\n") * 40 + OK2)
rx("103-obsfold", EH + b"X: a\r\n b\r\n\r\n" + OK2)
rx("103-then-101", EH + b"\r\n" + b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + P)
rx("1xx-after-final", OK2 + EH + b"\r\n")
rx_case("103-h10-client", [b"GET /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", C2],
        {"/r": EH + b"\r\n" + OK2})
rx_case("expect-100-then-200-tail",
        [b"POST /r HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", b"hello", C2],
        {"/r": b"HTTP/1.1 100 Continue\r\n\r\n" + OK2 + P})
rx_case("expect-103-then-200",
        [b"POST /r HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", b"hello", C2],
        {"/r": EH + b"\r\n" + OK2})

# --- pipelined client requests (one write): the first answer carries a tail ---------------
for n, ans in [
    ("pipe-two-in-one-write", OK2 + P),
    ("pipe-chunked-tail-chunked", CH + CHB + PCH),
    ("pipe-short-chunk", CH + b"1\r\nok\r\n0\r\n\r\n" + P),
    ("pipe-304-tail", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 6\r\n\r\n" + P),
    ("pipe-103-tail", EH + b"\r\n" + OK2 + P),
    ("pipe-te-cl-tail", b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n" + CHB + P),
]:
    rx_case(n, [R + C2], {"/r": ans})
rx_case("pipe-head-tail", [b"HEAD /r HTTP/1.1\r\nHost: x\r\n\r\n" + C2],
        {"/r": b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n" + P})
rx_case("pipe-three", [R + R + C2], {"/r": OK2 + P})
rx_case("pipe-h10-client", [b"GET /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n" + C2], {"/r": OK2 + P})
rx_case("pipe-post-then-get", [b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + C2], {"/r": OK2 + P})
rx_case("post-chunk-cut", [b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", C2],
        {"/r": CH + b"2\r\nok\r\n" + CLOSE})
rx_case("close-no-answer", [R, C2], {"/r": CLOSE})
rx_case("101-with-cl-asked",
        [b"GET /r HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", b"tunnel"],
        {"/r": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 6\r\n\r\nPOISON"})
# The same bodiless answers on hyper's path (an HTTP/1.0 client, or a request with a body).
H10R = b"GET /r HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
rx_case("head-body-cl-conflict", [b"HEAD /r HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx", C2],
        {"/r": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\n" + P})
rx_case("304-h10-cl-conflict", [H10R, C2],
        {"/r": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\nContent-Length: 8\r\n\r\n" + P})
rx_case("204-h10-cl-bad", [H10R, C2], {"/r": b"HTTP/1.1 204 No Content\r\nContent-Length: abc\r\n\r\n" + P})
rx_case("103-cl-post", [b"POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", C2],
        {"/r": EH + b"Content-Length: 6\r\n\r\n" + OK2})
rx("te-trailing-comma-close", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n" + CHB + P + CLOSE)
rx_case("te-trailing-comma-h10-client", [H10R, C2],
        {"/r": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n" + CHB + P + CLOSE})
rx_case("pipe-te-trailing-comma", [R + C2], {"/r": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, \r\n\r\n" + CHB + P})
rx("103-cl-conflict", EH + b"Content-Length: 2\r\nContent-Length: 8\r\n\r\n" + OK2)

# ======================================================================================
# Timing scanners (smugchunks, Burp's chunk-extension scan) send these and call a
# timeout a finding: the four funky-chunks shapes, each with every ambiguous terminator.
SCAN_TAIL = b"0\r\n\r\n"
for shape, template, terms in [
    ("term-ext", b"2;{t}XX\r\n10\r\n1f\r\nAAAABBBBCCCC\r\n0\r\n\r\nDDDDEEEEFFFF\r\n" + SCAN_TAIL,
     [b"\n", b"\r", b"\rX", b"\r\r"]),
    ("ext-term", b"2;{t}XX\r\n22\r\nc\r\nAAAABBBBCCCC\r\n0\r\n\r\nDDDDEEEEFFFF\r\n" + SCAN_TAIL,
     [b"\n", b"\r", b"\rX", b"\r\r"]),
    ("term-spill", b"5\r\nAAAAA{t}c\r\n17\r\nAAAABBBB\r\n0\r\n\r\nCCCCDDDD\r\n" + SCAN_TAIL,
     [b"\n", b"\r", b"", b"XX", b"\rX", b"\r\r"]),
    ("spill-term", b"5\r\nAAAAA{t}1a\r\n8\r\nAAAABBBB\r\n0\r\n\r\nCCCCDDDD\r\n" + SCAN_TAIL,
     [b"\n", b"\r", b"", b"XX", b"\rX", b"\r\r"]),
]:
    for t in terms:
        label = t.replace(b"\r", b"cr").replace(b"\n", b"lf").decode() or "none"
        post(f"scan-{shape}-{label}", TE, template.replace(b"{t}", t))
# Oversized chunk sizes: a parser that takes them waits for bytes that never come.
for n, size in [("scan-size-2pow63", b"8000000000000000"), ("scan-size-2pow56", b"100000000000000"),
                ("scan-size-2pow40", b"10000000000"), ("scan-size-17-digits", b"fffffffffffffffff")]:
    post(n, TE, size + b"\r\nhello\r\n0\r\n\r\n")

# ======================================================================================
# HTTP/2 downgrades (Kettle, "HTTP/2: the sequel is always worse"): an HTTP/2 client's
# request (prior knowledge, cleartext) that a balancer writes as HTTP/1.1 for its backend.
# Framing fields, CR/LF/NUL and spaces smuggled in names, values and pseudo-headers. The
# frames are built by hand (literal HPACK fields, never Huffman, never indexed), so that
# bytes no HTTP/2 library would send can be sent.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_int(n, bits, first=0):
    top = (1 << bits) - 1
    if n < top:
        return bytes([first | n])
    out = [first | top]
    n -= top
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes(out + [n])


def hpack_literal(name, value):
    """A literal field line without indexing, its name a literal too (RFC 7541 6.2.2)."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def h2(name, fields, data=None, pseudo=None, answers=None):
    """An HTTP/2 case: the pseudo-header fields (`pseudo` replaces the default GET /c),
    then `fields`, on stream 1; `data` as one DATA frame ending the stream."""
    method = b"POST" if data is not None else b"GET"
    head = pseudo if pseudo is not None else [
        (b":method", method), (b":scheme", b"http"), (b":authority", b"x"), (b":path", b"/c")]
    block = b"".join(hpack_literal(n, v) for n, v in head + fields)
    frames = h2_frame(1, 0x4 | (0x1 if data is None else 0), 1, block)
    if data is not None:
        frames += h2_frame(0, 0x1, 1, data)
    # The server's SETTINGS come before ours are acknowledged and the request goes.
    sends = [H2_PREFACE + h2_frame(4, 0, 0), h2_frame(4, 0x1, 0) + frames]
    ALL.append(Case(name, sends, answers or {}))


PSEUDO = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"), (b":path", b"/c")]


def pseudo_with(name, value):
    return [(n, value if n == name else v) for n, v in PSEUDO]


h2("h2-get", [])
h2("h2-post", [(b"content-length", b"5")], b"hello")
h2("h2-post-no-length", [], b"hello")
# H2.CL: a length the DATA frames belie.
h2("h2-cl-zero-smuggle", [(b"content-length", b"0")], S)
h2("h2-cl-short-smuggle", [(b"content-length", b"5")], b"hello" + S)
h2("h2-cl-long", [(b"content-length", b"100")], b"hello")
h2("h2-cl-two-values", [(b"content-length", b"5"), (b"content-length", b"6")], b"hello")
h2("h2-cl-list", [(b"content-length", b"5, 5")], b"hello")
h2("h2-cl-plus", [(b"content-length", b"+5")], b"hello")
# H2.TE: connection-specific fields have no place in HTTP/2 (RFC 9113 8.2.2).
h2("h2-te-chunked-smuggle", [(b"transfer-encoding", b"chunked")], b"0\r\n\r\n" + S)
h2("h2-te-chunked-cl", [(b"content-length", b"5"), (b"transfer-encoding", b"chunked")], b"0\r\n\r\n" + S)
h2("h2-te-trailers", [(b"te", b"trailers")])
h2("h2-te-gzip", [(b"te", b"gzip")])
h2("h2-connection", [(b"connection", b"keep-alive")])
h2("h2-keep-alive", [(b"keep-alive", b"timeout=5")])
h2("h2-proxy-connection", [(b"proxy-connection", b"keep-alive")])
h2("h2-upgrade", [(b"upgrade", b"websocket")])
# Request splitting through a field value or name.
h2("h2-crlf-value-smuggle", [(b"x", b"y\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x")])
h2("h2-crlf-value-te", [(b"x", b"y\r\ntransfer-encoding: chunked")], b"0\r\n\r\n" + S)
h2("h2-lf-value", [(b"x", b"y\ntransfer-encoding: chunked")], b"0\r\n\r\n" + S)
h2("h2-cr-value", [(b"x", b"y\rz")])
h2("h2-nul-value", [(b"x", b"y\x00z")])
h2("h2-crlf-name", [(b"x: y\r\ntransfer-encoding", b"chunked")], b"0\r\n\r\n" + S)
h2("h2-colon-in-name", [(b"transfer-encoding:chunked", b"x")], b"0\r\n\r\n" + S)
h2("h2-space-in-name", [(b"transfer-encoding ", b"chunked")], b"0\r\n\r\n" + S)
h2("h2-upper-name", [(b"Transfer-Encoding", b"chunked")], b"0\r\n\r\n" + S)
h2("h2-empty-name", [(b"", b"x")])
h2("h2-value-leading-space", [(b"x", b" y")])
# Pseudo-header fields: a request line, or a second request, written through them.
h2("h2-path-request-line", [], pseudo=pseudo_with(b":path", b"/c HTTP/1.1\r\nHost: x\r\n\r\nGET /smuggled"))
h2("h2-path-space", [], pseudo=pseudo_with(b":path", b"/c /smuggled"))
h2("h2-path-no-slash", [], pseudo=pseudo_with(b":path", b"c"))
h2("h2-path-empty", [], pseudo=pseudo_with(b":path", b""))
h2("h2-path-absolute", [], pseudo=pseudo_with(b":path", b"http://evil/c"))
h2("h2-path-star-get", [], pseudo=pseudo_with(b":path", b"*"))
h2("h2-method-request-line", [], pseudo=pseudo_with(b":method", b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\nGET"))
h2("h2-method-space", [], pseudo=pseudo_with(b":method", b"GET /smuggled"))
h2("h2-method-lower", [], pseudo=pseudo_with(b":method", b"get"))
h2("h2-authority-crlf", [], pseudo=pseudo_with(b":authority", b"x\r\nX: y"))
h2("h2-authority-path", [], pseudo=pseudo_with(b":authority", b"x/smuggled?"))
h2("h2-authority-host-differ", [(b"host", b"other")])
h2("h2-scheme-injected", [], pseudo=pseudo_with(b":scheme", b"http://evil/smuggled?"))
h2("h2-no-path", [], pseudo=[p for p in PSEUDO if p[0] != b":path"])
h2("h2-no-method", [], pseudo=[p for p in PSEUDO if p[0] != b":method"])
h2("h2-two-paths", [], pseudo=PSEUDO + [(b":path", b"/smuggled")])
h2("h2-pseudo-after-field", [(b"x", b"y"), (b":path", b"/smuggled")],
   pseudo=[p for p in PSEUDO if p[0] != b":path"])
h2("h2-unknown-pseudo", [], pseudo=PSEUDO + [(b":x", b"y")])
h2("h2-connect", [], pseudo=[(b":method", b"CONNECT"), (b":authority", b"x:80")])
h2("h2-cookie-split", [(b"cookie", b"a=1"), (b"cookie", b"b=2")])
# The answers an HTTP/2 client gets from an HTTP/1 gear: connection-specific fields,
# framings, interim and switching answers, trailers, a length the body belies.
H2CH = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
for n, ans in [
    ("h2r-conn-headers", b"HTTP/1.1 200 OK\r\nConnection: keep-alive, x-a\r\nKeep-Alive: timeout=5\r\nX-A: 1\r\nProxy-Connection: close\r\nUpgrade: foo\r\nContent-Length: 2\r\n\r\nok"),
    ("h2r-te-cl", H2CH + b"Content-Length: 9\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
    ("h2r-te-gzip", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
    ("h2r-close-delimited", b"HTTP/1.1 200 OK\r\n\r\nok" + CLOSE),
    ("h2r-101", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
    ("h2r-103", b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    ("h2r-trailers", H2CH + b"Trailer: x-t\r\n\r\n2\r\nok\r\n0\r\nx-t: 1\r\ntransfer-encoding: chunked\r\n\r\n"),
    ("h2r-cl-mismatch", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok" + CLOSE),
    ("h2r-204-body", b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"),
    ("h2r-header-obs-text", b"HTTP/1.1 200 OK\r\nX: \xff\xfe\r\nContent-Length: 2\r\n\r\nok"),
    ("h2r-upper-name", b"HTTP/1.1 200 OK\r\nX-UPPER: a\r\nContent-Length: 2\r\n\r\nok"),
]:
    h2(n, [], answers={"/c": ans})
