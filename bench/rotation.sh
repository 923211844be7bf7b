#!/usr/bin/env bash
# bench/rotation.sh - rotate-out completion latency with no traffic in flight, for
# M = 2, 3 and 10 gossiping balancers on 127.0.0.1, in one run.
#
# Usage: bash bench/rotation.sh            (ROUNDS=20 SIZES="2 3 10" GOSSIP=200ms)
#        SMOKE=1 bash bench/rotation.sh    (M = 2, one round, the debug build; checked)
#
# Each balancer is a real `gearlb run` (release build) with the default gossip
# interval, all knowing each other through `ctl set-peers`, and one web gear announced by
# `update-cluster`. Each round times `gearlb ctl rotate-out` (from the command start to
# its exit, i.e. until every live balancer acknowledged "drained") and then rotates the
# gear back in. Target: p50 < 1 s at M = 10. It reads each balancer's gossip address and
# the live peers from `gearlb ctl peers --json` (`advertise`, `live`), and fails if a
# size has no rotation timed. CI runs SMOKE=1 (tests/bench_smoke.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
SIZES=${SIZES:-"2 3 10"}
GOSSIP=${GOSSIP:-200ms}
if [ "${SMOKE:-0}" = 1 ]; then
  ROUNDS=1 SIZES=2 BIN=${GEARLB_BIN:-target/debug/gearlb}
else
  BIN=${GEARLB_BIN:-target/release/gearlb}
  if [ ! -x "$BIN" ] || [ -n "$(find src Cargo.toml -newer "$BIN" -print -quit)" ]; then
    cargo build --release --quiet
  fi
fi
# peers_field SOCKET FIELD: a field of the balancer's `ctl peers --json` (a list: its length).
peers_field() {
  "$BIN" ctl --socket "$1" peers --json | python3 -c '
import json, sys
v = json.load(sys.stdin)[sys.argv[1]]
print(len(v) if isinstance(v, list) else v)' "$2"
}
TMP=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

percentile() { # percentile P < numbers
  sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int((NR*p+99)/100); if (i<1) i=1; print a[i]}'
}

printf 'machine: nproc=%s, %s\n' "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
printf 'gearlb %s, gossip interval %s, %s rounds per size\n\n' "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" "$GOSSIP" "$ROUNDS"
printf '%4s  %9s  %9s  %9s  %9s\n' M p50_ms p90_ms max_ms failures
for m in $SIZES; do
  pids=()
  socks=()
  addrs=()
  for i in $(seq 1 "$m"); do
    d="$TMP/m$m-lb$i"
    mkdir -p "$d"
    cat > "$d/gearlb.toml" <<TOML
[listen]
proxy = "127.0.0.1:0"
status = "127.0.0.1:0"
[control]
socket = "$d/control.sock"
[state]
dir = "$d/data"
[cluster]
node_id = "lb$i"
transport = "http"
secret = "bench-secret-0123456789abcdef"
gossip_interval = "$GOSSIP"
TOML
    GEARLB_LOG=warn,gearlb::app=info "$BIN" run --config "$d/gearlb.toml" > "$d/log" 2>&1 &
    pids+=("$!")
    socks+=("$d/control.sock")
  done
  for i in $(seq 1 "$m"); do
    d="$TMP/m$m-lb$i"
    for _ in $(seq 1 200); do [ -S "$d/control.sock" ] && break; sleep 0.05; done
    addr=$(peers_field "$d/control.sock" advertise)
    [[ $addr =~ ^[0-9.]+:[1-9][0-9]*$ ]] || { echo "lb$i: peers.advertise is '$addr'" >&2; exit 1; }
    addrs+=("'lb$i'='lb$i|$addr'")
  done
  peers="${addrs[*]}"
  for s in "${socks[@]}"; do
    "$BIN" ctl --socket "$s" set-peers "$peers" > /dev/null
    "$BIN" ctl --socket "$s" update-cluster "web1-ns.example.com|127.0.0.1:9" > /dev/null
  done
  live=0
  for _ in $(seq 1 100); do
    live=$(peers_field "${socks[0]}" live)
    [ "$live" -ge "$m" ] && break
    sleep 0.1
  done
  [ "$live" -ge "$m" ] || { echo "M=$m: lb1 sees $live live balancers, not $m" >&2; exit 1; }
  times=()
  failures=0
  for _ in $(seq 1 "$ROUNDS"); do
    t0=$(date +%s%N)
    if "$BIN" ctl --socket "${socks[0]}" rotate-out web1-ns --as-json > /dev/null 2>&1; then
      times+=($(( ($(date +%s%N) - t0) / 1000000 )))
    else
      failures=$((failures + 1))
    fi
    "$BIN" ctl --socket "${socks[0]}" rotate-in web1-ns > /dev/null 2>&1 || failures=$((failures + 1))
  done
  if [ "${#times[@]}" -gt 0 ]; then
    p50=$(printf '%s\n' "${times[@]}" | percentile 50)
    p90=$(printf '%s\n' "${times[@]}" | percentile 90)
    max=$(printf '%s\n' "${times[@]}" | percentile 100)
  else
    p50=-; p90=-; max=-
  fi
  printf '%4s  %9s  %9s  %9s  %9s\n' "$m" "$p50" "$p90" "$max" "$failures"
  [ "${#times[@]}" -gt 0 ] || { echo "M=$m: no rotate-out completed" >&2; exit 1; }
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
done
