#!/usr/bin/env bash
# End-to-end demo: the Fashion-MNIST CNN quantized twice with tao-quant
# (weight-only int8, then static int8 with LibTorch's int8 kernels), each
# checked in plain PyTorch: file size, top-1 and latency at batch 1 and 32.
#
# Usage: scripts/demo.sh [key=value ...]   (overrides passed to both runs)
#   1. scripts/setup.sh --demo             (packages, build only tao-quant)
#   2. scripts/models/make_test_models.sh models demo   (the CNN; cached: reused
#      when the tests already made it)
#   3. tao-quant quantize: weight-only (runs/demo/weight_only) and static
#      (runs/demo/static), each writing quantize_report.{json,html}
#   4. scripts/eval_torch.py (top-1) and scripts/bench/speed_table.py (latency,
#      interleaved in one process, disturbed rounds dropped and flagged) on the
#      float model and both artifacts
# Environment: BUILD_DIR (default build/), THREADS (default 2), SETUP=0
#              skips step 1 (a tree that is already built).
# Works from any directory: it runs from the repository root, where the
# spec's relative paths (models/...) point.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
cd "${REPO_ROOT}"

BUILD_DIR="${BUILD_DIR:-build}"
THREADS="${THREADS:-2}"
SPEC=specs/demo/fmnist_cnn_int8.yaml
PY=/usr/bin/python3
export BUILD_DIR
T0=${SECONDS}

step() { printf '\n==> %s [%ds]\n' "$*" "$((SECONDS - T0))"; }

if [[ "${SETUP:-1}" != 0 ]]; then
  step "setup (packages, build tao-quant only)"
  bash scripts/setup.sh --demo
fi

step "demo model (Fashion-MNIST CNN, cached in models/)"
bash scripts/models/make_test_models.sh models demo

CLI="${BUILD_DIR}/bin/tao-quant"
if [[ ! -x "${CLI}" ]]; then
  echo "demo.sh: ${CLI} not found after the build" >&2
  exit 1
fi

step "tao-quant quantize: weight-only int8"
"${CLI}" quantize -e "${SPEC}" results_dir=runs/demo/weight_only "$@"
step "tao-quant quantize: static int8 (calibrated on models/fmnist/calib.npz)"
"${CLI}" quantize -e "${SPEC}" results_dir=runs/demo/static quantize.mode=static_ptq \
  dataset.quant_calibration_dataset.data_file=models/fmnist/calib.npz "$@"

DATA="models/fmnist/test.npz"
FLOAT=models/fmnist/cnn.pt
WO=runs/demo/weight_only/quantized_model_libtorch.pth
ST=runs/demo/static/quantized_model_libtorch.pth
step "checking the three models in plain PyTorch on ${DATA} (10000 images)"
eval_model() { "${PY}" scripts/eval_torch.py "$1" "${DATA}" --json --threads "${THREADS}"; }
float_json="$(eval_model "${FLOAT}")"
wo_json="$(eval_model "${WO}")"
st_json="$(eval_model "${ST}")"
# Latency of the three side by side in one process, interleaved; rounds that
# other processes disturbed are dropped, and a figure that stays disturbed
# is marked (scripts/bench/speed_table.py).
speed_json="$("${PY}" scripts/bench/speed_table.py "${FLOAT}" "${WO}" "${ST}" --data "${DATA}" \
  --batches 1,32 --threads "${THREADS}")"

"${PY}" - "${float_json}" "${wo_json}" "${st_json}" "${speed_json}" <<'PYEOF'
import json, sys
speed = json.loads(sys.argv[4])["models"]
rows = [("float", json.loads(sys.argv[1])), ("weight-only int8", json.loads(sys.argv[2])),
        ("static int8", json.loads(sys.argv[3]))]
lats = list(speed.values())  # in the order given: float, weight-only, static
base = lats[0]
contended = False
def cell(s, fmt):
    global contended
    contended = contended or s["contended"]
    return fmt % s["median_ms"] + (" (contended)" if s["contended"] else "")
print()
print("| model | file (MB) | top-1 | latency b1 (ms) | latency b32 (ms) | speed-up b1 | speed-up b32 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (name, r), lat in zip(rows, lats):
    sp = ["%.2fx%s" % (base[b]["median_ms"] / lat[b]["median_ms"],
                       "?" if base[b]["contended"] or lat[b]["contended"] else "") for b in ("1", "32")]
    print("| %s | %.3f | %.4f | %s | %s | %s | %s |"
          % (name, r["model_size_bytes"] / 1e6, r["top1"], cell(lat["1"], "%.3f"),
             cell(lat["32"], "%.3f"), sp[0], sp[1]))
print()
print("(plain PyTorch: torch.jit.load + forward, no tao-quant code; medians of interleaved rounds)")
if contended:
    print("(contended: other processes took this machine's CPUs in too many rounds; a figure marked"
          " so, and a speed-up marked ?, is not a clean one: rerun on an idle machine)")
PYEOF

step "done"
echo "HTML reports (open in a browser, no network needed):"
echo "  runs/demo/weight_only/quantize_report.html"
echo "  runs/demo/static/quantize_report.html"
