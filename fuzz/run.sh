#!/usr/bin/env bash
# Run every gearlb fuzz target (or the ones named) for DURATION seconds each and print a
# summary table. One command from a clean checkout:
#
#   bash fuzz/run.sh                       # 600 s per target, two targets at a time
#   DURATION=60 JOBS=1 bash fuzz/run.sh sticky_cookie gossip_frame
#
# Needs only the stable toolchain: cargo-fuzz is installed if missing, and the nightly
# flags it passes (-Zsanitizer=address, ...) are accepted with RUSTC_BOOTSTRAP=1.
# Corpora grow in fuzz/corpus/<target> (seeded from fuzz/seeds/<target>, kept between
# runs, not committed); crashes land in fuzz/artifacts/<target>; logs and the summary in
# fuzz/logs/. Exit status 1 if any target crashed (or failed to run).
set -euo pipefail
cd "$(dirname "$0")"

DURATION="${DURATION:-600}"
JOBS="${JOBS:-2}"
NICE="${NICE:-10}"          # fuzzing yields the CPU to builds and tests
ALL=(update_cluster_entries peer_hook_args sticky_cookie gossip_frame gossip_v2 config_toml state_file
     upstream_response client_hello proxy_header client_head client_reply alias_cert)
if [ "$#" -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL[@]}"); fi
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz (crates.io) ..."
  cargo install cargo-fuzz --locked
fi
# Optimised, with debug assertions and overflow checks, AddressSanitizer (the default).
BUILD=(-O -a)
echo "building fuzz targets ..."
nice -n "$NICE" cargo fuzz build "${BUILD[@]}" >/dev/null

mkdir -p logs
run_one() {
  local t="$1"
  mkdir -p "corpus/$t" "artifacts/$t"
  local seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  # -timeout: one input taking over 10 s is reported (as a crash) instead of hanging.
  # -max_len: inputs up to 64 KiB (the control socket and gossip frames allow more,
  # but every length limit in the parsers is well below that).
  if nice -n "$NICE" cargo fuzz run "${BUILD[@]}" "$t" "corpus/$t" "${seeds[@]}" -- \
      -max_total_time="$DURATION" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="artifacts/$t/" >"logs/$t.log" 2>&1; then
    echo "ok" >"logs/$t.status"
  else
    echo "FAILED" >"logs/$t.status"
  fi
}

started=$(date -u +%FT%TZ)
running=0
for t in "${TARGETS[@]}"; do
  echo "fuzzing $t for ${DURATION}s ..."
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

summary=logs/summary.md
{
  echo "Run started $started, ${DURATION}s per target, JOBS=$JOBS, $(nproc) CPUs, $(rustc --version)"
  echo
  echo "| target | result | runs (executions) | exec/s | coverage (cov) | features (ft) | corpus | crashes |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
} >"$summary"
failed=0
for t in "${TARGETS[@]}"; do
  log="logs/$t.log"
  status=$(cat "logs/$t.status" 2>/dev/null || echo "not run")
  stat() { grep -o "stat::$1: *[0-9]*" "$log" | tail -1 | grep -o '[0-9]*$' || echo "?"; }
  last=$(grep -E '#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || echo "?")
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || echo "?")
  corp=$(echo "$last" | grep -o 'corp: [0-9]*' | grep -o '[0-9]*' || echo "?")
  crashes=$(find "artifacts/$t" -type f | wc -l)
  [ "$status" = ok ] && [ "$crashes" -eq 0 ] || failed=1
  echo "| $t | $status | $(stat number_of_executed_units) | $(stat average_exec_per_sec) | $cov | $ft | $corp | $crashes |" >>"$summary"
done
cat "$summary"
exit "$failed"
