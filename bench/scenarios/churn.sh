# bench/scenarios/churn.sh - run.sh's churn: peak load while the backend set changes
# CHURN_HZ times a second (gearlb: `gearlb ctl update-cluster`; HAProxy: the cartridge's
# reload). Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

SCENARIO_DESC[churn]="peak load (wrk -t1 -c$CONNECTIONS -d${DURATION}s) while the backend set changes $CHURN_HZ times a second: gearlb: gearlb ctl update-cluster (one of the three gears left out in turn); haproxy: the cartridge's reload, a new process with -sf OLD on the changed config"
SCENARIO_COLS[churn]="req/s changes errors"
SCENARIO_TARGETS[churn]="gearlb haproxy-close haproxy-reuse"
SCENARIO_METRIC[churn]="errors"
SCENARIO_BETTER[churn]=lower
SCENARIO_ERRORS_OK[churn]="haproxy-close haproxy-reuse"
scenario_churn() {
    local target=$1 url=$2/ out=$3 wrk_pid k=0 changes=0 failed=0 period start now entries p i
    local last=()
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
                last=("${set[@]}")
            else
                failed=$((failed + 1))
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
    # gearlb: every change must have been taken, and the status report must show the
    # last set; otherwise the changes were not measured ("?" fails the run).
    if [[ $target == gearlb ]] && { ((failed > 0)) || ! churn_applied "$out" "${last[@]}"; }; then
        log "churn: $failed update-cluster command(s) failed, or gearlb's report does not show the last set (raw: $out.ctl, $out.status)"
        changes="?"
    fi
    ROW=$(awk -F'\t' -v OFS='\t' -v c="$changes" '{ print $1, c, $4 }' <<<"$r")
}

# churn_applied OUT PORT...: whether gearlb's report (`gearlb ctl status --json`: its
# `backends`, each with `addr`) lists exactly the backends on these ports.
churn_applied() {
    local out=$1
    shift
    (($# > 0)) || return 1
    "${PIN_LOAD[@]}" "$GEARLB_BIN" ctl --socket "$TMP/gearlb/control.sock" status --json \
        >"$out.status" 2>&1 || return 1
    python3 - "$out.status" "$@" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
got = sorted(b["addr"] for b in report["backends"])
want = sorted("127.0.0.1:" + p for p in sys.argv[2:])
sys.exit(0 if got == want else "backends %s, expected %s" % (got, want))
EOF
}
