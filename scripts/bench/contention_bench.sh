#!/usr/bin/env bash
# Speed figures on an idle machine and on a busy one, side by side (issue
# 31): the demo's measurement (scripts/bench/speed_table.py: float, weight-
# only int8 and static int8 of the Fashion-MNIST CNN in plain PyTorch) and
# `tao-quant evaluate --compare` (float vs static int8), each run idle, with
# a busy loop on one core, and with one on every core, alternately, --reps
# times. Prints one Markdown row per figure: the idle median, each busy
# figure with its flag, and whether every busy figure printed as fact
# (unflagged) is within 25% of the idle median.
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

busy_on() {  # busy_on N cmd...: runs cmd with a busy loop on N cores
  local n="$1" pids=()
  shift
  for _ in $(seq "${n}"); do (while :; do :; done) & pids+=($!); done
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
  for f in table evaluate; do
    "${f}" "${OUT}/${f}_idle_${r}.json"
    busy_on 1 "${f}" "${OUT}/${f}_one_${r}.json"
    busy_on "${CORES}" "${f}" "${OUT}/${f}_busy_${r}.json"
  done
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
        idle, one, bus = ([sp(load("table", s, r)) for r in range(1, reps + 1)]
                          for s in ("idle", "one", "busy"))
        rows.append((f"demo table: {name} speed-up, batch {b}", idle, one, bus))
    def ev(t):
        flag = t["float"]["latency_ms"][b]["contended"] or t["quantized"]["latency_ms"][b]["contended"]
        return t["metrics"]["speedup"][b], flag
    idle, one, bus = ([ev(load("evaluate", s, r)) for r in range(1, reps + 1)]
                      for s in ("idle", "one", "busy"))
    rows.append((f"evaluate --compare: static int8 speed-up, batch {b}", idle, one, bus))
print("| figure | idle (median of %d) | idle flagged | one core busy: figure (flag) | "
      "every core busy: figure (flag) | busy figures printed as fact within 25%% of idle |" % reps)
print("|---|---:|---:|---|---|---|")
cell = lambda vs: ", ".join("%.2fx%s" % (v, " (contended)" if f else "") for v, f in vs)
for name, idle, one, bus in rows:
    med = statistics.median(v for v, _ in idle)
    facts = [v for v, f in one + bus if not f]
    ok = all(abs(v / med - 1) <= 0.25 for v in facts)
    print("| %s | %.2fx | %d of %d | %s | %s | %s |" % (
        name, med, sum(f for _, f in idle), reps, cell(one), cell(bus),
        ("yes" if ok else "NO") + " (%d of %d printed as fact)" % (len(facts), 2 * reps)))
PYEOF
