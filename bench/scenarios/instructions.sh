# bench/scenarios/instructions.sh - run.sh's instructions: the proxy's user-space
# instructions per request, counted by valgrind's callgrind after a warm-up (plain,
# INSTR_BODY=N for POSTs, INSTR_TLS=1 over TLS). Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

SCENARIO_DESC[instructions]="user-space instructions per request of the proxy under valgrind (callgrind), counted over oha -n $INSTR_REQUESTS -c$CONNECTIONS after a $INSTR_WARMUP-request warm-up: deterministic, unlike req/s; kernel work is not counted$(if ((INSTR_BODY > 0)); then echo "; POSTs with a $INSTR_BODY-byte body"; fi)$(if [[ $INSTR_TLS == 1 ]]; then echo "; over TLS (https, keep-alive: the $CONNECTIONS handshakes are counted too)"; fi)"
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
    "${PIN_LOAD[@]}" "$OHA_BIN" --no-tui -n "$INSTR_WARMUP" -c "$CONNECTIONS" "${ask[@]}" "$url" >"$out.warmup" 2>&1 ||
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

setup_instructions() {
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
}
