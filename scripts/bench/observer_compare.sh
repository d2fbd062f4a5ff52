#!/usr/bin/env bash
# Calibration algorithms compared on one model: static int8 (libtorch) with
# each `quantize.algorithm`, top-1 of every artifact evaluated by plain
# PyTorch (scripts/eval_torch.py) on the Fashion-MNIST test set.
#
# Usage: scripts/bench/observer_compare.sh [MODEL] [ALGORITHMS...]
#   MODEL       default models/fmnist/vit.pt
#   ALGORITHMS  default: minmax entropy percentile mse
# Environment: CLI (default build/bin/tao-quant), OUT (default runs/observer_compare),
#              CALIB_BATCHES (default 8, of 64 images: 512 calibration images).
# The never-slower latency check is turned off (backend_kwargs.latency_check:
# false): this compares the accuracy of the calibration algorithms, not speed.
# Prints a markdown table.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${ROOT}"
MODEL="${1:-models/fmnist/vit.pt}"
shift || true
ALGOS=("$@")
if [[ ${#ALGOS[@]} -eq 0 ]]; then ALGOS=(minmax entropy percentile mse); fi
CLI="${CLI:-build/bin/tao-quant}"
OUT="${OUT:-runs/observer_compare}"
TEST=models/fmnist/test.npz
mkdir -p "${OUT}"
spec="${OUT}/spec.yaml"
cat > "${spec}" <<YAML
results_dir: ${OUT}/minmax
quantize:
  backend: libtorch
  mode: static_ptq
  algorithm: minmax
  default_layer_dtype: int8
  default_activation_dtype: uint8
  model_path: ${MODEL}
  backend_kwargs: {latency_check: false}
dataset:
  quant_calibration_dataset:
    data_file: models/fmnist/calib.npz
    batch_size: 64
    max_batches: ${CALIB_BATCHES:-8}
YAML
fp32=$(/usr/bin/python3 scripts/eval_torch.py "${MODEL}" "${TEST}" --json | tail -1 |
       /usr/bin/python3 -c 'import json,sys; print("%.2f" % (100 * json.load(sys.stdin)["top1"]))')
echo "| algorithm | top-1 (%) | drop vs fp32 (points) | holdout output SQNR (dB) |"
echo "|---|---|---|---|"
echo "| fp32 | ${fp32} | - | - |"
for a in "${ALGOS[@]}"; do
  "${CLI}" -q quantize -e "${spec}" "quantize.algorithm=${a}" "results_dir=${OUT}/${a}" >/dev/null
  art="${OUT}/${a}/quantized_model_libtorch.pth"
  top1=$(/usr/bin/python3 scripts/eval_torch.py "${art}" "${TEST}" --json | tail -1 |
         /usr/bin/python3 -c 'import json,sys; print("%.2f" % (100 * json.load(sys.stdin)["top1"]))')
  sqnr=$(/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); v=r["backend"]["meta"].get("holdout_output_sqnr_db"); print("%.1f" % v if v is not None else "-")' "${OUT}/${a}/quantize_report.json")
  drop=$(/usr/bin/python3 -c "print('%.2f' % (${fp32} - ${top1}))")
  echo "| ${a} | ${top1} | ${drop} | ${sqnr} |"
done
echo
echo "model ${MODEL}, $(( ${CALIB_BATCHES:-8} * 64 )) calibration images, static int8 (libtorch), top-1 over 10k test images by plain PyTorch"
