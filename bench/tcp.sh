#!/bin/bash
# TCP mode beside HAProxy 2.6 `mode tcp`, paired in one run on this host: connections
# per second (a new TCP connection per request through the proxy: `oha
# --disable-keepalive`, 64 B answers) and 1 MiB transfers (keep-alive clients pulling
# a 1 MiB file through one long TCP connection each). The backend is nginx (one
# worker) serving both files. Each proxy runs one worker thread pinned to CPU 0; nginx
# and the client share CPU 1. Reported per target and round: requests (= connections
# in `conn`) per second, MiB/s in `mib`, and the proxy's CPU (user+system, from
# /proc/PID/stat) per connection or per MiB. HAProxy runs twice: as configured by
# default (no splice) and with `option splice-auto`, to see what splice(2) buys here.
#
# Usage: bash bench/tcp.sh        (ROUNDS=5 SECS=6 CONNS=32 BIG_CONNS=8)
#        SMOKE=1 bash bench/tcp.sh (one round of 1 s, the debug build: checks that every
#                                   target answered; CI runs it, tests/bench_smoke.rs)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${SMOKE:-0}" = 1 ]; then
  : "${ROUNDS:=1}" "${SECS:=1}" "${CONNS:=4}" "${BIG_CONNS:=2}" "${GEARLB_BIN:=$root/target/debug/gearlb}"
fi
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-6}
CONNS=${CONNS:-32}
BIG_CONNS=${BIG_CONNS:-8}
BIN=${GEARLB_BIN:-$root/target/release/gearlb}
TARGETS=${TARGETS:-"gearlb haproxy haproxy-splice"}
OHA_BIN=${OHA_BIN:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
# A smoke run judges nothing: without oha it takes oha_lite.py (oha's command line and
# JSON as used here) rather than building oha for minutes.
if [ "${SMOKE:-0}" = 1 ] && [ ! -x "$OHA_BIN" ]; then
  OHA_BIN=$root/bench/lib/oha_lite.py
fi
[ -x "$OHA_BIN" ] || { echo "needs oha (cargo install --locked oha), or OHA_BIN" >&2; exit 1; }
for tool in haproxy nginx taskset python3; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install haproxy nginx-light util-linux python3)" >&2; exit 1; }
done
[ -x "$BIN" ] || (cd "$root" && cargo build --release --locked --quiet)
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

# The backend: nginx, one worker, on CPU 1.
mkdir -p "$tmp/www" "$tmp/nginx"
head -c 64 /dev/zero | tr '\0' x > "$tmp/www/small"
head -c 1048576 /dev/urandom > "$tmp/www/big"
chmod -R a+rX "$tmp/www"
backend_port=$((15000 + RANDOM % 4000))
cat > "$tmp/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/nginx/pid;
error_log $tmp/nginx/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  sendfile on;
  server { listen 127.0.0.1:$backend_port backlog=4096; root $tmp/www; }
}
CONF
taskset -c 1 nginx -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" > /dev/null 2>&1 &
pids+=($!)

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
wait_port() { for _ in $(seq 1 100); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wait_port "$backend_port"

start() { # target port → pid
  local d="$tmp/$1-$2"
  mkdir -p "$d"
  case "$1" in
    haproxy | haproxy-splice)
      local splice=""
      [ "$1" = haproxy-splice ] && splice="  option splice-auto"
      printf 'global\n  nbthread 1\n  maxconn 4000\ndefaults\n  mode tcp\n  maxconn 4000\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\nlisten t\n  bind 127.0.0.1:%s\n  balance leastconn\n%s\n  server s1 127.0.0.1:%s\n' \
        "$2" "$splice" "$backend_port" > "$d/h.cfg"
      taskset -c 0 haproxy -f "$d/h.cfg" -db > "$d/log" 2>&1 &
      ;;
    gearlb)
      printf '[runtime]\nthreads = 1\n[listen]\nproxy = "127.0.0.1:%s"\nstatus = "127.0.0.1:%s"\nmode = "tcp"\n[limits]\nmax_connections = 4000\n[health]\nenabled = false\n[control]\nsocket = "%s/c.sock"\n[state]\ndir = "%s/data"\n[[backends]]\nname = "s1"\naddr = "127.0.0.1:%s"\n' \
        "$2" "$(($2 + 1))" "$d" "$d" "$backend_port" > "$d/g.toml"
      GEARLB_LOG=warn taskset -c 0 "$BIN" run --config "$d/g.toml" > "$d/log" 2>&1 &
      ;;
  esac
  echo $!
}

# Requests per second of oha's JSON; only 200s count (anything else is reported).
rps() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
codes = d.get("statusCodeDistribution", {})
bad = {k: v for k, v in codes.items() if k != "200"}
if bad:
    print("non-200 answers:", bad, file=sys.stderr)
print(round(codes.get("200", 0) / d["summary"]["total"]))'
}
tick_us=$((1000000 / $(getconf CLK_TCK)))
echo "# gearlb $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'); $(haproxy -v | head -1); nginx $(nginx -v 2>&1 | cut -d/ -f2); $(nproc) CPUs; ROUNDS=$ROUNDS SECS=$SECS CONNS=$CONNS BIG_CONNS=$BIG_CONNS"
echo "test target round per_sec proxy_cpu_us_per_unit"
for r in $(seq 1 "$ROUNDS"); do
  order=$TARGETS
  [ $((r % 2)) -eq 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for t in $order; do
    port=$((20000 + RANDOM % 12000))  # below the ephemeral range (oha's client ports)
    pid=$(start "$t" "$port")
    pids+=("$pid")
    wait_port "$port" || { echo "$t did not start:" >&2; cat "$tmp/$t-$port/log" >&2; exit 1; }
    # Warm-up, then new connections per second.
    taskset -c 1 "$OHA_BIN" --no-tui -z 1s -c "$CONNS" --disable-keepalive "http://127.0.0.1:$port/small" > /dev/null
    before=$(cpu_ticks "$pid")
    n=$(taskset -c 1 "$OHA_BIN" --no-tui -z "${SECS}s" -c "$CONNS" --disable-keepalive --output-format json "http://127.0.0.1:$port/small" | rps)
    [ "${n:-0}" -gt 0 ] || { echo "$t: no answer through it (conn)" >&2; exit 1; }
    after=$(cpu_ticks "$pid")
    echo "conn $t $r $n $(( (after - before) * tick_us / (n * SECS > 0 ? n * SECS : 1) ))"
    # 1 MiB transfers over kept connections: MiB/s and CPU per MiB.
    before=$(cpu_ticks "$pid")
    n=$(taskset -c 1 "$OHA_BIN" --no-tui -z "${SECS}s" -c "$BIG_CONNS" --output-format json "http://127.0.0.1:$port/big" | rps)
    [ "${n:-0}" -gt 0 ] || { echo "$t: no answer through it (mib)" >&2; exit 1; }
    after=$(cpu_ticks "$pid")
    echo "mib $t $r $n $(( (after - before) * tick_us / (n * SECS > 0 ? n * SECS : 1) ))"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
