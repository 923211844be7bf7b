# bench/lib/report.sh - bench/run.sh's report: the header (command, machine, versions),
# each scenario's rows, the summary of medians with ratios to REF, and the paired rounds
# with their intervals. Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

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

