#!/bin/bash
# Slow readers (issue 34): a normal client's latency through gearlb and through HAProxy
# 2.6 while slowhttptest's slow-read attack (`-X`) holds CONNS connections that ask for a
# 1 MiB file and take it a few bytes at a time, paired in one run on this host.
#
# Per round and target (the order alternates by round): the proxy is started fresh; a
# normal client (bench/latency_probe.py: a new connection per request, GET /small, 16 B,
# then GET /big, 1 MiB, every INTERVAL s) runs QUIET_SECS without the attack, then
# slowhttptest starts (-X -c CONNS -r RATE -w 512 -y 1024 -n 5 -z 32 -k 3, /big) and
# the client runs PROBE_SECS more from that moment: while the attack's connections open
# (CONNS / RATE seconds, when both proxies are busiest) and after. Each request is timed
# from connect to its last byte; one that fails or takes longer than TIMEOUT s counts as
# an error at TIMEOUT. Reported: count, errors, p50, p99 and worst latency per path and
# phase; the proxy's largest resident memory during the attack (VmRSS, sampled every
# 0.5 s); the connections to the proxy established when the client is done (`ss`: the
# attack's). Then per round the ratio gearlb / HAProxy of the attack phase's p99 and
# worst. Requests over 100 ms are listed with their start time in the temp dir
# (`KEEP_TMP=1` keeps it).
#
# Fair limits: both proxies one worker thread (`[runtime] threads = 1`, `nbthread 1`)
# pinned to PROXY_CPU; room for 4000 client connections in both (`max_connections`,
# `maxconn` global and per proxy: nothing is refused or queued at 500); the same timeouts
# (connect 10 s, client and server 60 s, request head 10 s); no health checks; one nginx
# backend (one worker, sendfile) that never limits. nginx, slowhttptest and the client
# share LOAD_CPU. Loopback only; every step bounded in time.
#
# Usage: bash bench/slow_read.sh   (ROUNDS=3 CONNS=500 RATE=200 PROBE_SECS=20 ...)
#        SMOKE=1 bash bench/slow_read.sh   (one round, 20 slow connections, 2 s, the debug
#                                           build: checks that every target, phase and
#                                           path has a measured line; CI runs it)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${SMOKE:-0}" = 1 ]; then
  : "${ROUNDS:=1}" "${CONNS:=20}" "${RATE:=20}" "${QUIET_SECS:=1}" "${PROBE_SECS:=2}" "${INTERVAL:=0.1}"
  : "${ATTACK_EXTRA:=1}"
  : "${GEARLB_BIN:=$root/target/debug/gearlb}"
fi
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-500}
RATE=${RATE:-200}
QUIET_SECS=${QUIET_SECS:-5}
PROBE_SECS=${PROBE_SECS:-20}
INTERVAL=${INTERVAL:-0.05}
TIMEOUT=${TIMEOUT:-10}
PROXY_CPU=${PROXY_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
BIN=${GEARLB_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/gearlb}
TARGETS=${TARGETS:-"gearlb haproxy"}
# Ports below the ephemeral range (32768-60999), where the clients' ports are.
BACKEND_PORT=19201
PROXY_PORT=18280
STATUS_PORT=18281
for tool in haproxy nginx slowhttptest taskset python3; do
  command -v "$tool" >/dev/null || {
    echo "needs $tool (apt-get install haproxy nginx-light slowhttptest util-linux python3)" >&2
    exit 1
  }
done
[ -x "$BIN" ] || (cd "$root" && cargo build --release --locked --quiet)
ulimit -n 20000 2>/dev/null || true
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then
    echo "kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

wait_port() {
  for _ in $(seq 1 100); do
    (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
for p in $BACKEND_PORT $PROXY_PORT $STATUS_PORT; do
  ! (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "port $p is in use" >&2; exit 1; }
done

# The backend: nginx, one worker, 16 B and 1 MiB files.
mkdir -p "$tmp/www" "$tmp/nginx"
printf '0123456789abcdef' >"$tmp/www/small"
head -c 1048576 /dev/urandom >"$tmp/www/big"
chmod -R a+rX "$tmp/www"
cat >"$tmp/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/nginx/pid;
error_log $tmp/nginx/error.log;
worker_rlimit_nofile 20000;
events { worker_connections 8192; }
http {
  access_log off;
  keepalive_requests 1000000;
  sendfile on;
  server { listen 127.0.0.1:$BACKEND_PORT backlog=4096; root $tmp/www; }
}
CONF
taskset -c "$LOAD_CPU" nginx -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" >/dev/null 2>&1 &
pids+=($!)
wait_port "$BACKEND_PORT" || { echo "nginx did not start" >&2; exit 1; }

start() { # target → pid
  local d="$tmp/$1"
  rm -rf "$d/data"
  mkdir -p "$d/data"
  case "$1" in
    haproxy)
      cat >"$d/h.cfg" <<CFG
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  option http-keep-alive
  http-reuse always
  maxconn 4000
  timeout http-request 10s
  timeout connect 10s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 10s
listen t
  bind 127.0.0.1:$PROXY_PORT
  balance leastconn
  server s1 127.0.0.1:$BACKEND_PORT
CFG
      taskset -c "$PROXY_CPU" haproxy -f "$d/h.cfg" -db >"$d/log" 2>&1 &
      ;;
    gearlb)
      cat >"$d/g.toml" <<TOML
[runtime]
threads = 1
[listen]
proxy = "127.0.0.1:$PROXY_PORT"
status = "127.0.0.1:$STATUS_PORT"
[limits]
max_connections = 4000
[timeouts]
connect = "10s"
client = "60s"
server = "60s"
request_header = "10s"
[health]
enabled = false
[control]
socket = "$d/c.sock"
[state]
dir = "$d/data"
[[backends]]
name = "s1"
addr = "127.0.0.1:$BACKEND_PORT"
TOML
      GEARLB_LOG=warn taskset -c "$PROXY_CPU" "$BIN" run --config "$d/g.toml" >"$d/log" 2>&1 &
      ;;
    *) echo "unknown target $1" >&2; exit 1 ;;
  esac
  echo $!
}

# Largest VmRSS (KiB) of PID while FILE does not exist; written to OUT.
sample_rss() {
  local pid=$1 stop=$2 out=$3 max=0 kb
  while [ ! -e "$stop" ] && kill -0 "$pid" 2>/dev/null; do
    kb=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${kb:-0}" -gt "$max" ] && max=$kb
    sleep 0.5
  done
  echo "$max" >"$out"
}

probe() { # seconds log → lines "path count errors p50 p99 max"; requests over 100 ms in log
  SLOW_MS=100 taskset -c "$LOAD_CPU" timeout $(($1 + TIMEOUT + 30)) python3 "$root/bench/latency_probe.py" \
    127.0.0.1 "$PROXY_PORT" "$1" "$INTERVAL" "$TIMEOUT" /small=16 /big=1048576 2>"$2"
}

results=$tmp/results
: >"$results"
echo "# gearlb $BIN (tree $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')); $(haproxy -v | head -1 | cut -d' ' -f1-3); nginx $(nginx -v 2>&1 | cut -d/ -f2); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ROUNDS=$ROUNDS CONNS=$CONNS RATE=$RATE QUIET_SECS=$QUIET_SECS PROBE_SECS=$PROBE_SECS INTERVAL=$INTERVAL TIMEOUT=$TIMEOUT"
echo "# slowhttptest -X -c $CONNS -r $RATE -w 512 -y 1024 -n 5 -z 32 -k 3 -p 3 -l $((PROBE_SECS + ${ATTACK_EXTRA:-5})) -u http://127.0.0.1:$PROXY_PORT/big"
echo "round target phase path count errors p50_ms p99_ms max_ms rss_mib attack_connected"
for r in $(seq 1 "$ROUNDS"); do
  order=$TARGETS
  [ $((r % 2)) -eq 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for t in $order; do
    pid=$(start "$t")
    pids+=("$pid")
    wait_port "$PROXY_PORT" || { echo "$t did not start:" >&2; cat "$tmp/$t/log" >&2; exit 1; }
    sleep 1
    rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    probe "$QUIET_SECS" "$tmp/$t/quiet.$r" | while read -r path n e p50 p99 max; do
      echo "$r $t quiet $path $n $e $p50 $p99 $max $((rss0 / 1024)) 0"
    done | tee -a "$results"
    # The attack, bounded by -l (and by timeout if it hangs).
    attack_secs=$((PROBE_SECS + ${ATTACK_EXTRA:-5}))
    taskset -c "$LOAD_CPU" timeout $((attack_secs + 60)) slowhttptest -X -c "$CONNS" -r "$RATE" \
      -w 512 -y 1024 -n 5 -z 32 -k 3 -p 3 -l "$attack_secs" \
      -u "http://127.0.0.1:$PROXY_PORT/big" >"$tmp/$t/attack.$r" 2>&1 &
    attack=$!
    pids+=("$attack")
    rm -f "$tmp/stop"
    sample_rss "$pid" "$tmp/stop" "$tmp/rss" &
    sampler=$!
    lines=$(probe "$PROBE_SECS" "$tmp/$t/probe.$r")
    connected=$(ss -Htn state established "( dport = :$PROXY_PORT )" | wc -l)
    touch "$tmp/stop"
    wait "$sampler"
    rss=$(($(cat "$tmp/rss") / 1024))
    echo "$lines" | while read -r path n e p50 p99 max; do
      echo "$r $t attack $path $n $e $p50 $p99 $max $rss $connected"
    done | tee -a "$results"
    wait "$attack" || true
    grep -a "service available" "$tmp/$t/attack.$r" | tail -1 | sed -e "s/\x1b\[[0-9;]*m//g" -e "s/^/# $t round $r: slowhttptest: /" || true
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 1
  done
done

# Every target, phase and path of every round has its line, with requests counted.
want=$((ROUNDS * $(echo "$TARGETS" | wc -w) * 2 * 2))
got=$(awk '$5 > 0 && $7 != "" { n++ } END { print n + 0 }' "$results")
[ "$got" = "$want" ] || { echo "slow_read.sh: $got measured lines of $want" >&2; exit 1; }

# Per round: gearlb / HAProxy of the attack phase's p99 and worst, per path.
echo
echo "ratio gearlb/haproxy under attack (per round; then the median):"
awk '$3 == "attack" { v[$1, $2, $4, "p99"] = $8; v[$1, $2, $4, "max"] = $9; rounds[$1]; paths[$4] }
  END {
    for (p in paths) for (m = 1; m <= 2; m++) {
      metric = m == 1 ? "p99" : "max"; n = 0; line = ""
      for (r = 1; r <= 1000; r++) {
        if (!((r, "gearlb", p, metric) in v) || !((r, "haproxy", p, metric) in v)) continue
        x = v[r, "gearlb", p, metric] / (v[r, "haproxy", p, metric] > 0 ? v[r, "haproxy", p, metric] : 0.001)
        q[++n] = x; line = line sprintf(" %.2f", x)
      }
      if (n == 0) continue
      for (a = 2; a <= n; a++) { k = q[a]; b = a - 1; while (b > 0 && q[b] > k) { q[b + 1] = q[b]; b-- } q[b + 1] = k }
      med = n % 2 ? q[(n + 1) / 2] : (q[n / 2] + q[n / 2 + 1]) / 2
      printf "%-7s %-4s rounds:%s  median %.2f\n", p, metric, line, med
    }
  }' "$results"
