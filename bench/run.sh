#!/usr/bin/env bash
# bench/run.sh - load-test gearlb with wrk, next to a direct-to-backend baseline.
#
# Usage:  bash bench/run.sh                     (from anywhere; see bench/README.md)
#         DURATION=30 ROUNDS=3 bash bench/run.sh
#
# Topology (all on 127.0.0.1):
#
#   wrk --(keep-alive, CONNECTIONS conns)--> TARGET --> nginx backends web1..web3
#
#   Backends: three separate nginx processes (Debian's nginx / nginx-light), one worker
#   each, on ports 19001-19003, generated config in a temp dir, access_log off,
#   keep-alive on, every request answered with a fixed 16-byte body "0123456789abcdef".
#   The system nginx service and /etc/nginx are never used or touched.
#
# Targets (TARGETS, run in that order, ROUNDS times, each started fresh and stopped):
#   gearlb  target/release/gearlb on 127.0.0.1:18080 (status 18081), THREADS workers,
#           the three backends as static [[backends]].
#   direct  wrk straight to web1 (127.0.0.1:19001): the ceiling of this machine.
#
# CPU pinning (PIN=1, the default; PIN=0 disables; also disabled if nproc < 2):
#   CPU 1 (PROXY_CPUS)  the proxy under test (gearlb; later haproxy / nginx proxies)
#   CPU 0 (LOAD_CPUS)   wrk and the backend nginx processes
#   So the proxy gets a core of its own and never competes with the load generator.
#
# Variables (defaults in brackets):
#   DURATION [10]     seconds of each measured wrk run
#   WARMUP [2]        seconds of an unmeasured wrk run before each measurement (0: none)
#   CONNECTIONS [64]  wrk connections (-c); wrk runs one thread (-t1)
#   THREADS [1]       proxy worker threads (gearlb runtime.threads); keep it equal for
#                     every proxy compared
#   ROUNDS [1]        times to run the whole TARGETS list (alternating targets)
#   TARGETS ["gearlb direct"]  which targets to run, in order
#   SCENARIO [peak_small]      which scenario_* function to run
#   PIN [1]  PROXY_CPUS [1]  LOAD_CPUS [0]   CPU pinning, see above
#   BUILD [1]         1: cargo build --release if the binary is missing or older than
#                     a file in src/ or Cargo.toml; 0: never build
#   GEARLB_BIN [<repo>/target/release/gearlb]
#   KEEP_TMP [0]      1: keep the temp dir (configs, logs, raw wrk output) after exit
#
# Exit status: 0 only if every target started, answered correctly and every measured
# run had no socket errors and no non-2xx/3xx responses.
#
# ---------------------------------------------------------------------------------
# Adding a target (e.g. haproxy-close, haproxy-reuse, nginx): search for
# "EXTENSION POINT" below. A target needs a start_<name> / stop_<name> pair (the proxy
# runs under "${PIN_PROXY[@]}", listens on its own port, forwards to BACKEND_PORTS) and a
# line in target_url; then add its name to TARGETS. Adding a scenario: write a
# scenario_<name> function with the same contract as scenario_peak_small.
# ---------------------------------------------------------------------------------

set -euo pipefail

# ---- settings -------------------------------------------------------------------

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-1}
SCENARIO=${SCENARIO:-peak_small}
PIN=${PIN:-1}
PROXY_CPUS=${PROXY_CPUS:-1}
LOAD_CPUS=${LOAD_CPUS:-0}
BUILD=${BUILD:-1}
KEEP_TMP=${KEEP_TMP:-0}

# EXTENSION POINT: the list of targets. Later: haproxy-close haproxy-reuse nginx.
read -r -a TARGETS <<<"${TARGETS:-gearlb direct}"

BACKEND_PORTS=(19001 19002 19003)
BODY=0123456789abcdef # 16 bytes, the fixed response of every backend
GEARLB_PORT=18080
GEARLB_STATUS_PORT=18081

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
GEARLB_BIN=${GEARLB_BIN:-$REPO/target/release/gearlb}

# ---- helpers --------------------------------------------------------------------

log() { printf '[bench] %s\n' "$*" >&2; }
die() {
    printf '[bench] ERROR: %s\n' "$*" >&2
    exit 1
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

for v in DURATION WARMUP CONNECTIONS THREADS ROUNDS; do
    is_uint "${!v}" || die "$v must be a non-negative integer, got '${!v}'"
done
((DURATION > 0)) || die "DURATION must be > 0"
((CONNECTIONS > 0)) || die "CONNECTIONS must be > 0"
((ROUNDS > 0)) || die "ROUNDS must be > 0"
((${#TARGETS[@]} > 0)) || die "TARGETS is empty"

need() {
    command -v "$1" >/dev/null 2>&1 ||
        die "'$1' not found; install it: apt-get update && apt-get install -y $2"
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
    if [[ -n $TMP && -d $TMP ]]; then
        # Keep it for post-mortems of failures, not after Ctrl-C / SIGTERM / SIGHUP.
        if [[ $KEEP_TMP == 1 ]] || ((rc != 0 && rc != 129 && rc != 130 && rc != 143)); then
            log "kept temp dir (configs, logs, raw wrk output): $TMP"
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

start_backends() {
    local i port dir pid
    NGINX_BIN=$(command -v nginx || true)
    [[ -n $NGINX_BIN ]] || NGINX_BIN=/usr/sbin/nginx
    [[ -x $NGINX_BIN ]] || die "nginx not found; install it: apt-get update && apt-get install -y nginx-light"
    for i in "${!BACKEND_PORTS[@]}"; do
        port=${BACKEND_PORTS[$i]}
        dir=$TMP/web$((i + 1))
        mkdir -p "$dir/tmp" "$dir/logs"
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
    # Room for CONNECTIONS clients plus the warm-up's connections still closing.
    worker_connections 32768;
}
http {
    access_log off;
    default_type text/plain;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
$(nginx_temp_paths)
    server {
        listen 127.0.0.1:$port backlog=4096;
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
        wait_until 10 "backend web$((i + 1)) (nginx, port $port)" "$pid" port_open "$port"
        check_exe "$pid" "$NGINX_BIN"
    done
    for port in "${BACKEND_PORTS[@]}"; do
        check_body "http://127.0.0.1:$port/" "backend on port $port"
    done
    log "backends up: ports ${BACKEND_PORTS[*]} (nginx $("$NGINX_BIN" -v 2>&1 | sed 's/.*nginx\///'))"
}

check_body() {
    local url=$1 what=$2 got
    got=$(curl -sS --max-time 5 "$url") || die "$what: request to $url failed"
    [[ $got == "$BODY" ]] || die "$what: $url answered '$got', expected '$BODY'"
}

# ---- targets --------------------------------------------------------------------
#
# EXTENSION POINT: one start_<name> / stop_<name> pair per target, plus a case in
# target_url. start_* must return only once the target serves traffic (start_target
# then checks the response body through it); stop_* must stop everything start_*
# started and fail if that did not go cleanly. Start processes with start_process (so
# the exit trap can kill them) and "${PIN_PROXY[@]}" (CPU pinning); they get
# THREADS worker threads/processes (e.g. haproxy: nbthread THREADS; nginx:
# worker_processes THREADS).

GEARLB_PID=""

gearlb_healthy() {
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
        "http://127.0.0.1:$GEARLB_STATUS_PORT/health") == 200 ]]
}

start_gearlb() {
    local dir=$TMP/gearlb i
    mkdir -p "$dir/data"
    {
        echo "# generated by bench/run.sh"
        echo "[runtime]"
        echo "threads = $THREADS"
        echo "[listen]"
        echo "proxy = \"127.0.0.1:$GEARLB_PORT\""
        echo "status = \"127.0.0.1:$GEARLB_STATUS_PORT\""
        echo "[control]"
        echo "socket = \"$dir/control.sock\""
        echo "[state]"
        echo "dir = \"$dir/data\""
        for i in "${!BACKEND_PORTS[@]}"; do
            echo "[[backends]]"
            echo "name = \"web$((i + 1))\""
            echo "addr = \"127.0.0.1:${BACKEND_PORTS[$i]}\""
        done
    } >"$dir/gearlb.toml"
    port_open "$GEARLB_PORT" && die "port $GEARLB_PORT already in use (gearlb proxy)"
    port_open "$GEARLB_STATUS_PORT" && die "port $GEARLB_STATUS_PORT already in use (gearlb status)"
    start_process gearlb "$dir/gearlb.log" \
        env GEARLB_LOG="${GEARLB_LOG:-warn}" "${PIN_PROXY[@]}" "$GEARLB_BIN" run --config "$dir/gearlb.toml"
    GEARLB_PID=$LAST_PID
    wait_until 20 "gearlb (log: $dir/gearlb.log)" "$GEARLB_PID" gearlb_healthy
    check_exe "$GEARLB_PID" "$GEARLB_BIN"
}

stop_gearlb() {
    local pid=$GEARLB_PID rc=0
    [[ -n $pid ]] || return 0
    GEARLB_PID=""
    forget_pid "$pid"
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || rc=$?
        die "gearlb (pid $pid) died during the run with status $rc; log: $TMP/gearlb/gearlb.log"
    fi
    kill -s TERM "$pid"
    local i
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

start_direct() { :; } # the backends are already running
stop_direct() { :; }

# EXTENSION POINT: e.g.
#   start_haproxy-close() { write haproxy.cfg with `option http-server-close`; ... }
#   start_haproxy-reuse() { ... `http-reuse always` ... }
#   start_nginx()         { ... upstream with keepalive ... }

target_url() {
    case $1 in
    gearlb) echo "http://127.0.0.1:$GEARLB_PORT/" ;;
    direct) echo "http://127.0.0.1:${BACKEND_PORTS[0]}/" ;;
    # EXTENSION POINT: haproxy-close) echo "http://127.0.0.1:18090/" ;;
    *) die "unknown target '$1'" ;;
    esac
}

target_known() {
    declare -F "start_$1" >/dev/null && declare -F "stop_$1" >/dev/null
}

start_target() {
    local name=$1
    target_known "$name" || die "unknown target '$name' (no start_$name/stop_$name)"
    log "starting target $name"
    "start_$name"
    check_body "$(target_url "$name")" "target $name"
}

stop_target() {
    log "stopping target $1"
    "stop_$1"
}

# ---- scenarios --------------------------------------------------------------------
#
# Contract: scenario_<name> URL OUTFILE runs the load against URL and writes wrk's
# output (with --latency) to OUTFILE; it fails if wrk fails. SCENARIO_DESC[<name>] is the
# one-line description printed above the table.
declare -A SCENARIO_DESC

# Peak requests/s: small (16-byte) responses, keep-alive clients, one wrk thread.
SCENARIO_DESC[peak_small]="peak req/s, 16-byte responses, keep-alive clients: wrk -t1 -c$CONNECTIONS -d${DURATION}s --latency (after a ${WARMUP}s warm-up)"
scenario_peak_small() {
    local url=$1 out=$2
    if ((WARMUP > 0)); then
        "${PIN_LOAD[@]}" wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "$url" >"$out.warmup" 2>&1 ||
            die "wrk warm-up against $url failed: $(cat "$out.warmup")"
    fi
    "${PIN_LOAD[@]}" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$url" >"$out" 2>&1 ||
        die "wrk against $url failed: $(cat "$out")"
}

# ---- wrk output parsing -----------------------------------------------------------

# parse_wrk FILE -> "REQS P50 P99 NON2XX SOCKERR" (tab-separated)
parse_wrk() {
    awk '
        /^Requests\/sec:/                          { rps = $2 }
        /^[ \t]+50(\.000)?%[ \t]/                  { p50 = $2 }
        /^[ \t]+99(\.000)?%[ \t]/                  { p99 = $2 }
        /Non-2xx or 3xx responses:/                { non2xx = $NF }
        /Socket errors:/ {
            # Socket errors: connect 0, read 0, write 0, timeout 0
            line = $0; sub(/.*Socket errors:/, "", line); gsub(/,/, "", line)
            n = split(line, f, " ")
            for (i = 2; i <= n; i += 2) sockerr += f[i]
        }
        END {
            printf "%s\t%s\t%s\t%d\t%d\n", (rps == "" ? "?" : rps), (p50 == "" ? "?" : p50),
                (p99 == "" ? "?" : p99), non2xx, sockerr
        }' "$1"
}

# ---- main ---------------------------------------------------------------------------

ensure_binary() {
    local stale=""
    if [[ -x $GEARLB_BIN ]]; then
        stale=$(find "$REPO/src" "$REPO/Cargo.toml" -newer "$GEARLB_BIN" \
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
    (cd "$REPO" && cargo build --release) || die "cargo build --release failed"
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
    echo "machine:   nproc=$(nproc), cpu: ${cpu:-unknown}, kernel $(uname -r)"
    echo "gearlb:    $(gearlb_revision)"
    echo "wrk:       $({ wrk --version 2>&1 || true; } | awk 'NR == 1 { print $1, $2 }')"
    echo "scenario:  $SCENARIO: ${SCENARIO_DESC[$SCENARIO]:-}"
    echo "proxy:     $THREADS worker thread(s)"
    if [[ $PIN == 1 ]]; then
        echo "pinning:   proxy on CPU $PROXY_CPUS; wrk + backends on CPU $LOAD_CPUS"
    else
        echo "pinning:   off"
    fi
    echo "rounds:    $ROUNDS x (${TARGETS[*]})"
}

main() {
    need wrk wrk
    need curl curl
    need awk gawk
    setup_pinning
    # wrk needs one descriptor per connection; raise the soft limit if it is too low.
    local want=$((CONNECTIONS * 2 + 256))
    if (($(ulimit -n) < want)); then
        ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -H -n)" ||
            die "cannot raise the open-files limit to $want for CONNECTIONS=$CONNECTIONS"
        (($(ulimit -n) >= CONNECTIONS + 64)) ||
            die "open-files limit $(ulimit -n) too low for CONNECTIONS=$CONNECTIONS"
    fi
    declare -F "scenario_$SCENARIO" >/dev/null || die "unknown SCENARIO '$SCENARIO'"
    local t
    for t in "${TARGETS[@]}"; do
        target_known "$t" || die "unknown target '$t' (no start_$t/stop_$t)"
        target_url "$t" >/dev/null
    done
    ensure_binary

    TMP=$(mktemp -d "${TMPDIR:-/tmp}/gearlb-bench.XXXXXX")
    start_backends

    local results=() round out row rps p50 p99 non2xx sockerr failed=0
    for ((round = 1; round <= ROUNDS; round++)); do
        for t in "${TARGETS[@]}"; do
            out=$TMP/wrk-$SCENARIO-$t-r$round.txt
            start_target "$t"
            log "round $round/$ROUNDS: $SCENARIO against $t ($(target_url "$t"))"
            "scenario_$SCENARIO" "$(target_url "$t")" "$out"
            stop_target "$t"
            row=$(parse_wrk "$out")
            IFS=$'\t' read -r rps p50 p99 non2xx sockerr <<<"$row"
            if [[ $rps == "?" ]] || ((non2xx > 0 || sockerr > 0)); then
                failed=1
                log "target $t had errors; wrk output:"
                sed 's/^/    /' "$out" >&2
            fi
            results+=("$t"$'\t'"$round"$'\t'"$row")
        done
    done

    echo
    print_header
    echo
    local fmt='%-14s %5s %12s %10s %10s %12s %14s\n'
    # shellcheck disable=SC2059 # fmt is ours
    printf "$fmt" target round req/s p50 p99 non-2xx/3xx "socket errors"
    for row in "${results[@]}"; do
        IFS=$'\t' read -r t round rps p50 p99 non2xx sockerr <<<"$row"
        # shellcheck disable=SC2059
        printf "$fmt" "$t" "$round" "$rps" "$p50" "$p99" "$non2xx" "$sockerr"
    done
    echo

    ((failed == 0)) || die "some targets returned errors (see above; raw output in $TMP)"
}

main "$@"
