#!/usr/bin/env bash
# End-to-end demo: weight-only int8 PTQ of the Fashion-MNIST CNN with
# tao-quant, checked in plain PyTorch.
#
# Usage: scripts/demo.sh [key=value ...]   (overrides passed to tao-quant)
#   1. scripts/setup.sh                    (packages + build)
#   2. scripts/models/make_test_models.sh models fmnist   (cached)
#   3. build/bin/tao-quant quantize -e specs/demo/fmnist_cnn_int8.yaml
#   4. fp32 vs quantized top-1 (scripts/eval_torch.py) and file sizes
# Environment: BUILD_DIR (default build/), SPEC (default the int8 spec),
#              BACKEND (default: the spec's quantize.backend; names the
#              output file quantized_model_<backend>.pth).
# Works from any directory: it runs from the repository root, where the
# spec's relative paths (models/..., runs/demo) point.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
cd "${REPO_ROOT}"

BUILD_DIR="${BUILD_DIR:-build}"
SPEC="${SPEC:-specs/demo/fmnist_cnn_int8.yaml}"
PY=/usr/bin/python3
export BUILD_DIR

step() { printf '\n==> %s\n' "$*"; }

step "setup (packages, build)"
bash scripts/setup.sh

step "demo model (Fashion-MNIST CNN, cached in models/)"
bash scripts/models/make_test_models.sh models fmnist

CLI="${BUILD_DIR}/bin/tao-quant"
if [[ ! -x "${CLI}" ]]; then
  echo "demo.sh: ${CLI} not found after the build" >&2
  exit 1
fi

# Where the artifact lands: the spec's results_dir / quantize.backend, unless
# overridden on the command line (results_dir=..., quantize.results_dir=...,
# quantize.backend=...).
spec_value() {  # first "KEY: value" at the given indentation in SPEC
  sed -n "s/^$1:[[:space:]]*\([^#[:space:]]*\).*/\1/p" "${SPEC}" | head -n 1
}
RESULTS_DIR="$(spec_value 'results_dir')"
RESULTS_DIR="${RESULTS_DIR:-runs/demo}"
spec_backend="$(spec_value '  backend')"
BACKEND="${BACKEND:-${spec_backend:-libtorch}}"
for kv in "$@"; do
  case "${kv}" in
    results_dir=*) RESULTS_DIR="${kv#results_dir=}" ;;
    quantize.results_dir=*) RESULTS_DIR="${kv#quantize.results_dir=}" ;;
    quantize.backend=*) BACKEND="${kv#quantize.backend=}" ;;
  esac
done

step "tao-quant quantize -e ${SPEC} $*"
"${CLI}" quantize -e "${SPEC}" "$@"

FP32="models/fmnist/cnn.pt"
QUANT="${RESULTS_DIR}/quantized_model_${BACKEND}.pth"
REPORT="${RESULTS_DIR}/quantize_report.json"
DATA="models/fmnist/test.npz"
if [[ ! -f "${QUANT}" ]]; then
  echo "demo.sh: expected ${QUANT}; ${RESULTS_DIR} has:" >&2
  ls -la "${RESULTS_DIR}" >&2 || true
  exit 1
fi

step "checking both models in plain PyTorch on ${DATA} (10000 images)"
fp32_json="$("${PY}" scripts/eval_torch.py "${FP32}" "${DATA}" --json)"
quant_json="$("${PY}" scripts/eval_torch.py "${QUANT}" "${DATA}" --json)"

"${PY}" - "${fp32_json}" "${quant_json}" "${REPORT}" <<'PYEOF'
import json, os, sys
fp32, quant = json.loads(sys.argv[1]), json.loads(sys.argv[2])
report = sys.argv[3]
def mb(n): return n / 1e6
rel = lambda p: os.path.relpath(p)
print()
print("| model | file | size (MB) | top-1 |")
print("|---|---|---:|---:|")
print("| fp32 | %s | %.3f | %.4f |" % (rel(fp32["model"]), mb(fp32["model_size_bytes"]), fp32["top1"]))
print("| quantized | %s | %.3f | %.4f |" % (rel(quant["model"]), mb(quant["model_size_bytes"]), quant["top1"]))
print()
print("top-1 change: %+.2f points; size: %.2fx smaller"
      % (100.0 * (quant["top1"] - fp32["top1"]), fp32["model_size_bytes"] / max(1, quant["model_size_bytes"])))
if os.path.isfile(report):
    print("report: %s" % rel(report))
PYEOF
