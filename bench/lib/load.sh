# bench/lib/load.sh - bench/run.sh's load and what is read from it: wrk's report, the
# proxy's CPU per request (/proc/PID/stat), the CPUs' busy share (/proc/stat), oha's
# (and openloop's) JSON tally. Sourced by run.sh.
# Its variables and functions are shared with run.sh's other pieces (sourced together):
# shellcheck shell=bash disable=SC2034,SC2153,SC2154

# parse_wrk FILE -> "REQS P50 P99 ERRORS MBPS" (tab-separated); errors = non-2xx/3xx +
# socket errors (connect, read, write, timeout).
parse_wrk() {
    awk '
        function mb(s,   n, u) {
            n = s + 0; u = s; sub(/^[0-9.]+/, "", u)
            if (u == "GB") n *= 1024; else if (u == "KB") n /= 1024; else if (u == "B") n /= 1048576
            return n
        }
        function ms(s,   n, u) {
            n = s + 0; u = s; sub(/^[0-9.]+/, "", u)
            if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
            return n
        }
        /^Requests\/sec:/                          { rps = $2 }
        /^Transfer\/sec:/                          { mbps = mb($2) }
        /^[ \t]+50(\.000)?%[ \t]/                  { p50 = ms($2) }
        /^[ \t]+99(\.000)?%[ \t]/                  { p99 = ms($2) }
        /Non-2xx or 3xx responses:/                { err += $NF }
        /Socket errors:/ {
            line = $0; sub(/.*Socket errors:/, "", line); gsub(/,/, "", line)
            n = split(line, f, " ")
            for (i = 2; i <= n; i += 2) err += f[i]
        }
        END {
            if (rps == "") { print "?\t?\t?\t?\t?"; exit }
            printf "%.0f\t%.3f\t%.3f\t%d\t%.1f\n", rps, p50, p99, err, mbps
        }' "$1"
}

# cpu_ticks PID: CPU time (user + system, all threads) of a process, in clock ticks;
# "-" without a process (direct).
cpu_ticks() {
    [[ -n $1 ]] || {
        echo "-"
        return 0
    }
    awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo "?"
}

# cpu_us_per_request PID TICKS_BEFORE WRK_OUT: the process's CPU µs per request wrk
# completed since TICKS_BEFORE: the proxy's own cost, steadier than req/s on a machine
# whose other core (load generator, backends) is saturated too.
cpu_us_per_request() {
    local t1
    [[ $2 != "-" ]] || {
        echo "-"
        return 0
    }
    t1=$(cpu_ticks "$1")
    awk -v a="$2" -v b="$t1" -v hz="$(getconf CLK_TCK)" '
        /requests in/ { n = $1 }
        END { if (n > 0 && b != "?" && a != "?") printf "%.2f", (b - a) / hz * 1e6 / n; else print "?" }' "$3"
}

# cpu_busy CPUS: "BUSY TOTAL" ticks of /proc/stat summed over a CPU list such as "0" or
# "0,2-3" (busy: everything but idle and iowait; steal counts as busy, as it is lost to
# the run).
cpu_busy() {
    awk -v list="$1" '
        BEGIN {
            n = split(list, part, ",")
            for (i = 1; i <= n; i++) {
                if (split(part[i], r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) want["cpu" c] = 1 }
                else want["cpu" part[i]] = 1
            }
        }
        $1 in want { for (i = 2; i <= 9; i++) t += $i; idle += $5 + $6 }
        END { print t - idle, t }' /proc/stat
}

# busy_percent "BUSY TOTAL" "BUSY TOTAL": the CPUs' busy share between two cpu_busy
# samples, or "-" without pinning (the proxy and the load then share every CPU).
busy_percent() {
    [[ $PIN == 1 ]] || {
        echo "-"
        return 0
    }
    awk -v a="$1" -v b="$2" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        if (y[2] > x[2]) printf "%.0f", (y[1] - x[1]) * 100 / (y[2] - x[2]); else print "-" }'
}

# wrk_run OUT CONNECTIONS SECONDS URL [EXTRA WRK ARGS...]
wrk_run() {
    local out=$1 c=$2 secs=$3 url=$4
    shift 4
    "${PIN_LOAD[@]}" wrk -t1 -c"$c" -d"${secs}s" --latency "$@" "$url" >"$out" 2>&1 ||
        die "wrk against $url failed: $(cat "$out")"
}

warmup() {
    local url=$1 out=$2 c=${3:-$CONNECTIONS}
    shift 3 || true
    if ((WARMUP > 0)); then
        "${PIN_LOAD[@]}" wrk -t1 -c"$c" -d"${WARMUP}s" "$@" "$url" >"$out.warmup" 2>&1 ||
            die "wrk warm-up against $url failed: $(cat "$out.warmup")"
    fi
}

# oha_tally FILE (oha --output-format json) -> "OK ERRORS" (tab-separated): OK = 2xx/3xx
# answers; ERRORS = other answers + failed requests, except those still in flight when a
# -z deadline ended the run.
oha_tally() {
    python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
codes = d.get("statusCodeDistribution", {})
ok = sum(n for c, n in codes.items() if str(c).startswith(("2", "3")))
bad = sum(n for c, n in codes.items() if not str(c).startswith(("2", "3")))
errs = sum(n for e, n in d.get("errorDistribution", {}).items() if e != "aborted due to deadline")
print("%d\t%d" % (ok, bad + errs))
EOF
}

