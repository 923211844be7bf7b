# bench/lib/pinning.sh - where bench/run.sh's processes run: the proxy held to a gear's
# CPU quota (peak_capped), and CPU pinning (PIN_PROXY, PIN_LOAD). Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

# ---- a gear's CPU quota (peak_capped) ----------------------------------------------

CAP_CGROUP="" # this run's CPU-quota cgroup, made on first use

# cap_cpu PID: moves the process (all its threads) into this run's CPU-quota cgroup:
# CAP_PERCENT% of one CPU over CAP_PERIOD_US, through cgroup v2's cpu.max where the
# unified hierarchy has the cpu controller, else v1's cpu.cfs_quota_us (what the node's
# cgroups set for a gear). The process leaves it when it exits.
cap_cpu() {
    [[ -n $CAP_CGROUP ]] || make_cap_cgroup
    echo "$1" >"$CAP_CGROUP/cgroup.procs" 2>/dev/null ||
        die "cannot move process $1 into the CPU-quota cgroup $CAP_CGROUP"
}

# check_cap: CAP_PERCENT and CAP_PERIOD_US make a quota the kernel takes (checked before
# anything starts).
check_cap() {
    [[ $CAP_PERCENT =~ ^[0-9]+$ && $CAP_PERIOD_US =~ ^[0-9]+$ ]] ||
        die "CAP_PERCENT=$CAP_PERCENT and CAP_PERIOD_US=$CAP_PERIOD_US must be whole numbers"
    local quota=$((CAP_PERIOD_US * CAP_PERCENT / 100))
    ((CAP_PERCENT > 0 && CAP_PERIOD_US >= 1000 && CAP_PERIOD_US <= 1000000 && quota >= 1000)) ||
        die "CAP_PERCENT=$CAP_PERCENT of CAP_PERIOD_US=$CAP_PERIOD_US µs: the period must be 1000-1000000 µs and the quota at least 1000 µs"
}

make_cap_cgroup() {
    check_cap
    local quota=$((CAP_PERIOD_US * CAP_PERCENT / 100)) root=/sys/fs/cgroup dir
    if [[ -f $root/cgroup.controllers ]] && grep -qw cpu "$root/cgroup.controllers"; then
        grep -qw cpu "$root/cgroup.subtree_control" || echo +cpu >"$root/cgroup.subtree_control" ||
            die "cannot enable the cgroup v2 cpu controller in $root"
        dir=$root/gearlb-bench-$$
        { mkdir "$dir" && echo "$quota $CAP_PERIOD_US" >"$dir/cpu.max"; } ||
            die "cannot make the CPU-quota cgroup $dir"
    elif [[ -f $root/cpu/cpu.cfs_quota_us ]]; then
        dir=$root/cpu/gearlb-bench-$$
        { mkdir "$dir" && echo "$CAP_PERIOD_US" >"$dir/cpu.cfs_period_us" &&
            echo "$quota" >"$dir/cpu.cfs_quota_us"; } || die "cannot make the CPU-quota cgroup $dir"
    else
        die "peak_capped needs the cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us) and root"
    fi
    CAP_CGROUP=$dir
    log "CPU quota: $quota µs every $CAP_PERIOD_US µs ($CAP_PERCENT% of one CPU) in $dir"
}

# remove_cap_cgroup: the cgroup goes once its processes have; any left go back to the
# parent first.
remove_cap_cgroup() {
    [[ -n $CAP_CGROUP && -d $CAP_CGROUP ]] || return 0
    local pid
    while read -r pid; do
        echo "$pid" >"$(dirname "$CAP_CGROUP")/cgroup.procs" 2>/dev/null || true
    done <"$CAP_CGROUP/cgroup.procs"
    rmdir "$CAP_CGROUP" 2>/dev/null || log "could not remove the cgroup $CAP_CGROUP"
    CAP_CGROUP=""
}

# Prefixes that pin a command to a CPU set (or do nothing when PIN=0).
PIN_PROXY=()
PIN_LOAD=()
setup_pinning() {
    if [[ $PIN == 1 ]] && (($(nproc) < 2)); then
        log "only $(nproc) CPU: pinning disabled"
        PIN=0
    fi
    if [[ $PIN == 1 ]]; then
        need taskset util-linux
        PIN_PROXY=(taskset -c "$PROXY_CPUS")
        PIN_LOAD=(taskset -c "$LOAD_CPUS")
    fi
}
# Use them as `"${PIN_PROXY[@]}" cmd ... &`. Never background a shell function or a
# `( ... )` instead: $! would then be a subshell, and killing it would orphan the real
# process. start_process checks for exactly that.

