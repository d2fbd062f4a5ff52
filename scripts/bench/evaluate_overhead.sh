#!/usr/bin/env bash
# How much `tao-quant evaluate` adds over a bare LibTorch loop.
#
# Usage: scripts/bench/evaluate_overhead.sh [--batch 64] [--threads 2] [--repeats 5] [--json FILE]
# Environment: BUILD_DIR (default build/; needs bin/tao-quant), MODELS (default models/).
#
# Workload: the 10k Fashion-MNIST test images (models/fmnist/test.npz, 28x28),
# the float CNN (models/fmnist/cnn.pt), top-1 over all of them.
#   bare:     tq_bench_bare_loop (scripts/bench/bare_loop.cpp): x and y read
#             into memory first, then forward + argmax + count; the loop is timed.
#   evaluate: tao-quant evaluate -e spec.yaml; its report's timings give the
#             accuracy pass (data streaming from the .npz + forward + metrics,
#             eval_pass_s) and the model time inside it (forward_s).
# The two are run interleaved (bare, evaluate, bare, ...) so machine load hits
# both alike; the medians over --repeats runs are compared. Target: the
# evaluate pass takes <= 10% longer than the bare loop. Process wall times
# (model load, spec, report) are reported too.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
PY=/usr/bin/python3

BATCH=64 THREADS=2 REPEATS=5 JSON_OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --batch) BATCH="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --json) JSON_OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "evaluate_overhead: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

BUILD_DIR="${BUILD_DIR:-${REPO_ROOT}/build}"
MODELS="${MODELS:-${REPO_ROOT}/models}"
TQ="${BUILD_DIR}/bin/tao-quant"
MODEL="${MODELS}/fmnist/cnn.pt"
DATA="${MODELS}/fmnist/test.npz"
for f in "${TQ}" "${MODEL}" "${DATA}"; do
  [[ -e "$f" ]] || { echo "evaluate_overhead: missing $f (build tao-quant; scripts/models/make_test_models.sh)" >&2; exit 1; }
done

# The bare loop, built standalone against the same LibTorch.
BENCH_BUILD="${BUILD_DIR}/bench"
cmake -S "${SCRIPT_DIR}" -B "${BENCH_BUILD}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "${BENCH_BUILD}" tq_bench_bare_loop >/dev/null
BARE="${BENCH_BUILD}/tq_bench_bare_loop"
# tao-quant keeps large blocks in the process (mallopt in apps/tao-quant/main.cpp);
# give the bare loop the same allocator settings, so only the loops differ.
export MALLOC_MMAP_THRESHOLD_=$((256 << 20)) MALLOC_TRIM_THRESHOLD_=$((512 << 20))

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
"${PY}" -c "import numpy as np, sys; d = np.load(sys.argv[1]); np.save(sys.argv[2], d['x']); np.save(sys.argv[3], d['y'])" \
  "${DATA}" "${WORK}/x.npy" "${WORK}/y.npy"
cat > "${WORK}/spec.yaml" <<YAML
results_dir: ${WORK}/results
quantize:
  model_path: ${MODEL}
dataset:
  test_dataset:
    data_file: ${DATA}
evaluate:
  batch_size: ${BATCH}
YAML

now() { date +%s.%N; }
export OMP_NUM_THREADS="${THREADS}"
for ((r = 1; r <= REPEATS; r++)); do
  t0=$(now)
  "${BARE}" "${MODEL}" "${WORK}/x.npy" "${WORK}/y.npy" --batch "${BATCH}" --threads "${THREADS}" > "${WORK}/bare_${r}.json"
  t1=$(now)
  "${TQ}" -q evaluate -e "${WORK}/spec.yaml" > /dev/null
  t2=$(now)
  cp "${WORK}/results/evaluate_report.json" "${WORK}/eval_${r}.json"
  echo "{\"bare_wall_s\": $(awk "BEGIN{print ${t1} - ${t0}}"), \"eval_wall_s\": $(awk "BEGIN{print ${t2} - ${t1}}")}" > "${WORK}/wall_${r}.json"
  echo "evaluate_overhead: run ${r}/${REPEATS} done" >&2
done

"${PY}" - "${WORK}" "${REPEATS}" "${BATCH}" "${THREADS}" "${JSON_OUT}" <<'PYEOF'
import json, statistics, sys
work, repeats, batch, threads, json_out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
load = lambda p: json.load(open(p))
bare = [load("%s/bare_%d.json" % (work, r)) for r in range(1, repeats + 1)]
ev = [load("%s/eval_%d.json" % (work, r)) for r in range(1, repeats + 1)]
wall = [load("%s/wall_%d.json" % (work, r)) for r in range(1, repeats + 1)]
n = bare[0]["num_samples"]
assert all(e["metrics"]["num_samples"] == n for e in ev), "sample counts differ"
if any(e["float"]["top1_correct"] != b["correct"] for e, b in zip(ev, bare)):
    sys.exit("evaluate_overhead: top-1 differs between evaluate and the bare loop")
med = statistics.median
res = {
    "num_samples": n, "batch": batch, "threads": threads, "repeats": repeats,
    "evaluate_threads": ev[0]["threads"], "bare_threads": bare[0]["threads"],
    "bare_loop_s": med(b["loop_s"] for b in bare),
    "evaluate_pass_s": med(e["timings"]["eval_pass_s"] for e in ev),
    "evaluate_forward_s": med(e["timings"]["forward_s"]["float"] for e in ev),
    "evaluate_data_s": med(e["timings"]["data_s"] for e in ev),
    "evaluate_metrics_s": med(e["timings"]["metrics_s"] for e in ev),
    "bare_wall_s": med(w["bare_wall_s"] for w in wall),
    "evaluate_wall_s": med(w["eval_wall_s"] for w in wall),
    "per_run_overhead_pct": [100 * (e["timings"]["eval_pass_s"] / b["loop_s"] - 1) for e, b in zip(ev, bare)],
}
res["overhead_pct"] = 100 * (res["evaluate_pass_s"] / res["bare_loop_s"] - 1)
res["target_pct"] = 10.0
res["within_target"] = res["overhead_pct"] <= 10.0
print("%d images 28x28, float CNN, batch %d, %d threads (evaluate used %d), median of %d interleaved runs\n"
      % (n, batch, threads, res["evaluate_threads"], repeats))
print("| | seconds | images/s |")
print("|---|---:|---:|")
for name, key in [("bare LibTorch loop", "bare_loop_s"), ("evaluate accuracy pass", "evaluate_pass_s"),
                  ("  of which model forward", "evaluate_forward_s"), ("  of which data (npz streaming)", "evaluate_data_s"),
                  ("  of which metrics", "evaluate_metrics_s"), ("bare process wall", "bare_wall_s"),
                  ("evaluate process wall", "evaluate_wall_s")]:
    print("| %s | %.3f | %.0f |" % (name, res[key], n / res[key]))
print("\nevaluate overhead over the bare loop: %+.1f%% (target <= 10%%: %s); per run: %s"
      % (res["overhead_pct"], "met" if res["within_target"] else "NOT met",
         ", ".join("%+.1f%%" % v for v in res["per_run_overhead_pct"])))
if json_out:
    with open(json_out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
PYEOF
