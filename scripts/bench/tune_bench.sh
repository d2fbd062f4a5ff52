#!/usr/bin/env bash
# tune vs quantize on the trained Fashion-MNIST MobileNetV2- and
# EfficientNet-style nets (weight-only, libtorch, candidates int4/int8/native,
# max_top1_drop 0.5 on 2000 test images): the wall time of one `tao-quant
# tune` divided by that of one plain `quantize` of the tuned spec (medians of
# REPEATS runs, side by side), the greedy search against the revert-worst-SQNR
# baseline (float layers, effective bits), and how the time budget holds
# when it is shorter than the search needs.
#
# Usage: scripts/bench/tune_bench.sh [REPEATS]   (default 3; run from anywhere)
# Needs build/bin/tao-quant and models/fmnist/{mbv2,effnet}.pt (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPEATS="${1:-3}"
TQ=build/bin/tao-quant
OUT="$(mktemp -d)"
trap 'rm -rf "${OUT}"' EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
field() { /usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['tune']; print(eval(sys.argv[2]))" "$@"; }

echo "model   search        float_layers  eff_bits  top1_drop  tune_s  quantize_s  tune/quantize"
for m in mbv2 effnet; do
  for search in greedy revert_worst; do
    tune_t=() q_t=()
    for i in $(seq "${REPEATS}"); do
      d="${OUT}/${m}_${search}_${i}"
      t0=$(now)
      "${TQ}" -q --no-html tune -e specs/demo/fmnist_mbv2_tune.yaml "quantize.model_path=models/fmnist/${m}.pt" \
        "quantize.tune.search=${search}" "results_dir=${d}" > /dev/null
      t1=$(now)
      cp "${d}/quantize_report.json" "${d}/tune_report.json"
      "${TQ}" -q --no-html quantize -e "${d}/tuned_spec.yaml" > /dev/null
      t2=$(now)
      tune_t+=("$(echo "${t1} - ${t0}" | bc)")
      q_t+=("$(echo "${t2} - ${t1}" | bc)")
    done
    rep="${OUT}/${m}_${search}_1/tune_report.json"
    tm=$(printf '%s\n' "${tune_t[@]}" | median)
    qm=$(printf '%s\n' "${q_t[@]}" | median)
    printf "%-7s %-13s %12s  %8.3f  %9.2f  %6.1f  %10.2f  %12.1fx\n" "${m}" "${search}" \
      "$(field "${rep}" "r['result']['float_layers']")" "$(field "${rep}" "r['result']['effective_bits']")" \
      "$(field "${rep}" "r['result']['float_top1'] - r['result']['top1']")" "${tm}" "${qm}" \
      "$(echo "${tm} / ${qm}" | bc -l)"
  done
done

echo
echo "time budget: effnet greedy (max_top1_drop 0.5 needs ~6 s unbounded), wall clock of the whole command"
for budget in 3 4 5 8; do
  d="${OUT}/budget_${budget}"
  t0=$(now)
  "${TQ}" -q --no-html tune -e specs/demo/fmnist_mbv2_tune.yaml quantize.model_path=models/fmnist/effnet.pt \
    "quantize.tune.time_budget_s=${budget}" "results_dir=${d}" > /dev/null 2>&1 || true
  t1=$(now)
  printf "budget %3d s: wall %.2f s (%3.0f%% of the budget), %s, %s float layers, %.2f bits, sensitivity on %s samples\n" \
    "${budget}" "$(echo "${t1} - ${t0}" | bc)" "$(echo "100 * (${t1} - ${t0}) / ${budget}" | bc -l)" \
    "$(field "${d}/quantize_report.json" "r['status']")" \
    "$(field "${d}/quantize_report.json" "r['result']['float_layers']")" \
    "$(field "${d}/quantize_report.json" "r['result']['effective_bits']")" \
    "$(field "${d}/quantize_report.json" "r['sensitivity']['samples']")"
done
