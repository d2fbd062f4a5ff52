#!/usr/bin/env bash
# Speed figures on an idle machine and on a busy one, side by side (issue
# 31): the demo's measurement (scripts/bench/speed_table.py: float, weight-
# only int8 and static int8 of the Fashion-MNIST CNN in plain PyTorch) and
# `tao-quant evaluate --compare` (float vs static int8), each run idle, then
# with a busy loop on every core, alternately, --reps times. Prints one
# Markdown row per figure: the idle median, each busy figure with its flag,
# and whether every busy figure printed as fact (unflagged) is within 25% of
# the idle median.
#
# Usage: scripts/bench/contention_bench.sh [--reps 3]
# Needs: a build (build/bin/tao-quant) and the demo's results
# (scripts/demo.sh: runs/demo/{weight_only,static}).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPS=3
if [[ "${1:-}" == --reps ]]; then REPS="$2"; fi
PY=/usr/bin/python3
CLI=build/bin/tao-quant
FLOAT=models/fmnist/cnn.pt
WO=runs/demo/weight_only/quantized_model_libtorch.pth
ST=runs/demo/static/quantized_model_libtorch.pth
for f in "${CLI}" "${WO}" "${ST}"; do
  [[ -e "${f}" ]] || { echo "contention_bench: ${f} missing (build, then scripts/demo.sh)" >&2; exit 1; }
done
OUT="$(mktemp -d)"
trap 'rm -rf "${OUT}"' EXIT
CORES="$(nproc)"

busy() {  # runs "$@" with a busy loop on every core
  local pids=()
  for _ in $(seq "${CORES}"); do (while :; do :; done) & pids+=($!); done
  sleep 1
  "$@" || true
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
table() { "${PY}" scripts/bench/speed_table.py "${FLOAT}" "${WO}" "${ST}" --data models/fmnist/test.npz \
  --batches 1,32 --threads 2 > "$1"; }
evaluate() {
  "${CLI}" evaluate -e specs/demo/fmnist_cnn_int8.yaml results_dir=runs/demo/static \
    quantize.mode=static_ptq --is-quantized --compare dataset.test_dataset.data_file=models/fmnist/test.npz \
    evaluate.num_batches=1 'evaluate.latency={batch_sizes: [1, 32], warmup: 5, iters: 20}' \
    > /dev/null 2>&1
  cp runs/demo/static/evaluate_report.json "$1"
}
for r in $(seq "${REPS}"); do
  table "${OUT}/table_idle_${r}.json"
  busy table "${OUT}/table_busy_${r}.json"
  evaluate "${OUT}/eval_idle_${r}.json"
  busy evaluate "${OUT}/eval_busy_${r}.json"
done

"${PY}" - "${OUT}" "${REPS}" <<'PYEOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def load(kind, state, r):
    return json.load(open(f"{out}/{kind}_{state}_{r}.json"))
rows = []  # (figure, [idle values], [(busy value, flagged)])
for b in ("1", "32"):
    for k, name in ((1, "weight-only int8"), (2, "static int8")):
        def sp(t):
            m = list(t["models"].values())
            return m[0][b]["median_ms"] / m[k][b]["median_ms"], m[0][b]["contended"] or m[k][b]["contended"]
        idle = [sp(load("table", "idle", r)) for r in range(1, reps + 1)]
        bus = [sp(load("table", "busy", r)) for r in range(1, reps + 1)]
        rows.append((f"demo table: {name} speed-up, batch {b}", idle, bus))
    def ev(t):
        flag = t["float"]["latency_ms"][b]["contended"] or t["quantized"]["latency_ms"][b]["contended"]
        return t["metrics"]["speedup"][b], flag
    idle = [ev(load("eval", "idle", r)) for r in range(1, reps + 1)]
    bus = [ev(load("eval", "busy", r)) for r in range(1, reps + 1)]
    rows.append((f"evaluate --compare: static int8 speed-up, batch {b}", idle, bus))
print("| figure | idle (median of %d) | idle flagged | busy: figure (flag) | busy figures printed as fact within 25%% of idle |" % reps)
print("|---|---:|---:|---|---|")
for name, idle, bus in rows:
    med = statistics.median(v for v, _ in idle)
    cells = ", ".join("%.2fx%s" % (v, " (contended)" if f else "") for v, f in bus)
    facts = [v for v, f in bus if not f]
    ok = all(abs(v / med - 1) <= 0.25 for v in facts)
    print("| %s | %.2fx | %d of %d | %s | %s |" % (name, med, sum(f for _, f in idle), reps, cells,
          ("yes" if ok else "NO") + " (%d printed as fact)" % len(facts)))
PYEOF
