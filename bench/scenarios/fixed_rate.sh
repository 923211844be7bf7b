# bench/scenarios/fixed_rate.sh - run.sh's fixed_rate: latency at a fixed rate (a
# fraction of REF's peak), open loop and corrected for coordinated omission, from
# bench/openloop (or oha): their JSON report's percentiles. Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

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
