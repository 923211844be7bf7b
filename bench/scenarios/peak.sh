# bench/scenarios/peak.sh - run.sh's scenarios of peak req/s with keep-alive clients:
# peak_small, peak_capped (the proxy held to a gear's CPU quota), new_conn (a new
# connection per request), large_body (1 MiB responses), many_backends (N=3 and
# N=MANY_N backends) and many_routes (gearlb with 1 and MANY_ROUTES routes). Sourced by
# run.sh, which defines SCENARIO_* and the contract of scenario_<name>.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

SCENARIO_DESC[peak_small]="peak req/s, 16-byte responses, keep-alive clients: wrk -t1 -c$CONNECTIONS -d${DURATION}s (after a ${WARMUP}s warm-up)"
# load_cpu% and proxy_cpu%: how busy LOAD_CPUS (wrk, the nginx backends) and PROXY_CPUS
# were during the run. A load side near 100% means the run measured the load side, not
# the proxy: on a 2-CPU host that is what peak_small meets first (bench/RESULTS.md).
SCENARIO_COLS[peak_small]="req/s p50_ms p99_ms errors cpu_us load_cpu% proxy_cpu%"
SCENARIO_METRIC[peak_small]="req/s"
SCENARIO_METRIC2[peak_small]="cpu_us"
SCENARIO_BETTER2[peak_small]=lower
SCENARIO_BETTER[peak_small]=higher
scenario_peak_small() {
    local url=$2/ out=$3 r pid t0 cpu l0 p0 load proxy
    warmup "$url" "$out" "$CONNECTIONS"
    pid=$(target_pid "$1")
    t0=$(cpu_ticks "$pid")
    l0=$(cpu_busy "$LOAD_CPUS")
    p0=$(cpu_busy "$PROXY_CPUS")
    wrk_run "$out" "$CONNECTIONS" "$DURATION" "$url"
    load=$(busy_percent "$l0" "$(cpu_busy "$LOAD_CPUS")")
    proxy=$(busy_percent "$p0" "$(cpu_busy "$PROXY_CPUS")")
    cpu=$(cpu_us_per_request "$pid" "$t0" "$out")
    r=$(parse_wrk "$out")
    ROW="$(cut -f1-4 <<<"$r")"$'\t'"$cpu"$'\t'"$load"$'\t'"$proxy"
}

# peak_capped: the proxy held to a gear's CPU quota, as the node's cgroups hold every
# gear (origin-server's resource_limits.conf: cpu_cfs_quota_us over cpu_cfs_period_us).
# The load side then has CPU to spare and the proxy's cost per request sets the peak.
SCENARIO_DESC[peak_capped]="peak req/s of a proxy held to CAP_PERCENT=$CAP_PERCENT% of one CPU (cgroup CPU quota over a ${CAP_PERIOD_US}µs period, as a gear is), keep-alive clients: wrk -t1 -c$CONNECTIONS -d${DURATION}s"
SCENARIO_COLS[peak_capped]="req/s p50_ms p99_ms errors cpu_us load_cpu% proxy_cpu%"
SCENARIO_METRIC[peak_capped]="req/s"
SCENARIO_BETTER[peak_capped]=higher
SCENARIO_METRIC2[peak_capped]="cpu_us"
SCENARIO_BETTER2[peak_capped]=lower
SCENARIO_TARGETS[peak_capped]="gearlb gearlb-allfwd gearlb-noaff gearlb-alt haproxy-close haproxy-reuse haproxy-fwd haproxy-last"
scenario_peak_capped() {
    local pid
    pid=$(target_pid "$1")
    [[ -n $pid ]] || die "peak_capped: target $1 has no process to cap"
    cap_cpu "$pid"
    scenario_peak_small "$@"
}

SCENARIO_DESC[new_conn]="a new client connection per request (Connection: close): wrk -t1 -c$CONNECTIONS -d${DURATION}s -H 'Connection: close'"
SCENARIO_COLS[new_conn]="req/s p50_ms p99_ms errors"
SCENARIO_METRIC[new_conn]="req/s"
SCENARIO_BETTER[new_conn]=higher
scenario_new_conn() {
    local url=$2/ out=$3 r
    warmup "$url" "$out" "$CONNECTIONS" -H "Connection: close"
    wrk_run "$out" "$CONNECTIONS" "$DURATION" "$url" -H "Connection: close"
    r=$(parse_wrk "$out")
    ROW=$(cut -f1-4 <<<"$r")
}

SCENARIO_DESC[large_body]="1 MiB responses, keep-alive clients: wrk -t1 -c$LARGE_CONNECTIONS -d${DURATION}s /1m.bin"
SCENARIO_COLS[large_body]="MB/s req/s p99_ms errors"
SCENARIO_METRIC[large_body]="MB/s"
SCENARIO_BETTER[large_body]=higher
scenario_large_body() {
    local url=$2/1m.bin out=$3 r
    warmup "$url" "$out" "$LARGE_CONNECTIONS"
    wrk_run "$out" "$LARGE_CONNECTIONS" "$DURATION" "$url"
    r=$(parse_wrk "$out")
    ROW=$(awk -F'\t' -v OFS='\t' '{ print $5, $1, $3, $4 }' <<<"$r")
}

SCENARIO_DESC[many_backends]="peak req/s with N=3 and N=$MANY_N backends (one nginx port each, health checks on): wrk -t1 -c$CONNECTIONS -d${DURATION}s"
SCENARIO_COLS[many_backends]="req/s p50_ms p99_ms errors cpu_us"
SCENARIO_TARGETS[many_backends]="gearlb gearlb-noaff haproxy-close haproxy-reuse haproxy-last"
SCENARIO_VARIANTS[many_backends]="N=3 N=$MANY_N"
SCENARIO_METRIC[many_backends]="req/s"
SCENARIO_METRIC2[many_backends]="cpu_us"
SCENARIO_BETTER2[many_backends]=lower
SCENARIO_BETTER[many_backends]=higher
scenario_many_backends() { scenario_peak_small "$@"; }
setup_many_backends() {
    if [[ $1 != "N=3" ]]; then
        mapfile -t RUN_PORTS < <(many_ports)
    fi
}

SCENARIO_DESC[many_routes]="gearlb's peak req/s with R=1 and R=$MANY_ROUTES routes (one service; its hosts half exact names, half wildcards; every request for x.w$ROUTE_LAST.bench.example): wrk -t1 -c$CONNECTIONS -d${DURATION}s"
SCENARIO_COLS[many_routes]="req/s p50_ms p99_ms errors cpu_us"
SCENARIO_TARGETS[many_routes]="gearlb"
SCENARIO_VARIANTS[many_routes]="R=1 R=$MANY_ROUTES"
SCENARIO_METRIC[many_routes]="req/s"
SCENARIO_METRIC2[many_routes]="cpu_us"
SCENARIO_BETTER2[many_routes]=lower
SCENARIO_BETTER[many_routes]=higher
scenario_many_routes() {
    local url=$2/ out=$3 pid t0 cpu r host="Host: x.w$ROUTE_LAST.bench.example"
    warmup "$url" "$out" "$CONNECTIONS" -H "$host"
    pid=$(target_pid "$1")
    t0=$(cpu_ticks "$pid")
    wrk_run "$out" "$CONNECTIONS" "$DURATION" "$url" -H "$host"
    cpu=$(cpu_us_per_request "$pid" "$t0" "$out")
    r=$(parse_wrk "$out")
    ROW="$(cut -f1-4 <<<"$r")"$'\t'"$cpu"
}
setup_many_routes() { RUN_ROUTES=${1#R=}; }
