# bench/lib/proc.sh - bench/run.sh's shared steps: logging, tools, waiting, medians, the
# processes the script started (killed on exit), and the temp dir. Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

log() { printf '[bench] %s\n' "$*" >&2; }
die() {
    printf '[bench] ERROR: %s\n' "$*" >&2
    exit 1
}

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

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
