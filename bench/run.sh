#!/usr/bin/env bash
# bench/run.sh - gearlb next to HAProxy 2.6 (old cartridge config and keep-alive reuse)
# and direct-to-backend, in one invocation, alternating rounds, with ratios.
#
# Usage:  bash bench/run.sh                     (from anywhere; see bench/README.md)
#         ROUNDS=5 bash bench/run.sh
#         SCENARIOS="peak_small fixed_rate" TARGETS="gearlb haproxy-reuse" bash bench/run.sh
#
# Topology (all on 127.0.0.1):
#
#   wrk / openloop / oha / idle_clients.py --> TARGET --> nginx backends web1..web3
#
#   Backends: three nginx processes (Debian's nginx / nginx-light), one worker each, on
#   ports 19001-19003, each also listening on a third of MANY_N extra ports (20000-...)
#   for the N=1000-backends scenario; every request to / answered with the fixed 16-byte
#   body "0123456789abcdef", /1m.bin with a 1 MiB file; access_log off; keep-alive on.
#   Generated config in a temp dir; the system nginx service and /etc/nginx are never
#   used or touched.
#
# Targets (TARGETS, each started fresh before each measurement and stopped after it):
#   gearlb         target/release/gearlb, [runtime] threads = THREADS, port 18080
#   haproxy-close  HAProxy 2.6, nbthread THREADS, the old cartridge's config
#                  (bench/configs/haproxy-close.cfg.in: option http-server-close,
#                  balance leastconn, cookie GEAR insert indirect nocache, httpchk), 18090
#   haproxy-reuse  HAProxy 2.6, nbthread THREADS, keep-alive both sides, http-reuse always
#                  (bench/configs/haproxy-reuse.cfg.in), port 18091
#   haproxy-fwd    haproxy-reuse that also sets the forwarding headers gearlb sets by
#                  default (X-Forwarded-For/-Proto): the same work per request
#                  (bench/configs/haproxy-fwd.cfg.in), port 18092; not a default
#   haproxy-last   haproxy-reuse with `option prefer-last-server`: a client connection's
#                  next request goes to the server of its previous one, HAProxy's form
#                  of gearlb's connection_affinity (bench/configs/haproxy-last.cfg.in),
#                  port 18093; not a default
#   gearlb-allfwd  gearlb setting all five forwarding headers it can (also
#                  X-Forwarded-Host/-Port, Forwarded; its default before 2026-11-22),
#                  port 18080; not a default
#   gearlb-noaff   gearlb with [proxy] connection_affinity = 0: every request chosen
#                  afresh (its behaviour before 2026-11-22), port 18080; not a default
#   gearlb-alt     gearlb's configuration run by another binary, GEARLB_ALT_BIN (e.g. the
#                  packaged cartridge's bin/gearlb next to target/release/gearlb),
#                  port 18080; not a default
#   direct         straight to web1 (127.0.0.1:19001): the ceiling of this machine
#
# Scenarios (SCENARIOS, run in this order; targets alternate within each round):
#   peak_small     peak req/s, 16-byte responses, keep-alive clients (wrk -t1 -cCONNECTIONS)
#   peak_capped    peak_small with the proxy held to a gear's CPU quota (CAP_PERCENT% of
#                  one CPU, cgroup cpu.max / cpu.cfs_quota_us): the proxy's cost per request
#                  sets the peak, where peak_small on 2 CPUs meets the load side first
#   fixed_rate     p50/p99/p99.9 at a fixed rate of 50% of haproxy-reuse's peak, open loop
#                  and corrected for coordinated omission: bench/openloop (FIXED_LOAD=oha:
#                  oha -q --latency-correction, whose own pauses set its p99: bench/RESULTS.md)
#   new_conn       a new client connection per request (wrk, Connection: close)
#   large_body     1 MiB responses: MB/s (wrk -cLARGE_CONNECTIONS)
#   many_backends  peak req/s with N=3 and N=MANY_N backends (selection cost)
#   many_routes    gearlb's peak req/s with R=1 and R=MANY_ROUTES routes (route lookup
#                  cost: one service with that many hosts, half exact, half wildcards)
#   churn          peak load while the backend set changes CHURN_HZ times a second
#                  (gearlb: gearlb ctl update-cluster; haproxy: new process, -sf old)
#   idle_memory    resident memory (VmRSS) with IDLE_CONNS idle keep-alive clients
#   instructions   the proxy's user-space instructions per request, counted by valgrind
#                  (callgrind) over INSTR_REQUESTS requests: the same count whatever the
#                  host is doing, where req/s moves 10% from round to round;
#                  KEEP_CALLGRIND=DIR keeps each run's callgrind dump there (read it
#                  with callgrind_annotate --inclusive=yes for a request's budget);
#                  INSTR_BODY=N sends POSTs with an N-byte body instead of GETs;
#                  INSTR_TLS=1 has the proxies listen with TLS (an ECDSA P-256
#                  certificate, TLS 1.3 from oha) and oha connect over https
#
# CPU pinning (PIN=1, the default; PIN=0 disables; also disabled if nproc < 2):
#   CPU 1 (PROXY_CPUS)  the proxy under test (gearlb / haproxy, all their threads;
#                       haproxy also gets cpu-map)
#   CPU 0 (LOAD_CPUS)   wrk, openloop, oha, idle_clients.py, gearlb ctl, and the backend nginx
#
# Variables (defaults in brackets): see bench/README.md for the full list.
#
# Exit status: 0 only if every target started, answered correctly and every measured
# run had no errors where errors are not the point of the scenario (churn reports the
# errors HAProxy's reloads cause; gearlb must have none there either).

set -euo pipefail

# ---- settings -------------------------------------------------------------------

# The command as given, for the report's header: taken before SCENARIOS and TARGETS
# become arrays below (bash does not export arrays, so `env` would lose them).
# With none of them set, grep finds nothing: not an error.
COMMAND_LINE="$({ env | grep -E '^(DURATION|WARMUP|CONNECTIONS|THREADS|ROUNDS|SCENARIOS?|TARGETS|PIN|PROXY_CPUS|LOAD_CPUS|FIXED_[A-Z]+|LARGE_CONNECTIONS|MANY_N|MANY_ROUTES|CHURN_HZ|IDLE_CONNS|INSTR_REQUESTS|INSTR_BODY|INSTR_TLS|CAP_PERCENT|CAP_PERIOD_US|REF)=' || true; } | sort | tr '\n' ' ')bash bench/run.sh"

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-3}
PIN=${PIN:-1}
PROXY_CPUS=${PROXY_CPUS:-1}
LOAD_CPUS=${LOAD_CPUS:-0}
BUILD=${BUILD:-1}
KEEP_TMP=${KEEP_TMP:-0}
FIXED_DURATION=${FIXED_DURATION:-20}
FIXED_FRACTION=${FIXED_FRACTION:-50}   # percent of haproxy-reuse's peak
FIXED_RATE=${FIXED_RATE:-}             # req/s; empty: FIXED_FRACTION of the measured peak
FIXED_LOAD=${FIXED_LOAD:-openloop}     # fixed_rate's load: openloop (bench/openloop) or oha
LARGE_CONNECTIONS=${LARGE_CONNECTIONS:-16}
MANY_N=${MANY_N:-1000}
MANY_ROUTES=${MANY_ROUTES:-10000}
ROUTE_LAST=$((MANY_ROUTES / 2 - 1))
RUN_ROUTES=0
CHURN_HZ=${CHURN_HZ:-10}
IDLE_CONNS=${IDLE_CONNS:-10000}
INSTR_REQUESTS=${INSTR_REQUESTS:-20000}
INSTR_BODY=${INSTR_BODY:-0}           # instructions: POST bodies of this many bytes (0: GET)
INSTR_TLS=${INSTR_TLS:-0}             # instructions: 1 = over TLS (https)
RUN_TLS=0
CAP_PERCENT=${CAP_PERCENT:-50}        # peak_capped: the proxy's CPU quota, % of one CPU
CAP_PERIOD_US=${CAP_PERIOD_US:-100000} # ... over this period (the node's cpu_cfs_period_us)
REF=${REF:-haproxy-reuse}             # the target ratios are computed against

ALL_SCENARIOS="peak_small peak_capped fixed_rate new_conn large_body many_backends many_routes churn idle_memory instructions"
# SCENARIO (one name) is kept for compatibility with the first version of this script.
read -r -a SCENARIOS <<<"${SCENARIOS:-${SCENARIO:-$ALL_SCENARIOS}}"
read -r -a TARGETS <<<"${TARGETS:-gearlb haproxy-close haproxy-reuse direct}"

BACKEND_PORTS=(19001 19002 19003)
MANY_BASE=20000 # MANY_N extra backend ports from here, spread over the three nginx
BODY=0123456789abcdef # 16 bytes, the fixed response of every backend
LARGE_BYTES=1048576
GEARLB_PORT=18080
GEARLB_STATUS_PORT=18081
GEARLB_TLS_PORT=18082
HAPROXY_CLOSE_PORT=18090
HAPROXY_REUSE_PORT=18091
HAPROXY_FWD_PORT=18092
HAPROXY_LAST_PORT=18093

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
GEARLB_BIN=${GEARLB_BIN:-$REPO/target/release/gearlb}
GEARLB_ALT_BIN=${GEARLB_ALT_BIN:-} # the binary of target gearlb-alt
OHA_BIN=${OHA_BIN:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
OPENLOOP_BIN=${OPENLOOP_BIN:-$REPO/target/release/openloop} # bench/openloop, built by ensure_tools

# ---- helpers --------------------------------------------------------------------

log() { printf '[bench] %s\n' "$*" >&2; }
die() {
    printf '[bench] ERROR: %s\n' "$*" >&2
    exit 1
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

for v in DURATION WARMUP CONNECTIONS THREADS ROUNDS FIXED_DURATION FIXED_FRACTION \
    LARGE_CONNECTIONS MANY_N CHURN_HZ IDLE_CONNS INSTR_REQUESTS; do
    is_uint "${!v}" || die "$v must be a non-negative integer, got '${!v}'"
done
[[ -z $FIXED_RATE ]] || is_uint "$FIXED_RATE" || die "FIXED_RATE must be an integer"
((DURATION > 0)) || die "DURATION must be > 0"
((CONNECTIONS > 0)) || die "CONNECTIONS must be > 0"
((ROUNDS > 0)) || die "ROUNDS must be > 0"
((MANY_N >= 3 && MANY_N <= 10000)) || die "MANY_N must be 3..10000"
((CHURN_HZ > 0)) || die "CHURN_HZ must be > 0"
((INSTR_REQUESTS > 0)) || die "INSTR_REQUESTS must be > 0"
((${#TARGETS[@]} > 0)) || die "TARGETS is empty"

need() {
    command -v "$1" >/dev/null 2>&1 ||
        die "'$1' not found; install it: apt-get update && apt-get install -y $2"
}

# apt_need CMD PACKAGE: install PACKAGE from Debian when CMD is missing (root only).
apt_need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    [[ $(id -u) == 0 ]] || die "'$1' not found; install it: apt-get install -y $2"
    log "installing $2 (apt-get)"
    if [[ -z ${APT_UPDATED:-} ]]; then
        apt-get update -qq >/dev/null || die "apt-get update failed"
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null ||
        die "apt-get install $2 failed"
    command -v "$1" >/dev/null 2>&1 || die "'$1' still missing after installing $2"
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_until SECONDS DESCRIPTION PID COMMAND...: poll COMMAND every 0.1s; fail if PID dies
# or the time runs out.
wait_until() {
    local secs=$1 what=$2 pid=$3 i
    shift 3
    for ((i = 0; i < secs * 10; i++)); do
        if "$@"; then return 0; fi
        kill -0 "$pid" 2>/dev/null || die "$what: process $pid exited before becoming ready"
        sleep 0.1
    done
    die "$what: not ready after ${secs}s"
}

# ---- a gear's CPU quota (peak_capped) ----------------------------------------------

CAP_CGROUP="" # this run's CPU-quota cgroup, made on first use

# cap_cpu PID: moves the process (all its threads) into this run's CPU-quota cgroup:
# CAP_PERCENT% of one CPU over CAP_PERIOD_US, through cgroup v2's cpu.max where the
# unified hierarchy has the cpu controller, else v1's cpu.cfs_quota_us (what the node's
# cgroups set for a gear). The process leaves it when it exits.
cap_cpu() {
    [[ -n $CAP_CGROUP ]] || make_cap_cgroup
    echo "$1" >"$CAP_CGROUP/cgroup.procs" 2>/dev/null ||
        die "cannot move process $1 into the CPU-quota cgroup $CAP_CGROUP"
}

# check_cap: CAP_PERCENT and CAP_PERIOD_US make a quota the kernel takes (checked before
# anything starts).
check_cap() {
    [[ $CAP_PERCENT =~ ^[0-9]+$ && $CAP_PERIOD_US =~ ^[0-9]+$ ]] ||
        die "CAP_PERCENT=$CAP_PERCENT and CAP_PERIOD_US=$CAP_PERIOD_US must be whole numbers"
    local quota=$((CAP_PERIOD_US * CAP_PERCENT / 100))
    ((CAP_PERCENT > 0 && CAP_PERIOD_US >= 1000 && CAP_PERIOD_US <= 1000000 && quota >= 1000)) ||
        die "CAP_PERCENT=$CAP_PERCENT of CAP_PERIOD_US=$CAP_PERIOD_US µs: the period must be 1000-1000000 µs and the quota at least 1000 µs"
}

make_cap_cgroup() {
    check_cap
    local quota=$((CAP_PERIOD_US * CAP_PERCENT / 100)) root=/sys/fs/cgroup dir
    if [[ -f $root/cgroup.controllers ]] && grep -qw cpu "$root/cgroup.controllers"; then
        grep -qw cpu "$root/cgroup.subtree_control" || echo +cpu >"$root/cgroup.subtree_control" ||
            die "cannot enable the cgroup v2 cpu controller in $root"
        dir=$root/gearlb-bench-$$
        { mkdir "$dir" && echo "$quota $CAP_PERIOD_US" >"$dir/cpu.max"; } ||
            die "cannot make the CPU-quota cgroup $dir"
    elif [[ -f $root/cpu/cpu.cfs_quota_us ]]; then
        dir=$root/cpu/gearlb-bench-$$
        { mkdir "$dir" && echo "$CAP_PERIOD_US" >"$dir/cpu.cfs_period_us" &&
            echo "$quota" >"$dir/cpu.cfs_quota_us"; } || die "cannot make the CPU-quota cgroup $dir"
    else
        die "peak_capped needs the cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us) and root"
    fi
    CAP_CGROUP=$dir
    log "CPU quota: $quota µs every $CAP_PERIOD_US µs ($CAP_PERCENT% of one CPU) in $dir"
}

# remove_cap_cgroup: the cgroup goes once its processes have; any left go back to the
# parent first.
remove_cap_cgroup() {
    [[ -n $CAP_CGROUP && -d $CAP_CGROUP ]] || return 0
    local pid
    while read -r pid; do
        echo "$pid" >"$(dirname "$CAP_CGROUP")/cgroup.procs" 2>/dev/null || true
    done <"$CAP_CGROUP/cgroup.procs"
    rmdir "$CAP_CGROUP" 2>/dev/null || log "could not remove the cgroup $CAP_CGROUP"
    CAP_CGROUP=""
}

# Prefixes that pin a command to a CPU set (or do nothing when PIN=0).
PIN_PROXY=()
PIN_LOAD=()
setup_pinning() {
    if [[ $PIN == 1 ]] && (($(nproc) < 2)); then
        log "only $(nproc) CPU: pinning disabled"
        PIN=0
    fi
    if [[ $PIN == 1 ]]; then
        need taskset util-linux
        PIN_PROXY=(taskset -c "$PROXY_CPUS")
        PIN_LOAD=(taskset -c "$LOAD_CPUS")
    fi
}
# Use them as `"${PIN_PROXY[@]}" cmd ... &`. Never background a shell function or a
# `( ... )` instead: $! would then be a subshell, and killing it would orphan the real
# process. start_process checks for exactly that.

# median: the median of the numbers on stdin ("?" if none).
median() {
    # "-" (not measured for that target) and "?" (unknown) are left out.
    sort -g | awk '$1 != "-" && $1 != "?" { v[++n] = $1 } END {
        if (n == 0) { print "?"; exit }
        if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# ---- process bookkeeping and cleanup --------------------------------------------

TMP=""
PIDS=() # every background process this script started; killed on exit

# kill_wait PID [SIGNAL] [SECONDS]: signal one of our processes and wait for it; SIGKILL
# after SECONDS. Returns 1 if it had to be killed.
kill_wait() {
    local pid=$1 sig=${2:-TERM} secs=${3:-10} i
    kill -0 "$pid" 2>/dev/null || {
        wait "$pid" 2>/dev/null || true
        return 0
    }
    kill -s "$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null || true
            return 0
        fi
        sleep 0.1
    done
    log "process $pid ignored SIG$sig for ${secs}s; sending SIGKILL"
    kill -s KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
}

forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

cleanup() {
    local rc=$? pid
    set +e
    trap - EXIT INT TERM HUP
    for pid in "${PIDS[@]}"; do kill_wait "$pid" TERM 5; done
    remove_cap_cgroup
    if [[ -n $TMP && -d $TMP ]]; then
        # Keep it for post-mortems of failures, not after Ctrl-C / SIGTERM / SIGHUP.
        if [[ $KEEP_TMP == 1 ]] || ((rc != 0 && rc != 129 && rc != 130 && rc != 143)); then
            log "kept temp dir (configs, logs, raw outputs): $TMP"
        else
            rm -rf "$TMP"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM
trap 'exit 129' HUP

# start_process NAME LOGFILE CMD...: run CMD in the background (stdout+stderr to LOGFILE),
# record its pid in PIDS and in the global LAST_PID.
LAST_PID=""
start_process() {
    local name=$1 logfile=$2
    shift 2
    "$@" >>"$logfile" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# check_exe PID BINARY: fail unless PID runs BINARY itself (not a wrapper or subshell).
check_exe() {
    local exe
    exe=$(readlink "/proc/$1/exe" 2>/dev/null || true)
    exe=${exe% (deleted)} # the binary may have been rebuilt meanwhile
    [[ -z $exe || ${exe##*/} == "$(basename "$(readlink -f "$2")")" ]] ||
        die "pid $1 runs $exe, not $2: the harness would not be able to stop it"
}

# rss_kib PID: resident memory of one process, KiB.
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# ---- backends: nginx ------------------------------------------------------------

NGINX_BIN=""

# The compiled-in temp paths point at /var/lib/nginx; point every one the binary
# knows about into our prefix so the backends touch nothing outside the temp dir.
nginx_temp_paths() {
    local v m
    v=$("$NGINX_BIN" -V 2>&1)
    echo "        client_body_temp_path tmp/body;"
    for m in proxy fastcgi uwsgi scgi; do
        [[ $v == *"--without-http_${m}_module"* ]] || echo "        ${m}_temp_path tmp/${m};"
    done
}

# many_ports: the MANY_N backend ports of the many_backends scenario (one per line).
many_ports() {
    local i
    for ((i = 0; i < MANY_N; i++)); do echo $((MANY_BASE + i)); done
}

start_backends() {
    local i port dir pid p listens
    NGINX_BIN=$(command -v nginx || true)
    [[ -n $NGINX_BIN ]] || NGINX_BIN=/usr/sbin/nginx
    [[ -x $NGINX_BIN ]] || die "nginx not found; install it: apt-get update && apt-get install -y nginx-light"
    mkdir -p "$TMP/www"
    # nginx workers run as nobody: they must be able to read the files.
    chmod 755 "$TMP" "$TMP/www"
    printf '%s' "$BODY" >"$TMP/www/index.txt"
    head -c "$LARGE_BYTES" /dev/zero | tr '\0' 'x' >"$TMP/www/1m.bin"
    for i in "${!BACKEND_PORTS[@]}"; do
        port=${BACKEND_PORTS[$i]}
        dir=$TMP/web$((i + 1))
        mkdir -p "$dir/tmp" "$dir/logs"
        # The many_backends ports, dealt round-robin over the three processes.
        listens=""
        if [[ " ${SCENARIOS[*]} " == *" many_backends "* ]]; then
            while read -r p; do
                (((p - MANY_BASE) % ${#BACKEND_PORTS[@]} == i)) &&
                    listens+="        listen 127.0.0.1:$p backlog=4096;"$'\n'
            done < <(many_ports)
        fi
        # Runs as root usually; workers then drop to the default user (nobody).
        cat >"$dir/nginx.conf" <<EOF
# generated by bench/run.sh: backend web$((i + 1))
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65536;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events {
    # Room for every client plus the connections of earlier runs still closing.
    worker_connections 32768;
}
http {
    access_log off;
    default_type text/plain;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
    sendfile on;
    tcp_nopush on;
$(nginx_temp_paths)
    server {
        listen 127.0.0.1:$port backlog=4096;
$listens
        location = /1m.bin {
            root $TMP/www;
        }
        location / {
            return 200 "$BODY";
        }
    }
}
EOF
        "$NGINX_BIN" -t -q -c "$dir/nginx.conf" -p "$dir/" -e "$dir/logs/error.log" ||
            die "backend web$((i + 1)): invalid nginx config $dir/nginx.conf"
        port_open "$port" && die "port $port already in use (backend web$((i + 1)))"
        start_process "web$((i + 1))" "$dir/logs/stdout.log" \
            "${PIN_LOAD[@]}" "$NGINX_BIN" -c "$dir/nginx.conf" -p "$dir/" -e "$dir/logs/error.log"
        pid=$LAST_PID
        wait_until 30 "backend web$((i + 1)) (nginx, port $port)" "$pid" port_open "$port"
        check_exe "$pid" "$NGINX_BIN"
    done
    for port in "${BACKEND_PORTS[@]}"; do
        check_body "http://127.0.0.1:$port/" "backend on port $port"
    done
    if [[ " ${SCENARIOS[*]} " == *" many_backends "* ]]; then
        check_body "http://127.0.0.1:$MANY_BASE/" "backend on port $MANY_BASE"
        check_body "http://127.0.0.1:$((MANY_BASE + MANY_N - 1))/" \
            "backend on port $((MANY_BASE + MANY_N - 1))"
    fi
    local got
    got=$(curl -sS --max-time 5 -o /dev/null -w '%{size_download}' "http://127.0.0.1:${BACKEND_PORTS[0]}/1m.bin")
    [[ $got == "$LARGE_BYTES" ]] || die "backend /1m.bin gave $got bytes, expected $LARGE_BYTES"
    log "backends up: ports ${BACKEND_PORTS[*]} (nginx $("$NGINX_BIN" -v 2>&1 | sed 's/.*nginx\///'))"
}

check_body() {
    local url=$1 what=$2 got hdr=()
    # many_routes: the requests' host is one of the service's.
    ((RUN_ROUTES > 0)) && [[ $what == target* ]] && hdr=(-H "Host: x.w$ROUTE_LAST.bench.example")
    [[ $url == https:* ]] && hdr+=(--insecure)
    got=$(curl -sS --max-time 5 "${hdr[@]}" "$url") || die "$what: request to $url failed"
    [[ $got == "$BODY" ]] || die "$what: $url answered '$got', expected '$BODY'"
}

# ---- what a run needs from its target ---------------------------------------------
#
# The scenario being run sets these before the target starts:
#   RUN_PORTS     backend ports the proxy forwards to (3, or MANY_N)
#   RUN_IDLE      1: raised connection limits and idle timeouts (idle_memory)
#   RUN_WRAP      a command the proxy runs under (instructions: valgrind), or empty
RUN_PORTS=()
RUN_IDLE=0
RUN_WRAP=()

# ---- targets --------------------------------------------------------------------
#
# One start_<name> / stop_<name> pair per target, plus a case in target_url. start_*
# returns only once the target serves traffic (start_target then checks the response
# body through it); stop_* stops everything start_* started and fails if that did not
# go cleanly. Processes are started with start_process (so the exit trap can kill
# them) and "${PIN_PROXY[@]}" (CPU pinning); they get THREADS worker threads.

GEARLB_PID=""

gearlb_healthy() {
    local path=/health
    ((RUN_ROUTES > 0)) && path=/health/bench
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
        "http://127.0.0.1:$GEARLB_STATUS_PORT$path") == 200 ]]
}

write_gearlb_config() {
    local dir=$1 i p
    {
        echo "# generated by bench/run.sh"
        echo "[runtime]"
        echo "threads = $THREADS"
        echo "[listen]"
        echo "proxy = \"127.0.0.1:$GEARLB_PORT\""
        echo "status = \"127.0.0.1:$GEARLB_STATUS_PORT\""
        if [[ $RUN_TLS == 1 ]]; then
            echo "tls = \"127.0.0.1:$GEARLB_TLS_PORT\""
            echo "[tls]"
            echo "cert = \"$TMP/tls/cert.pem\""
            echo "key = \"$TMP/tls/key.pem\""
        fi
        echo "[control]"
        echo "socket = \"$dir/control.sock\""
        echo "[state]"
        echo "dir = \"$dir/data\""
        echo "[proxy]"
        if [[ -n ${GEARLB_FORWARDED:-} ]]; then
            echo "forwarded_headers = $GEARLB_FORWARDED"
        fi
        if [[ -n ${GEARLB_AFFINITY:-} ]]; then
            echo "connection_affinity = $GEARLB_AFFINITY"
        fi
        if [[ $RUN_IDLE == 1 ]]; then
            # Idle keep-alive connections must outlive the measurement (default 10s).
            echo "[timeouts]"
            echo "client = \"5m\""
            echo "request_header = \"5m\""
            echo "[limits]"
            echo "max_connections = $((IDLE_CONNS + 2000))"
        fi
        if ((RUN_ROUTES > 0)); then
            # many_routes: one service whose hosts are the routes; every request is for
            # the last wildcard (x.w$((ROUTE_LAST)).bench.example), past an exact miss.
            echo "[[services]]"
            echo "name = \"bench\""
            echo "hosts = ["
            if ((RUN_ROUTES == 1)); then
                echo "  \"*.w$ROUTE_LAST.bench.example\","
            else
                for ((i = 0; i < RUN_ROUTES / 2; i++)); do
                    echo "  \"h$i.bench.example\", \"*.w$i.bench.example\","
                done
            fi
            echo "]"
            i=0
            for p in "${RUN_PORTS[@]}"; do
                i=$((i + 1))
                echo "[[services.backends]]"
                echo "name = \"web$i\""
                echo "addr = \"127.0.0.1:$p\""
            done
        else
            i=0
            for p in "${RUN_PORTS[@]}"; do
                i=$((i + 1))
                echo "[[backends]]"
                echo "name = \"web$i\""
                echo "addr = \"127.0.0.1:$p\""
            done
        fi
    } >"$dir/gearlb.toml"
}

# start_gearlb-allfwd: gearlb with every forwarding header (see Targets above).
start_gearlb-allfwd() {
    GEARLB_FORWARDED='["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-port", "forwarded"]' \
        start_gearlb
}
stop_gearlb-allfwd() { stop_gearlb; }

# start_gearlb-noaff: gearlb choosing every request afresh (see Targets above).
start_gearlb-noaff() { GEARLB_AFFINITY=0 start_gearlb; }
stop_gearlb-noaff() { stop_gearlb; }

# start_gearlb-alt: the same as gearlb, from the binary GEARLB_ALT_BIN.
start_gearlb-alt() {
    [[ -x $GEARLB_ALT_BIN ]] || die "target gearlb-alt needs GEARLB_ALT_BIN=path to a gearlb binary"
    GEARLB_BIN=$GEARLB_ALT_BIN start_gearlb
}
stop_gearlb-alt() { stop_gearlb; }

start_gearlb() {
    local dir=$TMP/gearlb
    rm -rf "$dir"
    mkdir -p "$dir/data"
    write_gearlb_config "$dir"
    port_open "$GEARLB_PORT" && die "port $GEARLB_PORT already in use (gearlb proxy)"
    port_open "$GEARLB_STATUS_PORT" && die "port $GEARLB_STATUS_PORT already in use (gearlb status)"
    [[ $RUN_TLS == 1 ]] && port_open "$GEARLB_TLS_PORT" && die "port $GEARLB_TLS_PORT already in use (gearlb tls)"
    start_process gearlb "$dir/gearlb.log" \
        env GEARLB_LOG="${GEARLB_LOG:-warn}" "${PIN_PROXY[@]}" "${RUN_WRAP[@]}" "$GEARLB_BIN" run --config "$dir/gearlb.toml"
    GEARLB_PID=$LAST_PID
    wait_until 60 "gearlb (log: $dir/gearlb.log)" "$GEARLB_PID" gearlb_healthy
    ((${#RUN_WRAP[@]})) || check_exe "$GEARLB_PID" "$GEARLB_BIN"
}

stop_gearlb() {
    local pid=$GEARLB_PID rc=0 i
    [[ -n $pid ]] || return 0
    GEARLB_PID=""
    forget_pid "$pid"
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || rc=$?
        die "gearlb (pid $pid) died during the run with status $rc; log: $TMP/gearlb/gearlb.log"
    fi
    kill -s TERM "$pid"
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -s KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        die "gearlb (pid $pid) did not stop within 15s of SIGTERM; log: $TMP/gearlb/gearlb.log"
    fi
    wait "$pid" || rc=$?
    ((rc == 0)) || die "gearlb exited with status $rc after SIGTERM; log: $TMP/gearlb/gearlb.log"
}

# ---- HAProxy ----------------------------------------------------------------------

HAPROXY_BIN=""
HAPROXY_PID=""      # the current (newest) haproxy process
HAPROXY_OLD_PIDS=() # processes replaced by a reload (-sf), finishing their connections

haproxy_port() {
    case $1 in
    haproxy-close) echo "$HAPROXY_CLOSE_PORT" ;;
    haproxy-reuse) echo "$HAPROXY_REUSE_PORT" ;;
    haproxy-fwd) echo "$HAPROXY_FWD_PORT" ;;
    haproxy-last) echo "$HAPROXY_LAST_PORT" ;;
    esac
}

# write_haproxy_config NAME FILE PORT...: the template bench/configs/NAME.cfg.in with the
# given backend ports as server lines (cookie value = server name, checks as the
# cartridge: fall 2 rise 3 inter 2000).
write_haproxy_config() {
    local name=$1 file=$2 i=0 p servers="" gmax mmax tclient tka
    shift 2
    for p in "$@"; do
        i=$((i + 1))
        servers+="    server gear-web$i 127.0.0.1:$p check fall 2 rise 3 inter 2000 cookie web$i"$'\n'
    done
    # The cartridge's limits (maxconn 256 global, 128 per proxy) for haproxy-close; no
    # queueing limit for haproxy-reuse; room for the idle clients in idle_memory.
    # (HAProxy wants two descriptors per connection: limits fit under `ulimit -n`.)
    local extra=""
    case $name in
    haproxy-close) gmax=256 mmax=128 ;;
    *) gmax=4000 mmax=4000 ;;
    esac
    tclient=1m tka=10s
    if [[ $RUN_IDLE == 1 ]]; then
        gmax=$((IDLE_CONNS + 500)) mmax=$((IDLE_CONNS + 500)) tclient=5m tka=5m
        # Idle clients need one descriptor each, not two: start even if maxconn * 2 is
        # over the open-files limit.
        extra="    no strict-limits"
    fi
    awk -v servers="$servers" -v port="$(haproxy_port "$name")" -v threads="$THREADS" \
        -v cpus="$PROXY_CPUS" -v gmax="$gmax" -v mmax="$mmax" -v tclient="$tclient" \
        -v tka="$tka" -v dir="$TMP/$name" -v extra="$extra" '
        { gsub(/@PORT@/, port); gsub(/@THREADS@/, threads); gsub(/@PROXY_CPUS@/, cpus)
          gsub(/@GLOBAL_MAXCONN@/, gmax); gsub(/@MAXCONN@/, mmax)
          gsub(/@TIMEOUT_CLIENT@/, tclient); gsub(/@TIMEOUT_KEEPALIVE@/, tka)
          gsub(/@DIR@/, dir) }
        /^@SERVERS@$/ { printf "%s", servers; next }
        /^global/ { print; if (extra != "") print extra; next }
        { print }' "$SCRIPT_DIR/configs/$name.cfg.in" >"$file"
    [[ $PIN == 1 ]] || sed -i '/cpu-map/d' "$file"
}

check_haproxy_config() {
    "$HAPROXY_BIN" -c -q -f "$1" >/dev/null 2>&1 ||
        die "invalid HAProxy config $1: $("$HAPROXY_BIN" -c -f "$1" 2>&1 | tail -5)"
}

start_haproxy_named() {
    local name=$1 dir=$TMP/$1 port
    port=$(haproxy_port "$name")
    rm -rf "$dir"
    mkdir -p "$dir"
    write_haproxy_config "$name" "$dir/haproxy.cfg" "${RUN_PORTS[@]}"
    if [[ $RUN_TLS == 1 ]]; then
        sed -i "s|^\(    bind 127\.0\.0\.1:[0-9]*\)\$|\1 ssl crt $TMP/tls/combined.pem|" "$dir/haproxy.cfg"
        grep -q ' ssl crt ' "$dir/haproxy.cfg" || die "no TLS bind line in $dir/haproxy.cfg"
    fi
    check_haproxy_config "$dir/haproxy.cfg"
    port_open "$port" && die "port $port already in use ($name)"
    # -db: foreground, no daemon; one process with THREADS threads.
    start_process "$name" "$dir/haproxy.log" \
        "${PIN_PROXY[@]}" "${RUN_WRAP[@]}" "$HAPROXY_BIN" -db -f "$dir/haproxy.cfg"
    HAPROXY_PID=$LAST_PID
    HAPROXY_OLD_PIDS=()
    wait_until 60 "$name (log: $dir/haproxy.log)" "$HAPROXY_PID" port_open "$port"
    ((${#RUN_WRAP[@]})) || check_exe "$HAPROXY_PID" "$HAPROXY_BIN"
}

# reload_haproxy NAME CONFIG: the cartridge's reload: a new process on the new config,
# `-sf OLD` so the old one stops listening and finishes its connections.
reload_haproxy() {
    local name=$1 cfg=$2 old=$HAPROXY_PID
    start_process "$name" "$TMP/$name/haproxy.log" \
        "${PIN_PROXY[@]}" "$HAPROXY_BIN" -db -f "$cfg" -sf "$old"
    HAPROXY_PID=$LAST_PID
    HAPROXY_OLD_PIDS+=("$old")
}

stop_haproxy_named() {
    local name=$1 pid=$HAPROXY_PID p rc=0
    [[ -n $pid ]] || return 0
    HAPROXY_PID=""
    for p in "${HAPROXY_OLD_PIDS[@]}"; do
        forget_pid "$p"
        kill_wait "$p" TERM 10 || true
    done
    HAPROXY_OLD_PIDS=()
    forget_pid "$pid"
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || rc=$?
        die "$name (pid $pid) died during the run with status $rc; log: $TMP/$name/haproxy.log"
    fi
    # SIGUSR1: soft stop (finish connections, then exit 0).
    kill -s USR1 "$pid"
    kill_wait "$pid" USR1 15 || die "$name (pid $pid) did not stop within 15s"
}

start_haproxy-close() { start_haproxy_named haproxy-close; }
stop_haproxy-close() { stop_haproxy_named haproxy-close; }
start_haproxy-reuse() { start_haproxy_named haproxy-reuse; }
stop_haproxy-reuse() { stop_haproxy_named haproxy-reuse; }
start_haproxy-fwd() { start_haproxy_named haproxy-fwd; }
stop_haproxy-fwd() { stop_haproxy_named haproxy-fwd; }
start_haproxy-last() { start_haproxy_named haproxy-last; }
stop_haproxy-last() { stop_haproxy_named haproxy-last; }

start_direct() { :; } # the backends are already running
stop_direct() { :; }

target_url() {
    if [[ $RUN_TLS == 1 ]]; then
        case $1 in
        gearlb | gearlb-allfwd | gearlb-noaff | gearlb-alt) echo "https://127.0.0.1:$GEARLB_TLS_PORT" ;;
        haproxy-*) echo "https://127.0.0.1:$(haproxy_port "$1")" ;;
        esac
        return
    fi
    case $1 in
    gearlb | gearlb-allfwd | gearlb-noaff | gearlb-alt) echo "http://127.0.0.1:$GEARLB_PORT" ;;
    haproxy-close) echo "http://127.0.0.1:$HAPROXY_CLOSE_PORT" ;;
    haproxy-reuse) echo "http://127.0.0.1:$HAPROXY_REUSE_PORT" ;;
    haproxy-fwd) echo "http://127.0.0.1:$HAPROXY_FWD_PORT" ;;
    haproxy-last) echo "http://127.0.0.1:$HAPROXY_LAST_PORT" ;;
    direct) echo "http://127.0.0.1:${BACKEND_PORTS[0]}" ;;
    *) die "unknown target '$1'" ;;
    esac
}

# target_pid NAME: the process whose memory is the target's.
target_pid() {
    case $1 in
    gearlb | gearlb-allfwd | gearlb-noaff | gearlb-alt) echo "$GEARLB_PID" ;;
    haproxy-*) echo "$HAPROXY_PID" ;;
    *) echo "" ;;
    esac
}

target_known() {
    declare -F "start_$1" >/dev/null && declare -F "stop_$1" >/dev/null
}

start_target() {
    local name=$1
    target_known "$name" || die "unknown target '$name' (no start_$name/stop_$name)"
    "start_$name"
    check_body "$(target_url "$name")/" "target $name"
}

stop_target() { "stop_$1"; }

# ---- load generators ----------------------------------------------------------------

# parse_wrk FILE -> "REQS P50 P99 ERRORS MBPS" (tab-separated); errors = non-2xx/3xx +
# socket errors (connect, read, write, timeout).
parse_wrk() {
    awk '
        function mb(s,   n, u) {
            n = s + 0; u = s; sub(/^[0-9.]+/, "", u)
            if (u == "GB") n *= 1024; else if (u == "KB") n /= 1024; else if (u == "B") n /= 1048576
            return n
        }
        function ms(s,   n, u) {
            n = s + 0; u = s; sub(/^[0-9.]+/, "", u)
            if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
            return n
        }
        /^Requests\/sec:/                          { rps = $2 }
        /^Transfer\/sec:/                          { mbps = mb($2) }
        /^[ \t]+50(\.000)?%[ \t]/                  { p50 = ms($2) }
        /^[ \t]+99(\.000)?%[ \t]/                  { p99 = ms($2) }
        /Non-2xx or 3xx responses:/                { err += $NF }
        /Socket errors:/ {
            line = $0; sub(/.*Socket errors:/, "", line); gsub(/,/, "", line)
            n = split(line, f, " ")
            for (i = 2; i <= n; i += 2) err += f[i]
        }
        END {
            if (rps == "") { print "?\t?\t?\t?\t?"; exit }
            printf "%.0f\t%.3f\t%.3f\t%d\t%.1f\n", rps, p50, p99, err, mbps
        }' "$1"
}

# cpu_ticks PID: CPU time (user + system, all threads) of a process, in clock ticks;
# "-" without a process (direct).
cpu_ticks() {
    [[ -n $1 ]] || {
        echo "-"
        return 0
    }
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo "?"
}

# cpu_us_per_request PID TICKS_BEFORE WRK_OUT: the process's CPU µs per request wrk
# completed since TICKS_BEFORE: the proxy's own cost, steadier than req/s on a machine
# whose other core (load generator, backends) is saturated too.
cpu_us_per_request() {
    local t1
    [[ $2 != "-" ]] || {
        echo "-"
        return 0
    }
    t1=$(cpu_ticks "$1")
    awk -v a="$2" -v b="$t1" -v hz="$(getconf CLK_TCK)" '
        /requests in/ { n = $1 }
        END { if (n > 0 && b != "?" && a != "?") printf "%.2f", (b - a) / hz * 1e6 / n; else print "?" }' "$3"
}

# cpu_busy CPUS: "BUSY TOTAL" ticks of /proc/stat summed over a CPU list such as "0" or
# "0,2-3" (busy: everything but idle and iowait; steal counts as busy, as it is lost to
# the run).
cpu_busy() {
    awk -v list="$1" '
        BEGIN {
            n = split(list, part, ",")
            for (i = 1; i <= n; i++) {
                if (split(part[i], r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) want["cpu" c] = 1 }
                else want["cpu" part[i]] = 1
            }
        }
        $1 in want { for (i = 2; i <= 9; i++) t += $i; idle += $5 + $6 }
        END { print t - idle, t }' /proc/stat
}

# busy_percent "BUSY TOTAL" "BUSY TOTAL": the CPUs' busy share between two cpu_busy
# samples, or "-" without pinning (the proxy and the load then share every CPU).
busy_percent() {
    [[ $PIN == 1 ]] || {
        echo "-"
        return 0
    }
    awk -v a="$1" -v b="$2" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        if (y[2] > x[2]) printf "%.0f", (y[1] - x[1]) * 100 / (y[2] - x[2]); else print "-" }'
}

# wrk_run OUT CONNECTIONS SECONDS URL [EXTRA WRK ARGS...]
wrk_run() {
    local out=$1 c=$2 secs=$3 url=$4
    shift 4
    "${PIN_LOAD[@]}" wrk -t1 -c"$c" -d"${secs}s" --latency "$@" "$url" >"$out" 2>&1 ||
        die "wrk against $url failed: $(cat "$out")"
}

warmup() {
    local url=$1 out=$2 c=${3:-$CONNECTIONS}
    shift 3 || true
    if ((WARMUP > 0)); then
        "${PIN_LOAD[@]}" wrk -t1 -c"$c" -d"${WARMUP}s" "$@" "$url" >"$out.warmup" 2>&1 ||
            die "wrk warm-up against $url failed: $(cat "$out.warmup")"
    fi
}

# ---- scenarios --------------------------------------------------------------------
#
# Contract: scenario_<name> TARGET URL OUT runs the load against the running TARGET at
# URL (no trailing slash), keeps raw output in OUT*, and sets ROW to one tab-separated
# row of the columns named in SCENARIO_COLS[<name>] (numbers, or "?" when unknown). It
# runs in the main shell (never in $(...)): it may start processes and reload targets.
# SCENARIO_TARGETS[<name>] (default: all) limits the targets; SCENARIO_VARIANTS[<name>]
# runs the scenario several times per target and round (e.g. N=3 and N=1000); every
# variant starts its target afresh. SCENARIO_METRIC[<name>] is the column compared in
# the summary, SCENARIO_BETTER[<name>] "higher" or "lower"; SCENARIO_METRIC2 and
# SCENARIO_BETTER2 an optional second one (the proxy's CPU µs per request: "-" for
# direct, which has no proxy).
declare -A SCENARIO_DESC SCENARIO_COLS SCENARIO_TARGETS SCENARIO_VARIANTS SCENARIO_METRIC \
    SCENARIO_BETTER SCENARIO_METRIC2 SCENARIO_BETTER2 SCENARIO_ERRORS_OK

SCENARIO_DESC[peak_small]="peak req/s, 16-byte responses, keep-alive clients: wrk -t1 -c$CONNECTIONS -d${DURATION}s (after a ${WARMUP}s warm-up)"
# load_cpu% and proxy_cpu%: how busy LOAD_CPUS (wrk, the nginx backends) and PROXY_CPUS
# were during the run. A load side near 100% means the run measured the load side, not
# the proxy: on a 2-CPU host that is what peak_small meets first (bench/RESULTS.md).
SCENARIO_COLS[peak_small]="req/s p50_ms p99_ms errors cpu_us load_cpu% proxy_cpu%"
SCENARIO_METRIC[peak_small]="req/s"
SCENARIO_METRIC2[peak_small]="cpu_us"
SCENARIO_BETTER2[peak_small]=lower
SCENARIO_BETTER[peak_small]=higher
scenario_peak_small() {
    local url=$2/ out=$3 r pid t0 cpu l0 p0 load proxy
    warmup "$url" "$out" "$CONNECTIONS"
    pid=$(target_pid "$1")
    t0=$(cpu_ticks "$pid")
    l0=$(cpu_busy "$LOAD_CPUS")
    p0=$(cpu_busy "$PROXY_CPUS")
    wrk_run "$out" "$CONNECTIONS" "$DURATION" "$url"
    load=$(busy_percent "$l0" "$(cpu_busy "$LOAD_CPUS")")
    proxy=$(busy_percent "$p0" "$(cpu_busy "$PROXY_CPUS")")
    cpu=$(cpu_us_per_request "$pid" "$t0" "$out")
    r=$(parse_wrk "$out")
    ROW="$(cut -f1-4 <<<"$r")"$'\t'"$cpu"$'\t'"$load"$'\t'"$proxy"
}

# peak_capped: the proxy held to a gear's CPU quota, as the node's cgroups hold every
# gear (origin-server's resource_limits.conf: cpu_cfs_quota_us over cpu_cfs_period_us).
# The load side then has CPU to spare and the proxy's cost per request sets the peak.
SCENARIO_DESC[peak_capped]="peak req/s of a proxy held to CAP_PERCENT=$CAP_PERCENT% of one CPU (cgroup CPU quota over a ${CAP_PERIOD_US}µs period, as a gear is), keep-alive clients: wrk -t1 -c$CONNECTIONS -d${DURATION}s"
SCENARIO_COLS[peak_capped]="req/s p50_ms p99_ms errors cpu_us load_cpu% proxy_cpu%"
SCENARIO_METRIC[peak_capped]="req/s"
SCENARIO_BETTER[peak_capped]=higher
SCENARIO_METRIC2[peak_capped]="cpu_us"
SCENARIO_BETTER2[peak_capped]=lower
SCENARIO_TARGETS[peak_capped]="gearlb gearlb-allfwd gearlb-noaff gearlb-alt haproxy-close haproxy-reuse haproxy-fwd haproxy-last"
scenario_peak_capped() {
    local pid
    pid=$(target_pid "$1")
    [[ -n $pid ]] || die "peak_capped: target $1 has no process to cap"
    cap_cpu "$pid"
    scenario_peak_small "$@"
}

# oha_tally FILE (oha --output-format json) -> "OK ERRORS" (tab-separated): OK = 2xx/3xx
# answers; ERRORS = other answers + failed requests, except those still in flight when a
# -z deadline ended the run.
oha_tally() {
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
codes = d.get("statusCodeDistribution", {})
ok = sum(n for c, n in codes.items() if str(c).startswith(("2", "3")))
bad = sum(n for c, n in codes.items() if not str(c).startswith(("2", "3")))
errs = sum(n for e, n in d.get("errorDistribution", {}).items() if e != "aborted due to deadline")
print("%d\t%d" % (ok, bad + errs))
EOF
}

RATE_USED=""
if [[ $FIXED_LOAD == oha ]]; then
    FIXED_LOAD_DESC="oha -c$CONNECTIONS -q RATE --latency-correction -z ${FIXED_DURATION}s"
else
    FIXED_LOAD_DESC="openloop -c$CONNECTIONS -q RATE -z ${FIXED_DURATION}s (bench/openloop)"
fi
SCENARIO_DESC[fixed_rate]="latency at a fixed rate (FIXED_FRACTION=$FIXED_FRACTION% of $REF's median peak unless FIXED_RATE), open loop, coordinated omission corrected: $FIXED_LOAD_DESC"
# late_ms: openloop's own lateness, the p99 of how late its releases were against their
# due times (1 ms timer ticks: about 1 ms is the timer; more, the load generator held up,
# which hides that much from the latencies); "-" with oha, which does not say.
SCENARIO_COLS[fixed_rate]="rate achieved p50_ms p99_ms p99.9_ms max_ms errors late_ms"
SCENARIO_METRIC[fixed_rate]="p99_ms"
SCENARIO_BETTER[fixed_rate]=lower
scenario_fixed_rate() {
    local url=$2/ out=$3 errors
    warmup "$url" "$out" "$CONNECTIONS"
    # Both write oha's JSON report (openloop: the fields read below and by oha_tally).
    if [[ $FIXED_LOAD == oha ]]; then
        "${PIN_LOAD[@]}" "$OHA_BIN" --no-tui --output-format json -c "$CONNECTIONS" \
            -q "$RATE_USED" --latency-correction -z "${FIXED_DURATION}s" "$url" >"$out" 2>"$out.err" ||
            die "oha against $url failed: $(cat "$out.err")"
    else
        "${PIN_LOAD[@]}" "$OPENLOOP_BIN" -c "$CONNECTIONS" -q "$RATE_USED" -z "${FIXED_DURATION}s" \
            "$url" >"$out" 2>"$out.err" || die "openloop against $url failed: $(cat "$out.err")"
    fi
    errors=$(oha_tally "$out" | cut -f2)
    ROW=$(python3 - "$out" "$RATE_USED" "$errors" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
p = d.get("latencyPercentiles", {})
s = d.get("summary", {})
ms = lambda v: "?" if v is None else "%.3f" % (v * 1000)
late = d.get("openloop", {}).get("releaseLate", {}).get("p99")
print("\t".join([sys.argv[2], "%.0f" % (s.get("requestsPerSec") or 0), ms(p.get("p50")),
                 ms(p.get("p99")), ms(p.get("p99.9")), ms(s.get("slowest")), sys.argv[3],
                 "-" if late is None else ms(late)]))
EOF
    )
}

SCENARIO_DESC[new_conn]="a new client connection per request (Connection: close): wrk -t1 -c$CONNECTIONS -d${DURATION}s -H 'Connection: close'"
SCENARIO_COLS[new_conn]="req/s p50_ms p99_ms errors"
SCENARIO_METRIC[new_conn]="req/s"
SCENARIO_BETTER[new_conn]=higher
scenario_new_conn() {
    local url=$2/ out=$3 r
    warmup "$url" "$out" "$CONNECTIONS" -H "Connection: close"
    wrk_run "$out" "$CONNECTIONS" "$DURATION" "$url" -H "Connection: close"
    r=$(parse_wrk "$out")
    ROW=$(cut -f1-4 <<<"$r")
}

SCENARIO_DESC[large_body]="1 MiB responses, keep-alive clients: wrk -t1 -c$LARGE_CONNECTIONS -d${DURATION}s /1m.bin"
SCENARIO_COLS[large_body]="MB/s req/s p99_ms errors"
SCENARIO_METRIC[large_body]="MB/s"
SCENARIO_BETTER[large_body]=higher
scenario_large_body() {
    local url=$2/1m.bin out=$3 r
    warmup "$url" "$out" "$LARGE_CONNECTIONS"
    wrk_run "$out" "$LARGE_CONNECTIONS" "$DURATION" "$url"
    r=$(parse_wrk "$out")
    ROW=$(awk -F'\t' -v OFS='\t' '{ print $5, $1, $3, $4 }' <<<"$r")
}

SCENARIO_DESC[many_backends]="peak req/s with N=3 and N=$MANY_N backends (one nginx port each, health checks on): wrk -t1 -c$CONNECTIONS -d${DURATION}s"
SCENARIO_COLS[many_backends]="req/s p50_ms p99_ms errors cpu_us"
SCENARIO_TARGETS[many_backends]="gearlb gearlb-noaff haproxy-close haproxy-reuse haproxy-last"
SCENARIO_VARIANTS[many_backends]="N=3 N=$MANY_N"
SCENARIO_METRIC[many_backends]="req/s"
SCENARIO_METRIC2[many_backends]="cpu_us"
SCENARIO_BETTER2[many_backends]=lower
SCENARIO_BETTER[many_backends]=higher
scenario_many_backends() { scenario_peak_small "$@"; }

SCENARIO_DESC[many_routes]="gearlb's peak req/s with R=1 and R=$MANY_ROUTES routes (one service; its hosts half exact names, half wildcards; every request for x.w$ROUTE_LAST.bench.example): wrk -t1 -c$CONNECTIONS -d${DURATION}s"
SCENARIO_COLS[many_routes]="req/s p50_ms p99_ms errors cpu_us"
SCENARIO_TARGETS[many_routes]="gearlb"
SCENARIO_VARIANTS[many_routes]="R=1 R=$MANY_ROUTES"
SCENARIO_METRIC[many_routes]="req/s"
SCENARIO_METRIC2[many_routes]="cpu_us"
SCENARIO_BETTER2[many_routes]=lower
SCENARIO_BETTER[many_routes]=higher
scenario_many_routes() {
    local url=$2/ out=$3 pid t0 cpu r host="Host: x.w$ROUTE_LAST.bench.example"
    warmup "$url" "$out" "$CONNECTIONS" -H "$host"
    pid=$(target_pid "$1")
    t0=$(cpu_ticks "$pid")
    wrk_run "$out" "$CONNECTIONS" "$DURATION" "$url" -H "$host"
    cpu=$(cpu_us_per_request "$pid" "$t0" "$out")
    r=$(parse_wrk "$out")
    ROW="$(cut -f1-4 <<<"$r")"$'\t'"$cpu"
}

SCENARIO_DESC[churn]="peak load (wrk -t1 -c$CONNECTIONS -d${DURATION}s) while the backend set changes $CHURN_HZ times a second: gearlb: gearlb ctl update-cluster (one of the three gears left out in turn); haproxy: the cartridge's reload, a new process with -sf OLD on the changed config"
SCENARIO_COLS[churn]="req/s changes errors"
SCENARIO_TARGETS[churn]="gearlb haproxy-close haproxy-reuse"
SCENARIO_METRIC[churn]="errors"
SCENARIO_BETTER[churn]=lower
SCENARIO_ERRORS_OK[churn]="haproxy-close haproxy-reuse"
scenario_churn() {
    local target=$1 url=$2/ out=$3 wrk_pid k=0 changes=0 period start now entries p i
    period=$(awk -v hz="$CHURN_HZ" 'BEGIN { printf "%.4f", 1 / hz }')
    warmup "$url" "$out" "$CONNECTIONS"
    "${PIN_LOAD[@]}" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$url" >"$out" 2>&1 &
    wrk_pid=$!
    PIDS+=("$wrk_pid")
    start=$(date +%s.%N)
    while kill -0 "$wrk_pid" 2>/dev/null; do
        # Set k: every backend but number (k mod 3), so each change removes one gear and
        # brings back another.
        local skip=$((k % ${#RUN_PORTS[@]})) set=()
        for i in "${!RUN_PORTS[@]}"; do ((i == skip)) || set+=("${RUN_PORTS[$i]}"); done
        case $target in
        gearlb)
            entries=""
            for i in "${!RUN_PORTS[@]}"; do
                ((i == skip)) || entries+="web$((i + 1))-bench.example.com|127.0.0.1:${RUN_PORTS[$i]} "
            done
            if "${PIN_LOAD[@]}" "$GEARLB_BIN" ctl --socket "$TMP/gearlb/control.sock" \
                update-cluster "$entries" >>"$out.ctl" 2>&1; then
                changes=$((changes + 1))
            else
                log "update-cluster failed: $(tail -1 "$out.ctl")"
            fi
            ;;
        haproxy-*)
            write_haproxy_config "$target" "$TMP/$target/haproxy-$k.cfg" "${set[@]}"
            reload_haproxy "$target" "$TMP/$target/haproxy-$k.cfg"
            changes=$((changes + 1))
            # Reap the replaced processes that have finished.
            local left=()
            for p in "${HAPROXY_OLD_PIDS[@]}"; do
                if kill -0 "$p" 2>/dev/null; then left+=("$p"); else
                    wait "$p" 2>/dev/null || true
                    forget_pid "$p"
                fi
            done
            HAPROXY_OLD_PIDS=("${left[@]}")
            ;;
        esac
        k=$((k + 1))
        # Next change at start + k * period.
        now=$(date +%s.%N)
        p=$(awk -v s="$start" -v k="$k" -v per="$period" -v n="$now" \
            'BEGIN { d = s + k * per - n; if (d > 0) printf "%.4f", d; else print 0 }')
        [[ $p == 0 ]] || sleep "$p"
    done
    wait "$wrk_pid" || die "wrk against $url failed: $(cat "$out")"
    forget_pid "$wrk_pid"
    local r
    r=$(parse_wrk "$out")
    ROW=$(awk -F'\t' -v OFS='\t' -v c="$changes" '{ print $1, c, $4 }' <<<"$r")
}

SCENARIO_DESC[idle_memory]="resident memory (VmRSS) of the proxy with $IDLE_CONNS idle keep-alive client connections, each after one request (bench/idle_clients.py); idle timeouts raised to 5m and connection limits to fit, for every proxy"
SCENARIO_COLS[idle_memory]="idle_conns RSS_MiB RSS_before_MiB"
SCENARIO_TARGETS[idle_memory]="gearlb haproxy-close haproxy-reuse"
SCENARIO_METRIC[idle_memory]="RSS_MiB"
SCENARIO_BETTER[idle_memory]=lower
scenario_idle_memory() {
    local target=$1 url=$2 out=$3 pid port before after conns line i
    pid=$(target_pid "$target")
    port=${url##*:}
    # Some traffic first, so that the "before" figure includes warmed-up pools.
    warmup "$url/" "$out" "$CONNECTIONS"
    sleep 1
    before=$(rss_kib "$pid")
    start_process idle-clients "$out" "${PIN_LOAD[@]}" python3 "$SCRIPT_DIR/idle_clients.py" \
        127.0.0.1 "$port" "$IDLE_CONNS"
    local cpid=$LAST_PID
    for ((i = 0; i < 1200; i++)); do
        grep -q '^ready' "$out" 2>/dev/null && break
        kill -0 "$cpid" 2>/dev/null || die "idle_clients.py died: $(cat "$out")"
        sleep 0.1
    done
    line=$(grep '^ready' "$out" || true)
    [[ -n $line ]] || die "idle_clients.py not ready after 120s: $(tail -3 "$out")"
    sleep 2
    after=$(rss_kib "$pid")
    conns=$(ss -Htn state established "( sport = :$port )" 2>/dev/null | wc -l)
    forget_pid "$cpid"
    kill_wait "$cpid" TERM 10 || true
    read -r _ open failed <<<"$line"
    ((failed == 0)) || log "idle_clients: $failed connection(s) failed against $target"
    ROW=$(awk -v c="$conns" -v a="$after" -v b="$before" 'BEGIN { printf "%d\t%.1f\t%.1f", c, a / 1024, b / 1024 }')
    ((open == IDLE_CONNS)) || log "only $open of $IDLE_CONNS idle connections opened against $target"
}

SCENARIO_DESC[instructions]="user-space instructions per request of the proxy under valgrind (callgrind), counted over oha -n $INSTR_REQUESTS -c$CONNECTIONS after a 3000-request warm-up: deterministic, unlike req/s; kernel work is not counted$(if ((INSTR_BODY > 0)); then echo "; POSTs with a $INSTR_BODY-byte body"; fi)$(if [[ $INSTR_TLS == 1 ]]; then echo "; over TLS (https, keep-alive: the $CONNECTIONS handshakes are counted too)"; fi)"
SCENARIO_COLS[instructions]="requests instr/req errors"
SCENARIO_TARGETS[instructions]="gearlb gearlb-alt haproxy-close haproxy-reuse"
SCENARIO_METRIC[instructions]="instr/req"
SCENARIO_BETTER[instructions]=lower
scenario_instructions() {
    local url=$2/ out=$3 pid dump ir ok errors ask=()
    pid=$(target_pid "$1")
    if ((INSTR_BODY > 0)); then
        head -c "$INSTR_BODY" /dev/zero | tr '\0' 'x' >"$TMP/instr-body"
        ask=(-m POST -D "$TMP/instr-body")
    fi
    [[ $RUN_TLS == 1 ]] && ask+=(--insecure)
    "${PIN_LOAD[@]}" "$OHA_BIN" --no-tui -n 3000 -c "$CONNECTIONS" "${ask[@]}" "$url" >"$out.warmup" 2>&1 ||
        die "oha warm-up against $url failed: $(cat "$out.warmup")"
    callgrind_control -i on "$pid" >"$out.ctl" 2>&1 ||
        die "callgrind_control -i on $pid failed: $(cat "$out.ctl")"
    "${PIN_LOAD[@]}" "$OHA_BIN" --no-tui --output-format json -n "$INSTR_REQUESTS" \
        -c "$CONNECTIONS" "${ask[@]}" "$url" >"$out" 2>"$out.err" ||
        die "oha against $url failed: $(cat "$out.err")"
    rm -f "$TMP/callgrind.$pid".*
    callgrind_control -d "$pid" >>"$out.ctl" 2>&1 ||
        die "callgrind_control -d $pid failed: $(cat "$out.ctl")"
    # The dump is written at the target's next turn; the first one is numbered .1.
    dump="$TMP/callgrind.$pid.1"
    wait_until 30 "callgrind dump $dump" "$pid" test -s "$dump"
    if [[ -n ${KEEP_CALLGRIND:-} ]]; then
        mkdir -p "$KEEP_CALLGRIND"
        cp "$dump" "$KEEP_CALLGRIND/callgrind.$1.$(date +%s)"
    fi
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
    [[ -n $ir ]] || die "no instruction total in $dump"
    read -r ok errors < <(oha_tally "$out")
    ((ok > 0)) || die "no request through $1 succeeded (oha output: $out)"
    ROW=$(awk -v ok="$ok" -v ir="$ir" -v e="$errors" 'BEGIN { printf "%d\t%.0f\t%d", ok, ir / ok, e }')
}

# scenario_setup SCENARIO VARIANT: what the target needs for this run (RUN_*).
scenario_setup() {
    RUN_PORTS=("${BACKEND_PORTS[@]}")
    RUN_IDLE=0
    RUN_ROUTES=0
    RUN_WRAP=()
    RUN_TLS=0
    case $1 in
    instructions)
        RUN_TLS=$INSTR_TLS
        if [[ $RUN_TLS == 1 && ! -s $TMP/tls/combined.pem ]]; then
            mkdir -p "$TMP/tls"
            openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
                -keyout "$TMP/tls/key.pem" -out "$TMP/tls/cert.pem" -days 2 -subj /CN=localhost \
                -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null ||
                die "openssl could not make a certificate for INSTR_TLS"
            cat "$TMP/tls/cert.pem" "$TMP/tls/key.pem" >"$TMP/tls/combined.pem"
        fi
        # Nothing is counted until the warm-up is over (callgrind_control -i on).
        RUN_WRAP=(valgrind --tool=callgrind --instr-atstart=no
            --callgrind-out-file="$TMP/callgrind.%p")
        ;;
    many_backends)
        if [[ $2 != "N=3" ]]; then
            mapfile -t RUN_PORTS < <(many_ports)
        fi
        ;;
    idle_memory) RUN_IDLE=1 ;;
    many_routes) RUN_ROUTES=${2#R=} ;;
    esac
}

# ---- main ---------------------------------------------------------------------------

ensure_binary() {
    local stale=""
    if [[ -x $GEARLB_BIN ]]; then
        stale=$(find "$REPO/src" "$REPO/crates" "$REPO/Cargo.toml" -newer "$GEARLB_BIN" \
            -print -quit 2>/dev/null || true)
        [[ -z $stale ]] && return 0
    fi
    if [[ $BUILD != 1 ]]; then
        [[ -x $GEARLB_BIN ]] || die "$GEARLB_BIN missing and BUILD=0"
        log "WARNING: $GEARLB_BIN is older than $stale; benchmarking it anyway (BUILD=0)"
        return 0
    fi
    [[ $GEARLB_BIN == "$REPO/target/release/gearlb" ]] ||
        die "$GEARLB_BIN missing or stale, and it is not this repo's release binary"
    need cargo "(install Rust: https://rustup.rs)"
    log "building gearlb: cargo build --release${stale:+ ($stale is newer than the binary)}"
    (cd "$REPO" && cargo build --release -p gearlb --bin gearlb) || die "cargo build --release failed"
}

# uses_openloop: whether this run's fixed_rate load is bench/openloop.
uses_openloop() { [[ " ${SCENARIOS[*]} " == *" fixed_rate "* && $FIXED_LOAD == openloop ]]; }

ensure_tools() {
    apt_need wrk wrk
    apt_need curl curl
    apt_need nginx nginx-light
    apt_need ss iproute2
    need awk gawk
    if [[ " ${TARGETS[*]} " == *" haproxy-"* ]]; then
        apt_need haproxy haproxy
        HAPROXY_BIN=$(command -v haproxy)
    fi
    if [[ " ${SCENARIOS[*]} " == *" instructions "* ]]; then
        apt_need valgrind valgrind
        need callgrind_control valgrind
        need python3 python3
    fi
    [[ $FIXED_LOAD == openloop || $FIXED_LOAD == oha ]] ||
        die "FIXED_LOAD=$FIXED_LOAD: expected openloop or oha"
    # With BUILD=0 an existing binary is used as it is, as for gearlb.
    if uses_openloop && [[ $BUILD != 0 || ! -x $OPENLOOP_BIN ]]; then
        [[ $OPENLOOP_BIN == "$REPO/target/release/openloop" ]] ||
            die "OPENLOOP_BIN=$OPENLOOP_BIN: not built here; give an existing binary with BUILD=0"
        need cargo "(install Rust: https://rustup.rs)"
        log "building bench/openloop (fixed_rate's load): cargo build --release --locked"
        cargo build --release --locked --quiet --manifest-path "$SCRIPT_DIR/openloop/Cargo.toml" \
            --target-dir "$REPO/target" >&2 || die "building bench/openloop failed"
    fi
    if [[ ( " ${SCENARIOS[*]} " == *" fixed_rate "* && $FIXED_LOAD == oha ) ||
        " ${SCENARIOS[*]} " == *" instructions "* ]]; then
        if [[ ! -x $OHA_BIN ]]; then
            need cargo "(install Rust: https://rustup.rs)"
            log "installing oha: cargo install --locked oha (a few minutes)"
            cargo install --locked oha >&2 || die "cargo install oha failed"
            OHA_BIN=$HOME/.cargo/bin/oha
        fi
    fi
    if [[ " ${SCENARIOS[*]} " == *" idle_memory "* ]]; then
        need python3 python3
    fi
}

gearlb_revision() {
    local rev
    if rev=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null); then
        [[ -z $(git -C "$REPO" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null) ]] ||
            rev+="-dirty"
    else
        rev="no git commit"
    fi
    printf '%s (%s, binary built %s)' "$rev" \
        "$("$GEARLB_BIN" --version 2>/dev/null || echo "gearlb ?")" \
        "$(date -r "$GEARLB_BIN" '+%Y-%m-%d %H:%M:%S')"
}

print_header() {
    local cpu
    cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
    echo "command:   $COMMAND_LINE"
    echo "machine:   nproc=$(nproc), cpu: ${cpu:-unknown}, kernel $(uname -r)"
    echo "load:      before: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "wake-ups:  ${WAKEUPS:-not measured} (lateness of an idle CPU's wake-up)"
    echo "gearlb:    $(gearlb_revision)"
    if [[ " ${TARGETS[*]} " == *" gearlb-alt "* ]]; then
        echo "gearlb-alt: $GEARLB_ALT_BIN ($("$GEARLB_ALT_BIN" --version 2>/dev/null || echo "gearlb ?"), $(stat -c %s "$GEARLB_ALT_BIN") bytes, built $(date -r "$GEARLB_ALT_BIN" '+%Y-%m-%d %H:%M:%S'))"
    fi
    [[ -z $HAPROXY_BIN ]] || echo "haproxy:   $("$HAPROXY_BIN" -v 2>&1 | awk 'NR == 1 { print $3 }')"
    echo "nginx:     $("$NGINX_BIN" -v 2>&1 | sed 's/.*nginx\///')"
    echo "wrk:       $({ wrk --version 2>&1 || true; } | awk 'NR == 1 { print $1, $2 }')"
    [[ ! -x $OHA_BIN ]] || echo "oha:       $("$OHA_BIN" --version 2>&1 | head -1)"
    if uses_openloop; then
        echo "openloop:  $OPENLOOP_BIN (bench/openloop), built $(date -r "$OPENLOOP_BIN" '+%Y-%m-%d %H:%M:%S')"
    fi
    echo "proxies:   $THREADS worker thread(s) each"
    if [[ $PIN == 1 ]]; then
        echo "pinning:   proxy on CPU $PROXY_CPUS; load generators + nginx backends on CPU $LOAD_CPUS"
    else
        echo "pinning:   off"
    fi
    echo "rounds:    $ROUNDS, targets alternating: ${TARGETS[*]} (odd rounds in this order, even rounds reversed, and so are the variants of a scenario)"
}

ROW=""
WAKEUPS=""
RESULTS="" # TSV: scenario variant target round columns...

# run_one SCENARIO VARIANT TARGET ROUND
FAILED=0
run_one() {
    local s=$1 v=$2 t=$3 round=$4 out row errs allowed
    out=$TMP/out-$s-${v//=/}-$t-r$round
    scenario_setup "$s" "$v"
    start_target "$t"
    log "round $round/$ROUNDS: $s${v:+ ($v)} against $t"
    ROW=""
    "scenario_$s" "$t" "$(target_url "$t")" "$out"
    row=$ROW
    stop_target "$t"
    printf '%s\t%s\t%s\t%s\t%s\n' "$s" "${v:--}" "$t" "$round" "$row" >>"$RESULTS"
    # The last column named "errors" must be 0 (except where errors are the point).
    errs=$(awk -F'\t' -v cols="${SCENARIO_COLS[$s]}" '{
        n = split(cols, c, " "); for (i = 1; i <= n; i++) if (c[i] == "errors") print $(i) }' <<<"$row")
    allowed=" ${SCENARIO_ERRORS_OK[$s]:-} "
    if [[ $row == *"?"* || (-n $errs && $errs != 0 && $allowed != *" $t "*) ]]; then
        FAILED=1
        log "$s against $t had errors or no result: $row (raw output: $out*)"
    fi
}

# fixed_rate needs REF's peak: from peak_small when it ran, else measured now.
decide_rate() {
    if [[ -n $FIXED_RATE ]]; then
        RATE_USED=$FIXED_RATE
        return
    fi
    local peak
    peak=$(awk -F'\t' -v ref="$REF" '$1 == "peak_small" && $3 == ref { print $5 }' "$RESULTS" | median)
    if [[ $peak == "?" ]]; then
        target_known "$REF" || die "fixed_rate needs FIXED_RATE or target $REF"
        log "fixed_rate: measuring $REF's peak first (not in this run's peak_small)"
        scenario_setup peak_small ""
        start_target "$REF"
        scenario_peak_small "$REF" "$(target_url "$REF")" "$TMP/out-ref-peak"
        peak=$(cut -f1 <<<"$ROW")
        stop_target "$REF"
    fi
    RATE_USED=$(awk -v p="$peak" -v f="$FIXED_FRACTION" 'BEGIN { printf "%d", p * f / 100 }')
    ((RATE_USED > 0)) || die "fixed_rate: no rate from $REF's peak ($peak)"
    log "fixed_rate: $RATE_USED req/s ($FIXED_FRACTION% of $REF's peak $peak)"
}

# Targets of a scenario, in TARGETS order.
scenario_targets() {
    local t allowed=" ${SCENARIO_TARGETS[$1]:-${TARGETS[*]}} "
    for t in "${TARGETS[@]}"; do [[ $allowed == *" $t "* ]] && echo "$t"; done
    return 0
}

print_scenario() {
    local s=$1 cols
    cols=${SCENARIO_COLS[$s]}
    echo
    echo "== $s: ${SCENARIO_DESC[$s]}"
    [[ $s != fixed_rate ]] || echo "   rate: $RATE_USED req/s"
    # shellcheck disable=SC2086 # word splitting of the column list is intended
    awk -F'\t' -v s="$s" -v cols="$cols" '
        BEGIN { n = split(cols, c, " "); printf "%-14s %-8s %5s", "target", "variant", "round"
                for (i = 1; i <= n; i++) printf " %12s", c[i]; printf "\n" }
        $1 == s { printf "%-14s %-8s %5s", $3, $2, $4
                  for (i = 1; i <= n; i++) printf " %12s", $(4 + i); printf "\n" }' "$RESULTS"
    # A peak met with the load's CPU saturated is the load side's ceiling, not the proxy's.
    local busy
    busy=$(col_index "$s" "load_cpu%")
    [[ -z $busy ]] || awk -F'\t' -v s="$s" -v i="$busy" -v cpus="$LOAD_CPUS" '
        $1 == s { n++; if ($i + 0 >= 95) k++ }
        END { if (k > 0) printf "   the load (CPU %s) was 95%% busy or more in %d of %d runs: there the peak is the load side'"'"'s, not the proxy'"'"'s (bench/README.md)\n", cpus, k, n }' "$RESULTS"
}

# The summary: per scenario (and variant), the median of the compared column for every
# target, and each target's ratio to REF.
# col_index SCENARIO COLUMN: the field of COLUMN in a RESULTS row (after scenario,
# variant, target and round).
col_index() {
    awk -v cols="${SCENARIO_COLS[$1]}" -v want="$2" \
        'BEGIN { n = split(cols, c, " "); for (i = 1; i <= n; i++) if (c[i] == want) print i + 4 }'
}

# metric_columns SCENARIO: "COLUMN BETTER" for each column the summaries compare.
metric_columns() {
    echo "${SCENARIO_METRIC[$1]} ${SCENARIO_BETTER[$1]}"
    [[ -z ${SCENARIO_METRIC2[$1]:-} ]] || echo "${SCENARIO_METRIC2[$1]} ${SCENARIO_BETTER2[$1]}"
}

print_summary() {
    local s v t m col idx better ref_val val ratio line metrics
    echo
    echo "== summary: median over $ROUNDS round(s); ratio = target / $REF"
    printf '%-24s %-14s %-7s' "scenario" "metric" "better"
    for t in "${TARGETS[@]}"; do printf ' %14s' "$t"; done
    for t in "${TARGETS[@]}"; do [[ $t == "$REF" ]] || printf ' %14s' "$t/ref"; done
    echo
    for s in "${SCENARIOS[@]}"; do
        mapfile -t metrics < <(metric_columns "$s")
        for m in "${metrics[@]}"; do
            read -r col better <<<"$m"
            idx=$(col_index "$s" "$col")
            for v in ${SCENARIO_VARIANTS[$s]:--}; do
                line=$(printf '%-24s %-14s %-7s' "$s${SCENARIO_VARIANTS[$s]:+ $v}" "$col" "$better")
                declare -A med=()
                for t in "${TARGETS[@]}"; do
                    med[$t]=$(awk -F'\t' -v s="$s" -v v="$v" -v t="$t" -v i="$idx" \
                        '$1 == s && $2 == v && $3 == t { print $i }' "$RESULTS" | median)
                    line+=$(printf ' %14s' "${med[$t]}")
                done
                ref_val=${med[$REF]:-?}
                for t in "${TARGETS[@]}"; do
                    [[ $t == "$REF" ]] && continue
                    val=${med[$t]}
                    if [[ $val == "?" || $ref_val == "?" ]] || ! awk -v r="$ref_val" 'BEGIN { exit !(r > 0) }'; then
                        ratio="-"
                    else
                        ratio=$(awk -v a="$val" -v b="$ref_val" 'BEGIN { printf "%.2fx", a / b }')
                    fi
                    line+=$(printf ' %14s' "$ratio")
                done
                echo "$line"
                unset med
            done
        done
        if [[ $s == many_backends ]]; then
            idx=$(col_index "$s" "${SCENARIO_METRIC[$s]}")
            for t in "${TARGETS[@]}"; do
                local a b
                a=$(awk -F'\t' -v t="$t" -v i="$idx" '$1 == "many_backends" && $2 == "N=3" && $3 == t { print $i }' "$RESULTS" | median)
                b=$(awk -F'\t' -v t="$t" -v i="$idx" -v n="N=$MANY_N" '$1 == "many_backends" && $2 == n && $3 == t { print $i }' "$RESULTS" | median)
                [[ $a == "?" || $b == "?" ]] ||
                    printf '%-24s %s: N=%s / N=3 = %s\n' "" "$t" "$MANY_N" \
                        "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
            done
        fi
    done
}

# Paired rounds: within a round the targets run back to back, so the ratio of a target
# to REF in the same round leaves out the drift between rounds that the medians above
# keep. Per scenario, metric and target: each round's ratio, their median, and in how
# many rounds the target did better than REF.
print_paired() {
    local s v t m col idx better metrics
    ((ROUNDS > 1)) || return 0
    echo
    echo "== paired rounds: target / $REF within each round (the targets of a round run back to back)"
    for s in "${SCENARIOS[@]}"; do
        mapfile -t metrics < <(metric_columns "$s")
        for m in "${metrics[@]}"; do
            read -r col better <<<"$m"
            idx=$(col_index "$s" "$col")
            for v in ${SCENARIO_VARIANTS[$s]:--}; do
                for t in "${TARGETS[@]}"; do
                    [[ $t == "$REF" ]] && continue
                    awk -F'\t' -v s="$s" -v v="$v" -v t="$t" -v ref="$REF" -v i="$idx" \
                        -v better="$better" -v label="$s${SCENARIO_VARIANTS[$s]:+ $v}" -v col="$col" '
                        function num(x) { return x != "-" && x != "?" && x != "" }
                        $1 == s && $2 == v && $3 == t && num($i) { mine[$4] = $i }
                        $1 == s && $2 == v && $3 == ref && num($i) { theirs[$4] = $i }
                        END {
                            n = 0; wins = 0; list = ""
                            for (r = 1; r <= 1000; r++) {
                                if (!(r in mine) || !(r in theirs) || theirs[r] + 0 <= 0) continue
                                x = mine[r] / theirs[r]; q[++n] = x
                                list = list sprintf("%s%.2f", n > 1 ? " " : "", x)
                                if ((better == "higher" && x > 1) || (better == "lower" && x < 1)) wins++
                            }
                            if (n == 0) exit
                            # insertion sort for the median
                            for (a = 2; a <= n; a++) { k = q[a]; b = a - 1
                                while (b > 0 && q[b] > k) { q[b + 1] = q[b]; b-- } q[b + 1] = k }
                            med = n % 2 ? q[(n + 1) / 2] : (q[n / 2] + q[n / 2 + 1]) / 2
                            # Interval of the median ratio, whatever the shape of the noise
                            # (rounds independent and alike):
                            # [q[k], q[n+1-k]] holds it with probability 1 - 2 P(Bin(n, 1/2) < k);
                            # the narrowest such interval with at least 90%.
                            ci = "too few rounds for a 90% interval"
                            tail = 0; c = 1
                            for (k = 1; 2 * k <= n; k++) {
                                tail += c / 2 ^ n; c = c * (n - k + 1) / k
                                if (1 - 2 * tail < 0.9) break
                                ci = sprintf("%.0f%% interval %.2fx-%.2fx", 100 * (1 - 2 * tail), q[k], q[n + 1 - k])
                            }
                            printf "%-24s %-8s %-14s median %.2fx (rounds: %s); %s; %s better in %d of %d\n", \
                                label, col, t, med, list, ci, t, wins, n
                        }' "$RESULTS"
                done
            done
        done
        if [[ $s == many_backends ]]; then
            idx=$(col_index "$s" "${SCENARIO_METRIC[$s]}")
            for t in "${TARGETS[@]}"; do
                awk -F'\t' -v t="$t" -v i="$idx" -v n="N=$MANY_N" '
                    $1 == "many_backends" && $3 == t && $2 == "N=3" && $i + 0 > 0 { few[$4] = $i }
                    $1 == "many_backends" && $3 == t && $2 == n { many[$4] = $i }
                    END {
                        k = 0; within = 0; list = ""
                        for (r = 1; r <= 1000; r++) {
                            if (!(r in few) || !(r in many)) continue
                            x = many[r] / few[r]; q[++k] = x
                            list = list sprintf("%s%.3f", k > 1 ? " " : "", x)
                            if (x >= 0.95) within++
                        }
                        if (k == 0) exit
                        for (a = 2; a <= k; a++) { y = q[a]; b = a - 1
                            while (b > 0 && q[b] > y) { q[b + 1] = q[b]; b-- } q[b + 1] = y }
                        med = k % 2 ? q[(k + 1) / 2] : (q[k / 2] + q[k / 2 + 1]) / 2
                        printf "%-24s %-8s %-14s %s / N=3 within each round: median %.3f (rounds: %s); no more than 5%% slower in %d of %d\n", \
                            "many_backends", "req/s", t, n, med, list, within, k
                    }' "$RESULTS"
            done
        fi
    done
}

main() {
    LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
    # How late an idle proxy CPU wakes up (stalls of the machine, not of a proxy).
    if [[ $PIN == 1 ]]; then
        WAKEUPS="CPU $PROXY_CPUS, 0.5 ms sleeps for 5 s: $(taskset -c "$PROXY_CPUS" python3 "$SCRIPT_DIR/wakeup_latency.py" 5)"
    else
        WAKEUPS="$(python3 "$SCRIPT_DIR/wakeup_latency.py" 5)"
    fi
    local s t v round order vorder
    for s in "${SCENARIOS[@]}"; do
        declare -F "scenario_$s" >/dev/null || die "unknown scenario '$s' (known: $ALL_SCENARIOS)"
    done
    for t in "${TARGETS[@]}"; do
        target_known "$t" || die "unknown target '$t' (no start_$t/stop_$t)"
        target_url "$t" >/dev/null
    done
    ensure_tools
    setup_pinning
    [[ " ${SCENARIOS[*]} " != *" peak_capped "* ]] || check_cap
    # Every client, server and proxy connection is a descriptor: raise the limits
    # (children inherit them).
    local want=$((IDLE_CONNS * 4 + MANY_N * 4 + 65536))
    if (($(ulimit -n) < want)); then
        ulimit -Hn "$want" 2>/dev/null || true
        ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -H -n)" ||
            die "cannot raise the open-files limit to $want"
    fi
    if [[ " ${SCENARIOS[*]} " == *" idle_memory "* ]] && (($(ulimit -n) < IDLE_CONNS + 1000)); then
        die "open-files limit $(ulimit -n) too low for IDLE_CONNS=$IDLE_CONNS"
    fi
    ensure_binary

    TMP=$(mktemp -d "${TMPDIR:-/tmp}/gearlb-bench.XXXXXX")
    RESULTS=$TMP/results.tsv
    : >"$RESULTS"
    start_backends

    for s in "${SCENARIOS[@]}"; do
        [[ $s != fixed_rate ]] || decide_rate
        mapfile -t stargets < <(scenario_targets "$s")
        read -r -a variants <<<"${SCENARIO_VARIANTS[$s]:-}"
        ((${#variants[@]} > 0)) || variants=("")
        for ((round = 1; round <= ROUNDS; round++)); do
            # Counterbalanced: odd rounds run the targets in the order given, even rounds
            # in reverse, so that no target always runs first, or right after the same
            # one (haproxy-close leaves thousands of sockets in TIME_WAIT behind it).
            # The variants of a target (N=3, N=1000) likewise: with drift, the one run
            # second would otherwise always meet the slower (or faster) host.
            order=("${stargets[@]}")
            vorder=("${variants[@]}")
            if ((round % 2 == 0)); then
                mapfile -t order < <(printf '%s\n' "${stargets[@]}" | tac)
                mapfile -t vorder < <(printf '%s\n' "${variants[@]}" | tac)
            fi
            for t in "${order[@]}"; do
                for v in "${vorder[@]}"; do
                    run_one "$s" "$v" "$t" "$round"
                done
            done
        done
    done

    echo
    print_header
    for s in "${SCENARIOS[@]}"; do print_scenario "$s"; done
    print_summary
    print_paired
    echo

    ((FAILED == 0)) || die "some runs had errors (see above; raw output in $TMP)"
}

main "$@"
