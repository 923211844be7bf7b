#!/usr/bin/env bash
# bench/cluster_sim.sh - the cluster simulator (crates/sim/examples/cluster_sim.rs) over the sizes of
# bench/CLUSTER.md, one JSON line per run into $OUT, then a Markdown table on stdout.
#
# Usage: bash bench/cluster_sim.sh            (CONFIGS="M:N:C ..." ROUNDS=20 OUT=file)
#        SMOKE=1 bash bench/cluster_sim.sh    (M=3, N=20, every phase once, the debug build
#                                              of the example, SIM_BIN: checks that every
#                                              field of the table is in its output)
#
# Every run is one process on virtual time (tokio's paused clock), so protocol timings
# do not depend on this host; CPU figures are real CPU time per balancer per virtual
# second (idle) or per rotate command. CI runs SMOKE=1 (tests/bench_smoke.rs), and
# crates/sim/tests/cluster_sim.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${SMOKE:-0}" = 1 ]; then
  : "${CONFIGS:=3:20:100}" "${ROUNDS:=1}" "${PHASES:=--idle 2 --failovers 1 --partition 2 --stalls 1 --stall-ms 1500}"
  : "${OUT:=$(mktemp)}" "${SIM_BIN:=target/debug/examples/cluster_sim}"
  [ -x "$SIM_BIN" ] || cargo build --quiet -p gearlb-sim --example cluster_sim
fi
CONFIGS=${CONFIGS:-"3:1000:100 10:1000:100 30:1000:100 100:1000:100 30:10000:100 10:1000:10 300:1000:100"}
ROUNDS=${ROUNDS:-20}
PHASES=${PHASES:-"--idle 20 --failovers 3 --partition 20 --stalls 3 --stall-ms 1500"}
OUT=${OUT:-target/cluster_sim.jsonl}
if [ -z "${SIM_BIN:-}" ]; then
  cargo build --release --quiet -p gearlb-sim --example cluster_sim
  SIM_BIN=target/release/examples/cluster_sim
fi
: > "$OUT"
for c in $CONFIGS; do
  IFS=: read -r m n cov <<< "$c"
  echo "M=$m N=$n C=$cov%" >&2
  # shellcheck disable=SC2086 # PHASES is a list of arguments
  "$SIM_BIN" --m "$m" --n "$n" --coverage "$cov" --rounds "$ROUNDS" $PHASES \
    | tee /dev/stderr | tail -n 1 >> "$OUT"
done
python3 - "$OUT" "$PHASES" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# Every field the table shows must be in the example's output (a renamed one would show "-").
need = ["m", "n", "coverage", "convergence_s", "rotate_p50_s", "rotate_max_s", "rotate_min_acks",
        "failover_s", "false_deaths_idle_and_rotations", "false_deaths_stalls", "idle_cpu_pct",
        "idle_kbit_per_peer", "rotate_cpu_ms_per_balancer", "rotate_kb_per_balancer", "rss_mib"]
need += ["max_acting", "no_scaler_ms"] if "--partition 0" not in sys.argv[2] else []
missing = sorted({k for r in rows for k in need if k not in r})
if not rows or missing:
    sys.exit(f"cluster_sim.sh: {len(rows)} runs; fields missing from the example's output: {missing}")
def f(v, d=2):
    return "-" if v is None or v != v else (f"{v:.{d}f}" if isinstance(v, float) else str(v))
print("| M | N | C% | converge s | rotate-out p50 / max s | acks (min) | failover s | false deaths (idle+rotations / stalls) | most acting at once (ms with none) | idle CPU % per balancer | idle kbit/s per peer | CPU ms / kB per balancer per rotate command | RSS MiB (whole process) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    fo = r.get("failover_s") or []
    fos = f"{min(fo):.2f}-{max(fo):.2f}" if fo else "-"
    print(f"| {r['m']} | {r['n']} | {r['coverage']} | {f(r.get('convergence_s'))} | {f(r.get('rotate_p50_s'),3)} / {f(r.get('rotate_max_s'),3)} | {r.get('rotate_min_acks')} | {fos} | {r.get('false_deaths_idle_and_rotations')} / {r.get('false_deaths_stalls')} | {r.get('max_acting','-')} ({r.get('no_scaler_ms','-')}) | {f(r.get('idle_cpu_pct'),3)} | {f(r.get('idle_kbit_per_peer'),1)} | {f(r.get('rotate_cpu_ms_per_balancer'),2)} / {f(r.get('rotate_kb_per_balancer'),1)} | {f(r.get('rss_mib'),0)} |")
PY
if [ "${SMOKE:-0}" = 1 ]; then rm -f "$OUT"; fi
