#!/usr/bin/env bash
# Behaviour of two builds side by side, on the same models, data and specs:
#   - weight-only artifacts (libtorch and fakequant; int8, uint8, int4, fp8;
#     per_channel, per_tensor, per_group; a layers rule and skip_names):
#     byte-identical or not (cmp);
#   - static int8 (libtorch per_channel and per_tensor weights, fakequant):
#     top-1 of each artifact on the 10k Fashion-MNIST test images, measured
#     by plain PyTorch (scripts/eval_torch.py), and the difference;
#   - the error-correcting algorithms (weight-only GPTQ + bias correction,
#     AWQ; static equalization with bias absorption + bias correction,
#     SmoothQuant): the artifacts as above, and what each algorithm did per
#     layer (the reports' layers[].algorithms and calibration.algorithms,
#     seconds aside), equal or not.
# The never-slower latency check is off in both runs, so that which layers
# are int8 does not depend on this machine's timings.
#
# Usage: scripts/bench/compare_builds.sh OLD_BIN NEW_BIN OUT_DIR [MODEL...]
#   OLD_BIN, NEW_BIN: tao-quant executables (e.g. a worktree of the previous
#   main built with `cmake --build build --target tao-quant`, and build/bin/tao-quant)
#   MODEL: names under models/fmnist (default: cnn cnn_bn mlp resnet mbv2 effnet vit)
# Run from the repository root. Prints one line per case and a summary;
# exits 1 when a weight-only pair differs or a static top-1 moves by more
# than 0.02 pt.
set -euo pipefail
old=$1 new=$2 out=$3
shift 3
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(cnn cnn_bn mlp resnet mbv2 effnet vit)
py=/usr/bin/python3
mkdir -p "$out"
data=models/fmnist
fail=0 same=0 differ=0

spec() {  # name body...
  local f="$out/specs/$1.yaml"
  mkdir -p "$out/specs"
  shift
  printf '%s\n' "$@" > "$f"
  echo "$f"
}

# Both builds write to the same results_dir (the artifact embeds it), which
# is then moved aside.
quantize() {  # bin spec results
  mkdir -p "$(dirname "$3")"
  rm -rf "$out/run"
  "$1" -q quantize -e "$2" "results_dir=$out/run" > "$3.log" 2>&1 || {
    echo "FAILED: $1 quantize -e $2 (see $3.log)"
    return 1
  }
  rm -rf "$3"
  mv "$out/run" "$3"
}

weight_only() {  # model backend dtype granularity
  local name="wo-$1-$2-$3-$4"
  local f
  f=$(spec "$name" "quantize:" "  backend: $2" "  mode: weight_only_ptq" \
    "  default_layer_dtype: $3" "  model_path: $data/$1.pt" \
    "  layers:" "    - module_name: '*'" "      weights: {granularity: $4}" \
    "    - module_name: Linear" "      weights: {dtype: int8, granularity: per_channel}" \
    "  skip_names: ['*.0']")
  quantize "$old" "$f" "$out/old/$name" || { fail=1; return; }
  quantize "$new" "$f" "$out/new/$name" || { fail=1; return; }
  local a="$out/old/$name/quantized_model_$2.pth" b="$out/new/$name/quantized_model_$2.pth"
  if cmp -s "$a" "$b"; then
    same=$((same + 1))
    echo "identical  $name"
  else
    differ=$((differ + 1))
    fail=1
    echo "DIFFERENT  $name"
  fi
}

top1() {  # artifact
  "$py" scripts/eval_torch.py "$1" "$data/test.npz" --json | "$py" -c \
    'import json,sys; print("%.2f" % (100 * json.load(sys.stdin)["top1"]))'
}

static_int8() {  # model backend granularity
  local name="s8-$1-$2-$3"
  local f
  f=$(spec "$name" "quantize:" "  backend: $2" "  mode: static_ptq" \
    "  default_layer_dtype: int8" "  default_activation_dtype: int8" \
    "  model_path: $data/$1.pt" "  layers:" "    - module_name: '*'" \
    "      weights: {granularity: $3}" \
    "  backend_kwargs: $([[ $2 == libtorch ]] && echo '{latency_check: false}' || echo '{}')" \
    "dataset:" "  quant_calibration_dataset: {data_file: $data/calib.npz, batch_size: 64}")
  local a b
  if ! quantize "$old" "$f" "$out/old/$name"; then
    # A model the old build refused: the new one must convert it (a fix).
    quantize "$new" "$f" "$out/new/$name" || { fail=1; return; }
    b=$(top1 "$out/new/$name/quantized_model_$2.pth")
    echo "top-1 old (failed) new $b  $name"
    return
  fi
  quantize "$new" "$f" "$out/new/$name" || { fail=1; return; }
  a=$(top1 "$out/old/$name/quantized_model_$2.pth")
  b=$(top1 "$out/new/$name/quantized_model_$2.pth")
  local d
  d=$("$py" -c "print('%+.2f' % ($b - $a))")
  echo "top-1 old $a new $b ($d pt)  $name"
  "$py" -c "import sys; sys.exit(0 if abs($b - $a) <= 0.02 + 1e-9 else 1)" || fail=1
}

# What the algorithms did, from both reports, seconds aside: equal or not.
same_facts() {  # name backend
  "$py" - "$out/old/$1/quantize_report.json" "$out/new/$1/quantize_report.json" <<'PY'
import json, sys
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if k != "seconds"}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
def facts(path):
    r = json.load(open(path))
    return strip({"layers": {l["name"]: l.get("algorithms") for l in r["layers"]},
                  "stages": r["calibration"].get("algorithms"),
                  "warnings": sorted(r["warnings"])})
a, b = facts(sys.argv[1]), facts(sys.argv[2])
sys.exit(0 if a == b else 1)
PY
}

algorithms() {  # label model kind backend dtype settings...
  local name="$1-$2-$3-$4-$5" mode kw
  shift
  mode=$([[ $2 == wo ]] && echo weight_only_ptq || echo static_ptq)
  kw=$([[ $3 == libtorch && $2 == static ]] && echo '{latency_check: false}' || echo '{}')
  local f
  local act="  default_activation_dtype: int8"
  [[ $2 == wo ]] && act="  # weights only"
  f=$(spec "$name" "quantize:" "  backend: $3" "  mode: $mode" "  default_layer_dtype: $4" \
    "$act" "  model_path: $data/$1.pt" "  backend_kwargs: $kw" "${@:5}" \
    "dataset:" "  quant_calibration_dataset: {data_file: $data/calib.npz, batch_size: 64}")
  quantize "$old" "$f" "$out/old/$name" || { fail=1; return; }
  quantize "$new" "$f" "$out/new/$name" || { fail=1; return; }
  local a="$out/old/$name/quantized_model_$3.pth" b="$out/new/$name/quantized_model_$3.pth"
  local verdict=identical facts="facts equal"
  if [[ $2 == wo ]]; then
    cmp -s "$a" "$b" || verdict=DIFFERENT
  else
    [[ $(top1 "$a") == $(top1 "$b") ]] || verdict="TOP-1 DIFFERENT"
  fi
  same_facts "$name" || facts="FACTS DIFFER"
  [[ $verdict == identical && $facts == "facts equal" ]] || fail=1
  if [[ $2 == wo ]]; then
    [[ $verdict == identical ]] && same=$((same + 1)) || differ=$((differ + 1))
  fi
  echo "$verdict, $facts  $name"
}

for m in "${models[@]}"; do
  for b in libtorch fakequant; do
    for d in int8 uint8 fp8_e4m3fn fp8_e5m2; do weight_only "$m" "$b" "$d" per_channel; done
    weight_only "$m" "$b" int8 per_tensor
    weight_only "$m" "$b" int4 per_group
  done
  static_int8 "$m" libtorch per_channel
  static_int8 "$m" libtorch per_tensor
  static_int8 "$m" fakequant per_channel
  for b in libtorch fakequant; do
    algorithms gptq_bc "$m" wo "$b" int4 "  weight_rounding: gptq" "  bias_correction: true"
    algorithms eq_bc "$m" static "$b" int8 "  equalization: {absorb_bias: true}" \
      "  bias_correction: true"
  done
  case $m in vit | mlp)
    algorithms awq "$m" wo libtorch int4 "  awq: true"
    algorithms smoothquant "$m" static libtorch int8 "  smoothquant: true" ;;
  esac
done
echo "weight-only artifacts: $same identical, $differ different"
exit "$fail"
