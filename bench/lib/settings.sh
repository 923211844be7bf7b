# bench/lib/settings.sh - bench/run.sh's variables (bench/README.md, "Variables"), with
# their defaults, SMOKE's sizes, the ports, and their checks. Sourced by bench/run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

# The command as given, for the report's header: taken before SCENARIOS and TARGETS
# become arrays below (bash does not export arrays, so `env` would lose them).
# With none of them set, grep finds nothing: not an error.
COMMAND_LINE="$({ env | grep -E '^(DURATION|WARMUP|CONNECTIONS|THREADS|ROUNDS|SCENARIOS?|TARGETS|PIN|PROXY_CPUS|LOAD_CPUS|SMOKE|FIXED_[A-Z]+|LARGE_CONNECTIONS|MANY_N|MANY_ROUTES|CHURN_HZ|IDLE_CONNS|INSTR_REQUESTS|INSTR_WARMUP|INSTR_BODY|INSTR_TLS|CAP_PERCENT|CAP_PERIOD_US|REF)=' || true; } | sort | tr '\n' ' ')bash bench/run.sh"

# SMOKE=1: every scenario once against gearlb, haproxy-reuse and direct, with tiny sizes
# and the debug build (what `cargo test` builds), in about a minute: it checks that the
# harness still runs and still reads every figure from the product (a "?" fails the
# run), and judges nothing. Any variable given explicitly still wins.
SMOKE=${SMOKE:-0}
if [[ $SMOKE == 1 ]]; then
    : "${TARGETS:=gearlb haproxy-reuse direct}"
    : "${ROUNDS:=1}" "${DURATION:=1}" "${WARMUP:=0}" "${CONNECTIONS:=8}"
    : "${FIXED_DURATION:=1}" "${FIXED_FRACTION:=2}" "${LARGE_CONNECTIONS:=2}"
    : "${MANY_N:=12}" "${MANY_ROUTES:=20}" "${CHURN_HZ:=5}" "${IDLE_CONNS:=200}"
    : "${INSTR_REQUESTS:=200}" "${INSTR_WARMUP:=50}" "${WAKEUP_SECS:=1}" "${BUILD:=0}"
    : "${GEARLB_BIN:=$REPO/target/debug/gearlb}" "${OPENLOOP_BIN:=$REPO/target/debug/openloop}"
fi

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
CHURN_HZ=${CHURN_HZ:-10}
IDLE_CONNS=${IDLE_CONNS:-10000}
INSTR_REQUESTS=${INSTR_REQUESTS:-20000}
INSTR_WARMUP=${INSTR_WARMUP:-3000}   # instructions: requests before the count starts
INSTR_BODY=${INSTR_BODY:-0}           # instructions: POST bodies of this many bytes (0: GET)
INSTR_TLS=${INSTR_TLS:-0}             # instructions: 1 = over TLS (https)
CAP_PERCENT=${CAP_PERCENT:-50}        # peak_capped: the proxy's CPU quota, % of one CPU
CAP_PERIOD_US=${CAP_PERIOD_US:-100000} # ... over this period (the node's cpu_cfs_period_us)
REF=${REF:-haproxy-reuse}             # the target ratios are computed against
WAKEUP_SECS=${WAKEUP_SECS:-5}         # the header's wake-up lateness, measured this long

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

GEARLB_BIN=${GEARLB_BIN:-$REPO/target/release/gearlb}
GEARLB_ALT_BIN=${GEARLB_ALT_BIN:-} # the binary of target gearlb-alt
OHA_BIN=${OHA_BIN:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
# A smoke run judges nothing: without oha it takes oha_lite.py (the command line and
# JSON of oha the harness uses) rather than building oha for minutes.
if [[ $SMOKE == 1 && ! -x $OHA_BIN ]]; then
    OHA_BIN=$SCRIPT_DIR/lib/oha_lite.py
fi
OPENLOOP_BIN=${OPENLOOP_BIN:-$REPO/target/release/openloop} # bench/openloop, built by ensure_tools

for v in DURATION WARMUP CONNECTIONS THREADS ROUNDS FIXED_DURATION FIXED_FRACTION \
    LARGE_CONNECTIONS MANY_N CHURN_HZ IDLE_CONNS INSTR_REQUESTS INSTR_WARMUP WAKEUP_SECS; do
    is_uint "${!v}" || die "$v must be a non-negative integer, got '${!v}'"
done
[[ -z $FIXED_RATE ]] || is_uint "$FIXED_RATE" || die "FIXED_RATE must be an integer"
((DURATION > 0)) || die "DURATION must be > 0"
((CONNECTIONS > 0)) || die "CONNECTIONS must be > 0"
((ROUNDS > 0)) || die "ROUNDS must be > 0"
((MANY_N >= 3 && MANY_N <= 10000)) || die "MANY_N must be 3..10000"
((CHURN_HZ > 0)) || die "CHURN_HZ must be > 0"
((INSTR_REQUESTS > 0)) || die "INSTR_REQUESTS must be > 0"
((WAKEUP_SECS > 0)) || die "WAKEUP_SECS must be > 0"
((${#TARGETS[@]} > 0)) || die "TARGETS is empty"
