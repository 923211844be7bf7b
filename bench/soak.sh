#!/usr/bin/env bash
# bench/soak.sh - a long run of mixed load through two gossiping balancers while the
# backend set churns and a gear is rotated out and back every minute. Reports errors
# and the balancers' memory over time. CI runs only its smoke mode (SMOKE=1, below).
#
# Usage:  bash bench/soak.sh                 (30 minutes)
#         DURATION=600 bash bench/soak.sh    (10 minutes)
#         SMOKE=1 bash bench/soak.sh         (12 s, the debug build: every step once, the
#                                             status fields read checked, memory not
#                                             judged; CI runs it, tests/bench_smoke.rs)
#
# Topology (all on 127.0.0.1):
#
#   wrk #1 --> lb1 (18180) --\                 /--> nginx web1..web4 (19011-19014)
#                              >-- gossip <--<
#   wrk #2 --> lb2 (18190) --/                 \
#
# * Backends: four nginx processes (one worker each, generated config in a temp dir):
#   `GET /` answers 16 bytes, `GET /big` 256 KiB, `POST /` reads and drops the body.
# * Balancers: target/release/gearlb (built if missing or older than src/), gossip on
#   18182 / 18192 with each other as peers, health checks every 1 s.
# * Load: one wrk per balancer (CONNECTIONS each, default 16), a Lua script mixing 80%
#   GET / (with or without a sticky cookie), 10% GET /big, 10% POST / with 8 KiB; each
#   connection waits DELAY_MS (default 5) between requests, so the run does not take
#   the whole machine.
# * Churn: every CHURN seconds (default 4) `update-cluster` on both balancers with 3
#   of the 4 gears, a different one left out each time (they stay up: removal must not
#   fail a request). Every ROTATE seconds (default 60) `rotate-out` of one gear through
#   lb1 (drains on both), and `rotate-in` 20 s later.
# * Memory: VmRSS of both balancers every SAMPLE seconds (default 10) into rss.csv. The
#   growth compares the mean of the last tenth of the samples with the mean of the first
#   tenth after WARMUP seconds (default: a tenth of the run, at least 60 s), at least 3
#   samples each (RSS swings by a few MiB with the large responses in flight, so single
#   samples are too noisy); the run fails above MAX_GROWTH percent (default 5). The
#   least-squares trend (KiB/h) is printed too.
#
# Exit status 0 only if: no wrk socket error and no non-2xx/3xx response, every ctl
# command succeeded, both balancers ran to the end and stopped cleanly on SIGTERM, and
# memory growth stayed under MAX_GROWTH. The temp dir (configs, logs, wrk output,
# rss.csv, summary.txt) is kept and printed.
#
# Needs: nginx (nginx-light), wrk, curl; installed with apt-get when missing and root.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then
    : "${DURATION:=12}" "${WARMUP:=3}" "${CONNECTIONS:=4}" "${CHURN:=2}" "${ROTATE:=4}"
    : "${ROTATE_IN:=2}" "${SAMPLE:=1}" "${BUILD:=0}" "${GEARLB_BIN:=$REPO/target/debug/gearlb}"
fi
DURATION=${DURATION:-1800}
CONNECTIONS=${CONNECTIONS:-16}
DELAY_MS=${DELAY_MS:-5}
CHURN=${CHURN:-4}
ROTATE=${ROTATE:-60}
ROTATE_IN=${ROTATE_IN:-20} # seconds from a rotate-out to its rotate-in
SAMPLE=${SAMPLE:-10}
WARMUP=${WARMUP:-$(( DURATION / 10 > 60 ? DURATION / 10 : 60 ))}
MAX_GROWTH=${MAX_GROWTH:-5}
BUILD=${BUILD:-1}

GEARLB_BIN=${GEARLB_BIN:-$REPO/target/release/gearlb}
BACKEND_PORTS=(19011 19012 19013 19014)
LB_PORTS=(18180 18190)
SECRET=soak-cluster-secret-0123456789

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "FAIL: $*" >&2; exit 1; }

need() {
    command -v "$1" >/dev/null 2>&1 || [[ -x /usr/sbin/$1 ]] && return 0
    if [[ $(id -u) -eq 0 ]]; then
        log "installing $2"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    else
        die "'$1' not found; install it: apt-get install -y $2"
    fi
}
need wrk wrk
need nginx nginx-light
need curl curl
NGINX_BIN=$(command -v nginx || echo /usr/sbin/nginx)

if [[ $BUILD == 1 ]]; then
    if [[ ! -x $GEARLB_BIN ]] || [[ -n $(find "$REPO/src" "$REPO/Cargo.toml" -newer "$GEARLB_BIN" -print -quit) ]]; then
        log "building gearlb (release)"
        (cd "$REPO" && cargo build --release --locked)
    fi
fi
[[ -x $GEARLB_BIN ]] || die "no gearlb binary at $GEARLB_BIN"

TMP=$(mktemp -d /tmp/gearlb-soak.XXXXXX)
chmod 755 "$TMP" # nginx workers (nobody) read $TMP/big
PIDS=()
cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ $SMOKE == 1 && $rc == 0 ]]; then
        rm -rf "$TMP"
    else
        log "artifacts kept in $TMP"
    fi
}
trap cleanup EXIT

# ---- backends -------------------------------------------------------------------
head -c 262144 /dev/zero | tr '\0' 'x' >"$TMP/big"
for i in "${!BACKEND_PORTS[@]}"; do
    d=$TMP/web$((i + 1))
    mkdir -p "$d/tmp" "$d/logs"
    cat >"$d/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 65s;
    client_max_body_size 1m;
    server {
        listen 127.0.0.1:${BACKEND_PORTS[$i]};
        location = /big { default_type application/octet-stream; alias $TMP/big; }
        location / { default_type text/plain; return 200 "0123456789abcdef"; }
    }
}
EOF
    "$NGINX_BIN" -c "$d/nginx.conf" -p "$d" -e "$d/logs/error.log" &
    PIDS+=($!)
done

# ---- balancers ------------------------------------------------------------------
LB_PIDS=()
for n in 1 2; do
    d=$TMP/lb$n
    mkdir -p "$d"
    port=${LB_PORTS[$((n - 1))]}
    other=${LB_PORTS[$((2 - n))]}
    cat >"$d/gearlb.toml" <<EOF
[listen]
proxy = "127.0.0.1:$port"
status = "127.0.0.1:$((port + 1))"
[control]
socket = "$d/control.sock"
[state]
dir = "$d/data"
[health]
interval = "1s"
[cluster]
node_id = "lb$n"
id = "soak"
secret = "$SECRET"
listen = "127.0.0.1:$((port + 2))"
peers = ["127.0.0.1:$((other + 2))"]
EOF
    GEARLB_LOG=info "$GEARLB_BIN" run --config "$d/gearlb.toml" >"$d/gearlb.log" 2>&1 &
    LB_PIDS+=($!)
    PIDS+=($!)
done
ctl() { "$GEARLB_BIN" ctl --socket "$TMP/lb$1/control.sock" "${@:2}"; }
for n in 1 2; do
    for _ in $(seq 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$((LB_PORTS[n - 1] + 1))/gearlb-status.json" 2>/dev/null && break
        sleep 0.1
    done
done
entry() { echo "web$1-ns.example.com|127.0.0.1:${BACKEND_PORTS[$(($1 - 1))]}"; }
ALL="$(entry 1) $(entry 2) $(entry 3) $(entry 4)"
PEERS="'lb1'='lb1|127.0.0.1:$((LB_PORTS[0] + 2))' 'lb2'='lb2|127.0.0.1:$((LB_PORTS[1] + 2))'"
for n in 1 2; do
    ctl "$n" set-peers "$PEERS" >/dev/null
    ctl "$n" update-cluster "$ALL" >/dev/null
done
# Both balancers live in lb1's view (`ctl peers --json`: `live`, this one included).
live=0
for _ in $(seq 100); do
    live=$(ctl 1 peers --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["live"]))')
    ((live >= 2)) && break
    sleep 0.1
done
((live >= 2)) || die "lb1 sees $live live balancers, not 2"
for n in 1 2; do
    curl -fsS "http://127.0.0.1:${LB_PORTS[$((n - 1))]}/" | grep -q 0123456789abcdef || die "lb$n does not serve"
done
log "2 balancers, 4 gears up; soak for ${DURATION}s (warm-up ${WARMUP}s)"

# ---- load -----------------------------------------------------------------------
cat >"$TMP/mix.lua" <<EOF
local n = 0
local body = string.rep("p", 8192)
function delay() return $DELAY_MS end
function request()
    n = n + 1
    local r = n % 10
    if r == 0 then
        return wrk.format("GET", "/big")
    elseif r == 1 then
        return wrk.format("POST", "/", {["Content-Type"] = "text/plain"}, body)
    elseif r < 5 then
        return wrk.format("GET", "/", {["Cookie"] = "GEAR=web" .. (n % 4 + 1) .. "-ns"})
    else
        return wrk.format("GET", "/")
    end
end
EOF
WRK_PIDS=()
for n in 1 2; do
    wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --timeout 10s -s "$TMP/mix.lua" \
        "http://127.0.0.1:${LB_PORTS[$((n - 1))]}/" >"$TMP/wrk-lb$n.txt" 2>&1 &
    WRK_PIDS+=($!)
    PIDS+=($!)
done

# ---- churn, rotations, samples --------------------------------------------------
echo "t_secs,lb1_rss_kib,lb2_rss_kib" >"$TMP/rss.csv"
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
ctl_failures=0
updates=0
rotations=0
start=$(date +%s)
next_churn=$CHURN
next_rotate=$ROTATE
rotate_in_at=-1
rotated=""
next_sample=0
i=0
while :; do
    now=$(($(date +%s) - start))
    (( now >= DURATION )) && break
    for p in "${LB_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || die "a balancer died (see $TMP/lb*/gearlb.log)"; done
    if (( now >= next_sample )); then
        echo "$now,$(rss "${LB_PIDS[0]}"),$(rss "${LB_PIDS[1]}")" >>"$TMP/rss.csv"
        next_sample=$((next_sample + SAMPLE))
    fi
    if (( now >= next_churn )); then
        i=$((i + 1))
        out=$((i % 4 + 1))
        set_=""
        for g in 1 2 3 4; do [[ $g == "$out" ]] || set_="$set_ $(entry $g)"; done
        for n in 1 2; do
            ctl "$n" update-cluster "$set_" >>"$TMP/ctl.log" 2>&1 || { ctl_failures=$((ctl_failures + 1)); log "update-cluster failed on lb$n"; }
        done
        updates=$((updates + 2))
        next_churn=$((now + CHURN))
    fi
    if (( now >= next_rotate )) && [[ -z $rotated ]]; then
        rotated=web$(( (rotations % 4) + 1 ))-ns
        log "rotate-out $rotated"
        ctl 1 rotate-out "$rotated" --timeout 30s >>"$TMP/ctl.log" 2>&1 || { ctl_failures=$((ctl_failures + 1)); log "rotate-out $rotated failed"; }
        rotations=$((rotations + 1))
        rotate_in_at=$((now + ROTATE_IN))
        next_rotate=$((next_rotate + ROTATE))
    fi
    if [[ -n $rotated ]] && (( now >= rotate_in_at )); then
        ctl 1 rotate-in "$rotated" >>"$TMP/ctl.log" 2>&1 || { ctl_failures=$((ctl_failures + 1)); log "rotate-in $rotated failed"; }
        rotated=""
    fi
    sleep 1
done
for p in "${WRK_PIDS[@]}"; do wait "$p" || true; done
echo "$DURATION,$(rss "${LB_PIDS[0]}"),$(rss "${LB_PIDS[1]}")" >>"$TMP/rss.csv"
status1=$(curl -fsS "http://127.0.0.1:$((LB_PORTS[0] + 1))/gearlb-status.json" || echo '{}')
status2=$(curl -fsS "http://127.0.0.1:$((LB_PORTS[1] + 1))/gearlb-status.json" || echo '{}')
for p in "${LB_PIDS[@]}"; do kill -TERM "$p"; done
stopped=0
for p in "${LB_PIDS[@]}"; do
    if wait "$p"; then stopped=$((stopped + 1)); fi
done

# ---- report ---------------------------------------------------------------------
python3 - "$TMP" "$WARMUP" "$MAX_GROWTH" "$ctl_failures" "$updates" "$rotations" "$stopped" "$status1" "$status2" "$SMOKE" <<'EOF' | tee "$TMP/summary.txt"
import csv, json, re, sys
tmp, warmup, max_growth = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ctl_failures, updates, rotations, stopped = map(int, sys.argv[4:8])
statuses = [json.loads(s) for s in sys.argv[8:10]]
smoke = sys.argv[10] == "1"
ok = True
# The status report's fields read below (/gearlb-status.json): all must be there.
for n, st in enumerate(statuses, 1):
    fe = st.get("frontend", {})
    missing = [k for k in ("requests_total", "responses", "connections_max") if k not in fe]
    missing += [] if "5xx" in fe.get("responses", {}) else ["responses.5xx"]
    missing += [] if st.get("backends") and all("errors" in b for b in st["backends"]) else ["backends[].errors"]
    if missing:
        print(f"  lb{n} status: missing {', '.join('frontend.' + m for m in missing)}")
        ok = False
def wrk(path):
    t = open(path).read()
    req = re.search(r"(\d+) requests in", t)
    err = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
    non2 = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    lat = re.search(r"Latency\s+(\S+)\s+(\S+)\s+(\S+)", t)
    return (int(req.group(1)) if req else 0,
            sum(map(int, err.groups())) if err else 0,
            int(non2.group(1)) if non2 else 0,
            lat.groups() if lat else ("?", "?", "?"))
print("load (wrk, mixed GET / GET /big / POST 8 KiB):")
for n in (1, 2):
    r, e, bad, lat = wrk(f"{tmp}/wrk-lb{n}.txt")
    print(f"  lb{n}: {r} requests, socket errors {e}, non-2xx/3xx {bad}, latency avg {lat[0]} stdev {lat[1]} max {lat[2]}")
    ok &= r > 0 and e == 0 and bad == 0
print(f"control: {updates} update-cluster, {rotations} rotate-out/in pairs, {ctl_failures} failed")
ok &= ctl_failures == 0
for n, st in enumerate(statuses, 1):
    fe = st.get("frontend", {})
    errs = sum(b.get("errors", 0) for b in st.get("backends", []))
    print(f"  lb{n} status: requests_total {fe.get('requests_total')}, 5xx {fe.get('responses', {}).get('5xx')}, backend errors {errs}, connections_max {fe.get('connections_max')}")
rows = list(csv.DictReader(open(f"{tmp}/rss.csv")))
print("memory (VmRSS, KiB):")
print("  t_secs  lb1      lb2")
step = max(1, len(rows) // 20)
for row in rows[::step] + ([rows[-1]] if (len(rows) - 1) % step else []):
    print(f"  {int(row['t_secs']):6d}  {row['lb1_rss_kib']:>7}  {row['lb2_rss_kib']:>7}")
for lb in ("lb1_rss_kib", "lb2_rss_kib"):
    after = [(int(r["t_secs"]), int(r[lb])) for r in rows if int(r["t_secs"]) >= warmup]
    if len(after) < 6:
        print(f"  {lb}: too few samples after the warm-up"); ok = False; continue
    # RSS swings by a few MiB with the responses in flight (32 connections x 256 KiB),
    # so compare windows, not single samples: the mean of the first tenth of the
    # samples after the warm-up (at least 3) against the mean of the last tenth.
    w = max(3, len(after) // 10)
    base = sum(v for _, v in after[:w]) / w
    end = sum(v for _, v in after[-w:]) / w
    peak = max(v for _, v in after)
    growth = 100.0 * (end - base) / base
    # Least-squares trend over everything after the warm-up, per hour.
    n = len(after)
    mt = sum(t for t, _ in after) / n
    mv = sum(v for _, v in after) / n
    slope = sum((t - mt) * (v - mv) for t, v in after) / max(1e-9, sum((t - mt) ** 2 for t, _ in after))
    print(f"  {lb[:3]}: {base:.0f} KiB (mean of the first {w} samples after the warm-up), {end:.0f} KiB (mean of the last {w}), peak {peak}: growth {growth:+.2f}% (limit {max_growth}%); trend {slope * 3600:+.0f} KiB/h")
    ok &= growth < max_growth or smoke  # SMOKE=1 judges no memory: too short
print(f"stop: {stopped}/2 balancers exited 0 on SIGTERM")
ok &= stopped == 2
print("RESULT:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
EOF
