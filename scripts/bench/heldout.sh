#!/usr/bin/env bash
# The error-correcting algorithms on held-out models: trained Fashion-MNIST
# nets and variants that no test, default or threshold was tuned on.
#   1. imbalanced variants of the ResNet and the MLP (make_imbalanced.py),
#      static int8, per-tensor and per-channel weights: min-max against
#      equalization + bias correction;
#   2. weight-only int4 per-channel on the CNN with BatchNorm, the MLP, the
#      EfficientNet-style net and the timm-style ViT: nearest against GPTQ;
#   3. a second outlier variant of the ViT (make_outliers.py --seed 1, other
#      channels and factors than the fixture's), static int8: min-max
#      against SmoothQuant.
# Top-1 of every artifact on the 10k test images, measured by plain PyTorch
# (scripts/eval_torch.py). The never-slower latency check is off, so the
# figures do not depend on this machine's timings.
#
# Usage: scripts/bench/heldout.sh [TAO_QUANT] [OUT_DIR]
#   (defaults: build/bin/tao-quant, runs/heldout). Run from the repository
#   root after the models fixture and the extra Fashion-MNIST nets
#   (scripts/models/make_test_models.sh models all extra). Prints a markdown
#   table.
set -euo pipefail
tq=${1:-build/bin/tao-quant}
out=${2:-runs/heldout}
py=/usr/bin/python3
data=models/fmnist
mkdir -p "$out"

variant() {  # script src out [args]
  local script=$1 src=$2 dst=$3
  shift 3
  [[ -f $dst ]] || "$py" "scripts/models/$script" "$src" "$dst" "$data/test.npz" "$@" >&2
}
variant make_imbalanced.py "$data/resnet.pt" "$out/resnet_imbalanced.pt"
variant make_imbalanced.py "$data/mlp.pt" "$out/mlp_imbalanced.pt"
variant make_outliers.py "$data/vit_qkv.pt" "$out/vit_qkv_outliers_s1.pt" --seed 1

top1() {
  "$py" scripts/eval_torch.py "$1" "$data/test.npz" --json |
    "$py" -c 'import json,sys; print("%.2f" % (100 * json.load(sys.stdin)["top1"]))'
}

# quantize NAME MODEL MODE_YAML [EXTRA_YAML]: prints the artifact's top-1.
quantize() {
  local name=$1 model=$2 mode=$3 extra=${4:-}
  local dir="$out/$name"
  mkdir -p "$dir"
  printf 'results_dir: %s\nquantize:\n  backend: libtorch\n  model_path: %s\n%s\n%s\n' \
    "$dir" "$model" "$mode" "$extra" > "$dir/spec.yaml"
  printf 'dataset:\n  quant_calibration_dataset: {data_file: %s/calib.npz, batch_size: 64}\n' \
    "$data" >> "$dir/spec.yaml"
  "$tq" -q quantize -e "$dir/spec.yaml" > "$dir/log.txt" 2>&1 ||
    { echo "quantize failed: see $dir/log.txt" >&2; exit 1; }
  top1 "$dir/quantized_model_libtorch.pth"
}

static() {  # granularity
  printf '  mode: static_ptq\n  default_layer_dtype: int8\n  default_activation_dtype: int8\n'
  printf '  backend_kwargs: {latency_check: false}\n'
  printf '  layers:\n    - module_name: "*"\n      weights: {granularity: %s}\n' "$1"
}
int4='  mode: weight_only_ptq
  default_layer_dtype: int4
  layers:
    - module_name: "*"
      weights: {dtype: int4, granularity: per_channel}
'

echo "| model | case | fp32 | naive | with the algorithm | drop naive | drop with |"
echo "|---|---|---:|---:|---:|---:|---:|"
row() {  # model case fp32 naive alg
  "$py" -c "import sys; f,n,a=map(float,sys.argv[4:7]); \
print('| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |' % (sys.argv[1], sys.argv[2], f, n, a, f-n, f-a))" \
    "$1" "$2" "" "$3" "$4" "$5"
}

for m in resnet_imbalanced mlp_imbalanced; do
  fp=$(top1 "$out/$m.pt")
  for g in per_tensor per_channel; do
    n=$(quantize "$m-$g-minmax" "$out/$m.pt" "$(static "$g")")
    a=$(quantize "$m-$g-eqbc" "$out/$m.pt" "$(static "$g")" \
      $'  equalization: true\n  bias_correction: true\n')
    row "$m" "static int8, $g weights: minmax vs equalization + bias correction" "$fp" "$n" "$a"
  done
done

fidelity=()
for m in cnn_bn mlp effnet vit_qkv; do
  fp=$(top1 "$data/$m.pt")
  n=$(quantize "$m-int4-nearest" "$data/$m.pt" "$int4")
  a=$(quantize "$m-int4-gptq" "$data/$m.pt" "$int4" $'  weight_rounding: gptq\n')
  row "$m" "weight-only int4 per-channel: nearest vs GPTQ" "$fp" "$n" "$a"
  # Close to float, top-1 moves by a few images either way: how close each
  # artifact's outputs are to the float model's says which one is better.
  mapfile -t f < <("$py" scripts/bench/fidelity.py "$data/$m.pt" "$data/test.npz" \
    "$out/$m-int4-nearest/quantized_model_libtorch.pth" \
    "$out/$m-int4-gptq/quantized_model_libtorch.pth")
  read -r sn an _ <<< "${f[0]}"
  read -r sg ag _ <<< "${f[1]}"
  fidelity+=("| $m | $sn | $sg | $an | $ag |")
done

m=vit_qkv_outliers_s1
fp=$(top1 "$out/$m.pt")
n=$(quantize "$m-minmax" "$out/$m.pt" "$(static per_channel)")
a=$(quantize "$m-sq" "$out/$m.pt" "$(static per_channel)" $'  smoothquant: true\n')
row "$m" "static int8: minmax vs SmoothQuant" "$fp" "$n" "$a"

echo
echo "Weight-only int4 per-channel, outputs against the float model's (10k test images):"
echo
echo "| model | output SQNR nearest (dB) | output SQNR GPTQ (dB) | top-1 agreement nearest (%) | top-1 agreement GPTQ (%) |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${fidelity[@]}"
