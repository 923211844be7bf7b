#!/bin/bash
# Server CPU per full TLS handshake (no resumption): gearlb, optionally another gearlb
# build (GEARLB_ALT_BIN, e.g. one with another rustls crypto provider), and HAProxy 2.6
# with Debian's OpenSSL 3. One worker thread each, pinned to CPU 0; the client
# (`openssl s_time -new`) on CPU 1. CPU is the server process's user+system time
# (/proc/PID/stat) over the run, divided by the handshakes the client completed.
#
# Usage: bash bench/tls_handshake.sh            (ROUNDS=3 SECS=6 KEYS="rsa ec" PROTOS="-tls1_3 -tls1_2")
#        SMOKE=1 bash bench/tls_handshake.sh    (one round of 1 s, ECDSA, TLS 1.3, the debug
#                                                build: checks every target completed
#                                                handshakes; CI runs it, tests/bench_smoke.rs)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${SMOKE:-0}" = 1 ]; then
  : "${ROUNDS:=1}" "${SECS:=1}" "${KEYS:=ec}" "${PROTOS:=-tls1_3}" "${GEARLB_BIN:=$root/target/debug/gearlb}"
fi
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-6}
KEYS=${KEYS:-"rsa ec"}
PROTOS=${PROTOS:-"-tls1_3 -tls1_2"}
BIN=${GEARLB_BIN:-$root/target/release/gearlb}
ALT=${GEARLB_ALT_BIN:-}
for tool in haproxy openssl taskset; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install haproxy openssl util-linux)" >&2; exit 1; }
done
[ -x "$BIN" ] || (cd "$root" && cargo build --release --locked --quiet)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Keys: RSA 2048 (the common certificate), RSA 4096, ECDSA P-256.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/rsa.key" -out "$tmp/rsa.pem" -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
openssl req -x509 -newkey rsa:4096 -nodes -keyout "$tmp/rsa4096.key" -out "$tmp/rsa4096.pem" -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/ec.key" -out "$tmp/ec.pem" -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost 2>/dev/null
for k in rsa rsa4096 ec; do cat "$tmp/$k.pem" "$tmp/$k.key" > "$tmp/$k.combined"; done

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# Three free ports in a row (the proxy, status and TLS listeners), below the kernel's
# ephemeral range, which connections and other tests' port-0 listeners draw from.
free_ports() {
  python3 - <<'PY'
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    try:
        for q in (p, p + 1, p + 2):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(p)
    break
PY
}
start() { # target key port
  local d="$tmp/$1-$3"
  mkdir -p "$d"
  if [ "$1" = haproxy ]; then
    printf 'global\n  nbthread 1\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\nfrontend f\n  bind 127.0.0.1:%s ssl crt %s\n  default_backend b\nbackend b\n  server s1 127.0.0.1:9\n' "$3" "$tmp/$2.combined" > "$d/h.cfg"
    taskset -c 0 haproxy -f "$d/h.cfg" -db > "$d/log" 2>&1 &
  else
    local bin=$BIN
    [ "$1" = gearlb-alt ] && bin=$ALT
    printf '[runtime]\nthreads = 1\n[listen]\nproxy = "127.0.0.1:%s"\nstatus = "127.0.0.1:%s"\ntls = "127.0.0.1:%s"\n[tls]\ncert = "%s"\nkey = "%s"\n[control]\nsocket = "%s/c.sock"\n[state]\ndir = "%s/data"\n[[backends]]\nname = "w"\naddr = "127.0.0.1:9"\n' \
      "$(($3 + 1))" "$(($3 + 2))" "$3" "$tmp/$2.pem" "$tmp/$2.key" "$d" "$d" > "$d/g.toml"
    GEARLB_LOG=warn taskset -c 0 "$bin" run --config "$d/g.toml" > "$d/log" 2>&1 &
  fi
  echo $!
}
targets="gearlb ${ALT:+gearlb-alt} haproxy"
echo "gearlb $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); $(haproxy -v | head -1); $(openssl version)"
echo "target proto key round handshakes server_cpu_us_per_handshake"
for proto in $PROTOS; do
  for key in $KEYS; do
    for r in $(seq 1 "$ROUNDS"); do
      order=$targets
      # Even rounds reverse the order.
      [ $((r % 2)) -eq 0 ] && order=$(echo "$targets" | tr ' ' '\n' | tac | tr '\n' ' ')
      for t in $order; do
        port=$(free_ports)
        [ -n "$port" ] || { echo "no free ports for $t" >&2; exit 1; }
        pid=$(start "$t" "$key" "$port")
        for _ in $(seq 1 50); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
        [ -e "/proc/$pid/stat" ] || { echo "$t did not start on $port (log: $(tail -3 "$tmp/$t-$port/log"))" >&2; exit 1; }
        before=$(cpu_ticks "$pid")
        n=$(taskset -c 1 openssl s_time -connect "127.0.0.1:$port" -new -time "$SECS" "$proto" 2>&1 | awk '/connections in/ {print $1; exit}')
        after=$(cpu_ticks "$pid")
        [ "${n:-0}" -gt 0 ] || { echo "$t $proto $key: no handshake completed (log: $(tail -3 "$tmp/$t-$port/log"))" >&2; exit 1; }
        kill "$pid"; wait "$pid" 2>/dev/null || true
        tick_us=$((1000000 / $(getconf CLK_TCK)))
        echo "$t $proto $key $r ${n:-0} $(( (after - before) * tick_us / ${n:-1} ))"
      done
    done
  done
done
