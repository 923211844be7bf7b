#!/usr/bin/env bash
# A router's cost per request with one application and with APPS (1000) applications
# from the routing SPI: gearlb's user-space instructions per request, counted by
# valgrind (callgrind), as run.sh's `instructions` scenario counts them.
#
#   bash bench/router_apps.sh              # APPS=1000, 20000 requests per count
#   APPS=10000 INSTR_REQUESTS=50000 bash bench/router_apps.sh
#   SMOKE=1 bash bench/router_apps.sh      # a few seconds: 10 applications, 500 requests,
#                                           # the debug build (CI runs it: tests/bench_smoke.rs)
#   KEEP_CALLGRIND=DIR                      # keeps both callgrind dumps there
#
# Each router starts from a table in its state directory (routing-table.json, as a
# router saves it), so no broker is needed: the table is served at once, and the
# consumer's reconnect attempts to an address nobody listens on (backing off to 30 s)
# are all it does meanwhile. Each application has two load-balancer endpoints, an nginx
# on two ports; requests go to the last application's HA name (names of one width, so
# that its Host is as long in both counts). Health checks are off
# (with 1000 applications they would run 2000 checks in the counted window). The
# result is one line per table size, and their ratio.
#
# Needs: valgrind, nginx, python3, oha (OHA_BIN; run.sh installs it), a release build
# (BUILD=1 builds it; GEARLB_BIN names another binary).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${SMOKE:-0} == 1 ]]; then
    APPS=10
    INSTR_REQUESTS=500
    CONNECTIONS=4
    WARMUP_REQUESTS=100
    : "${BUILD:=0}" "${GEARLB_BIN:=target/debug/gearlb}"
fi
APPS=${APPS:-1000}
INSTR_REQUESTS=${INSTR_REQUESTS:-20000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-3000}
CONNECTIONS=${CONNECTIONS:-64}
BUILD=${BUILD:-1}
GEARLB_BIN=${GEARLB_BIN:-target/release/gearlb}
OHA_BIN=${OHA_BIN:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
# A smoke run judges nothing: without oha, oha_lite.py (oha's command line and JSON as
# used here) rather than building oha for minutes.
if [[ ${SMOKE:-0} == 1 && ! -x $OHA_BIN ]]; then
    OHA_BIN=bench/lib/oha_lite.py
fi

die() {
    echo "router_apps.sh: $*" >&2
    exit 1
}
for c in valgrind callgrind_control nginx python3 curl; do
    command -v "$c" >/dev/null || die "$c is missing"
done
[[ -x $OHA_BIN ]] || die "oha is missing ($OHA_BIN): cargo install --locked oha"
if [[ $BUILD == 1 ]]; then
    cargo build --release --locked --quiet
fi
[[ -x $GEARLB_BIN ]] || die "no gearlb binary at $GEARLB_BIN"

TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The gears: one nginx answering on two ports.
P1=$(free_port)
P2=$(free_port)
mkdir -p "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx;
    proxy_temp_path $TMP/nginx;
    fastcgi_temp_path $TMP/nginx;
    uwsgi_temp_path $TMP/nginx;
    scgi_temp_path $TMP/nginx;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$P1;
        listen 127.0.0.1:$P2;
        location / { return 200 "ok\n"; }
    }
}
EOF
nginx -c "$TMP/nginx/nginx.conf" &
PIDS+=($!)

# table N DIR: a saved table of N applications, each with two endpoints.
table() {
    mkdir -p "$2/data"
    python3 - "$1" "$2/data/routing-table.json" "$P1" "$P2" <<'EOF'
import json, sys, time
n, path, p1, p2 = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
apps = {}
# Names of one width whatever the table's size (app0000001): the request's Host is as
# long with one application as with many.
for i in range(n):
    name = f"app{i:07d}"
    eps = {}
    for g, p in (("a", p1), ("b", p2)):
        eps[f"127.0.0.1:{p}"] = {"gear_id": f"{g}{i:024d}", "address": "127.0.0.1",
                                  "port": p, "types": ["load_balancer"]}
    apps[f"{name}-ns1"] = {"app": name, "namespace": "ns1", "created": True,
                           "endpoints": eps, "aliases": [f"www.{name}.example.org"],
                           "certs": {}}
json.dump({"format": 1, "table": {"apps": apps, "recent": [], "applied": 3 * n,
                                  "current_ms": int(time.time() * 1000)}},
          open(path, "w"))
EOF
    chmod 600 "$2/data/routing-table.json"
}

# count N: instructions per request of a router with N applications.
count() {
    local n=$1 dir="$TMP/r$1" port status pid host dump ir ok
    port=$(free_port)
    status=$(free_port)
    mkdir -p "$dir"
    table "$n" "$dir"
    cat >"$dir/router.toml" <<EOF
[listen]
proxy = "127.0.0.1:$port"
status = "127.0.0.1:$status"
[control]
socket = "$dir/control.sock"
[state]
dir = "$dir/data"
[health]
enabled = false
[routing_spi]
brokers = ["127.0.0.1:9"]
cloud_domain = "bench.example"
client_id = "bench"
keep_seen = false
EOF
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.%p" \
        "$GEARLB_BIN" run --config "$dir/router.toml" >"$dir/log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    host=$(printf 'ha-app%07d-ns1.bench.example' $((n - 1)))
    for _ in $(seq 1 600); do
        if curl -fsS -o /dev/null -H "Host: $host" "http://127.0.0.1:$port/" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    curl -fsS -o /dev/null -H "Host: $host" "http://127.0.0.1:$port/" ||
        die "the router with $n applications does not route $host: $(tail -5 "$dir/log")"
    "$OHA_BIN" --no-tui -n "$WARMUP_REQUESTS" -c "$CONNECTIONS" -H "Host: $host" "http://127.0.0.1:$port/" >/dev/null
    callgrind_control -i on "$pid" >/dev/null
    "$OHA_BIN" --no-tui --output-format json -n "$INSTR_REQUESTS" -c "$CONNECTIONS" \
        -H "Host: $host" "http://127.0.0.1:$port/" >"$dir/oha.json"
    rm -f "$dir/callgrind.$pid".*
    callgrind_control -d "$pid" >/dev/null
    dump="$dir/callgrind.$pid.1"
    for _ in $(seq 1 300); do
        [[ -s $dump ]] && break
        sleep 0.1
    done
    if [[ -n ${KEEP_CALLGRIND:-} ]]; then
        mkdir -p "$KEEP_CALLGRIND"
        cp "$dump" "$KEEP_CALLGRIND/callgrind.apps-$n"
    fi
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump" 2>/dev/null || true)
    [[ -n $ir ]] || die "no instruction total in the callgrind dump $dump"
    ok=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["statusCodeDistribution"].get("200",0))' "$dir/oha.json")
    ((ok > 0)) || die "no request succeeded with $n applications"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "$n $ok $((ir / ok))"
}

echo "gearlb: $GEARLB_BIN ($(git rev-parse --short HEAD 2>/dev/null || echo ?)), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-13s %-10s %s\n' applications requests instr/req
read -r n1 ok1 i1 < <(count 1)
printf '%-13s %-10s %s\n' "$n1" "$ok1" "$i1"
read -r nn okn in < <(count "$APPS")
printf '%-13s %-10s %s\n' "$nn" "$okn" "$in"
awk -v a="$i1" -v b="$in" -v n="$APPS" 'BEGIN { printf "ratio %s/1: %.3f\n", n, b / a }'
