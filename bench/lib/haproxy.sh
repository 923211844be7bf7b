# bench/lib/haproxy.sh - bench/run.sh's HAProxy 2.6 targets (haproxy-close, -reuse,
# -fwd, -last: bench/configs/*.cfg.in), the cartridge's reload, target direct, and the
# dispatch of every target (target_url, target_pid, start_target). Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

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
