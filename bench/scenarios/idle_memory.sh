# bench/scenarios/idle_memory.sh - run.sh's idle_memory: the proxy's RSS with
# IDLE_CONNS idle keep-alive clients (bench/idle_clients.py). Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

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
setup_idle_memory() { RUN_IDLE=1; }
