#!/usr/bin/env bash
# GPTQ against round-to-nearest, weight-only int4 per-channel, over several
# trainings of one Fashion-MNIST net (train_fmnist.py --seed S). Where int4
# nearest already sits at float, which of the two gets a few more test images
# right changes with the training; this measures how often and by how much.
# Seed 0 is the models fixture's own training (models/fmnist/ARCH.pt).
#
# Usage: scripts/bench/gptq_seeds.sh [ARCH] [SEEDS] [TAO_QUANT] [OUT_DIR]
#   (defaults: cnn, "0 1 2 3 4 5 6", build/bin/tao-quant, runs/gptq_seeds).
#   Run from the repository root after the models fixture. Each training
#   takes a few minutes on 2 cores; trained nets are kept in OUT_DIR and
#   reused. Prints a markdown table: top-1 on the 10k test images (plain
#   PyTorch), the paired split of the images only one artifact gets right
#   with its exact McNemar p, and each artifact's top-1 agreement with its
#   float model (scripts/bench/fidelity.py).
set -euo pipefail
arch=${1:-cnn}
seeds=${2:-0 1 2 3 4 5 6}
tq=${3:-build/bin/tao-quant}
out=${4:-runs/gptq_seeds}
py=/usr/bin/python3
data=models/fmnist
mkdir -p "$out"

quantize() {  # model dir extra
  mkdir -p "$2"
  cat > "$2/spec.yaml" <<Y
results_dir: $2
quantize:
  backend: libtorch
  mode: weight_only_ptq
  default_layer_dtype: int4
  model_path: $1
  layers:
    - module_name: "*"
      weights: {dtype: int4, granularity: per_channel}
$3
dataset:
  quant_calibration_dataset: {data_file: $data/calib.npz, batch_size: 64}
Y
  "$tq" -q quantize -e "$2/spec.yaml" > "$2/log.txt" 2>&1 ||
    { echo "quantize failed: see $2/log.txt" >&2; exit 1; }
}

echo "| seed | fp32 | nearest | GPTQ | drop nearest | drop GPTQ | only nearest right | only GPTQ right | McNemar p | agreement nearest (%) | agreement GPTQ (%) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for s in $seeds; do
  dir="$out/${arch}_s$s"
  model="$dir/$arch.pt"
  if [[ $s == 0 && -f $data/$arch.pt ]]; then
    model=$data/$arch.pt
  elif [[ ! -f $model ]]; then
    mkdir -p "$dir"
    "$py" scripts/models/train_fmnist.py --arch "$arch" --out "$dir" --seed "$s" > "$dir/train.log" 2>&1 ||
      { echo "training failed: see $dir/train.log" >&2; exit 1; }
  fi
  quantize "$model" "$dir/nearest" ""
  quantize "$model" "$dir/gptq" "  weight_rounding: gptq"
  near="$dir/nearest/quantized_model_libtorch.pth"
  gptq="$dir/gptq/quantized_model_libtorch.pth"
  fp=$("$py" scripts/eval_torch.py "$model" "$data/test.npz" --json |
    "$py" -c 'import json,sys; print("%.2f" % (100 * json.load(sys.stdin)["top1"]))')
  read -r tn tg on og p < <("$py" scripts/bench/paired_top1.py "$data/test.npz" "$near" "$gptq")
  mapfile -t f < <("$py" scripts/bench/fidelity.py "$model" "$data/test.npz" "$near" "$gptq")
  read -r _ an _ <<< "${f[0]}"
  read -r _ ag _ <<< "${f[1]}"
  "$py" -c "import sys; s,f,n,g=sys.argv[1],*map(float,sys.argv[2:5]); \
print('| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s |' % (s,f,n,g,f-n,f-g,*sys.argv[5:]))" \
    "$s" "$fp" "$tn" "$tg" "$on" "$og" "$p" "$an" "$ag"
done
