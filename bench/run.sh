#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# bench/run.sh - gearlb next to HAProxy 2.6 (old cartridge config and keep-alive reuse)
# and direct-to-backend, in one invocation, alternating rounds, with ratios.
#
# Usage:  bash bench/run.sh                     (from anywhere; see bench/README.md)
#         ROUNDS=5 bash bench/run.sh
#         SCENARIOS="peak_small fixed_rate" TARGETS="gearlb haproxy-reuse" bash bench/run.sh
#         SMOKE=1 bash bench/run.sh             (every scenario once, tiny sizes, the debug
#                                                build: checks the harness, judges nothing)
#
# Topology (all on 127.0.0.1):
#
#   wrk / openloop / oha / idle_clients.py --> TARGET --> nginx backends web1..web3
#
# This file is the round loop; the rest is in pieces that each say one thing:
#
#   lib/settings.sh      the variables (bench/README.md lists them), SMOKE's sizes, ports
#   lib/proc.sh          logging, waiting, the processes this script started, cleanup
#   lib/pinning.sh       CPU pinning (PIN_PROXY, PIN_LOAD) and peak_capped's CPU quota
#   lib/backends.sh      the three nginx backends
#   lib/gearlb.sh        targets gearlb, gearlb-allfwd, gearlb-noaff, gearlb-alt
#   lib/haproxy.sh       targets haproxy-close, -reuse, -fwd, -last, direct; the dispatch
#   lib/load.sh          wrk and its parsing, CPU accounting, oha's JSON tally
#   lib/tools.sh         the binaries and tools a run needs (installed or built)
#   lib/report.sh        the header, per-scenario tables, summary and paired rounds
#   scenarios/*.sh       one file per scenario (or family): SCENARIO_* and scenario_<name>
#
# Exit status: 0 only if every target started, answered correctly and every measured
# run had no errors where errors are not the point of the scenario (churn reports the
# errors HAProxy's reloads cause; gearlb must have none there either), and every figure
# could be read ("?" in a row fails the run).

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

# shellcheck source=lib/proc.sh
source "$SCRIPT_DIR/lib/proc.sh"
# shellcheck source=lib/settings.sh
source "$SCRIPT_DIR/lib/settings.sh"
# shellcheck source=lib/pinning.sh
source "$SCRIPT_DIR/lib/pinning.sh"
# shellcheck source=lib/backends.sh
source "$SCRIPT_DIR/lib/backends.sh"

# ---- what a run needs from its target ---------------------------------------------
#
# The scenario being run sets these before the target starts (scenario_setup):
#   RUN_PORTS     backend ports the proxy forwards to (3, or MANY_N)
#   RUN_IDLE      1: raised connection limits and idle timeouts (idle_memory)
#   RUN_WRAP      a command the proxy runs under (instructions: valgrind), or empty
#   RUN_ROUTES    gearlb's routes (many_routes), 0: none
#   RUN_TLS       1: the proxies listen with TLS (instructions with INSTR_TLS=1)
RUN_PORTS=()
RUN_IDLE=0
RUN_WRAP=()
RUN_ROUTES=0
RUN_TLS=0

# shellcheck source=lib/gearlb.sh
source "$SCRIPT_DIR/lib/gearlb.sh"
# shellcheck source=lib/haproxy.sh
source "$SCRIPT_DIR/lib/haproxy.sh"
# shellcheck source=lib/load.sh
source "$SCRIPT_DIR/lib/load.sh"
# shellcheck source=lib/tools.sh
source "$SCRIPT_DIR/lib/tools.sh"
# shellcheck source=lib/report.sh
source "$SCRIPT_DIR/lib/report.sh"

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
# direct, which has no proxy). An optional setup_<name> VARIANT sets RUN_* before the
# target starts.
declare -A SCENARIO_DESC SCENARIO_COLS SCENARIO_TARGETS SCENARIO_VARIANTS SCENARIO_METRIC \
    SCENARIO_BETTER SCENARIO_METRIC2 SCENARIO_BETTER2 SCENARIO_ERRORS_OK

# shellcheck source=scenarios/peak.sh
source "$SCRIPT_DIR/scenarios/peak.sh"
# shellcheck source=scenarios/fixed_rate.sh
source "$SCRIPT_DIR/scenarios/fixed_rate.sh"
# shellcheck source=scenarios/churn.sh
source "$SCRIPT_DIR/scenarios/churn.sh"
# shellcheck source=scenarios/idle_memory.sh
source "$SCRIPT_DIR/scenarios/idle_memory.sh"
# shellcheck source=scenarios/instructions.sh
source "$SCRIPT_DIR/scenarios/instructions.sh"

# ---- rounds ---------------------------------------------------------------------------

ROW=""
WAKEUPS=""
RESULTS="" # TSV: scenario variant target round columns...

# scenario_setup SCENARIO VARIANT: what the target needs for this run (RUN_*).
scenario_setup() {
    RUN_PORTS=("${BACKEND_PORTS[@]}")
    RUN_IDLE=0
    RUN_ROUTES=0
    RUN_WRAP=()
    RUN_TLS=0
    if declare -F "setup_$1" >/dev/null; then "setup_$1" "$2"; fi
}

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

# Targets of a scenario, in TARGETS order.
scenario_targets() {
    local t allowed=" ${SCENARIO_TARGETS[$1]:-${TARGETS[*]}} "
    for t in "${TARGETS[@]}"; do [[ $allowed == *" $t "* ]] && echo "$t"; done
    return 0
}

main() {
    LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
    # How late an idle proxy CPU wakes up (stalls of the machine, not of a proxy).
    if [[ $PIN == 1 ]]; then
        WAKEUPS="CPU $PROXY_CPUS, 0.5 ms sleeps for $WAKEUP_SECS s: $(taskset -c "$PROXY_CPUS" python3 "$SCRIPT_DIR/wakeup_latency.py" "$WAKEUP_SECS")"
    else
        WAKEUPS="$(python3 "$SCRIPT_DIR/wakeup_latency.py" "$WAKEUP_SECS")"
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
