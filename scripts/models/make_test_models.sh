#!/usr/bin/env bash
# Builds (once) the models and data that tao-quant's tests and demo use.
#
# Usage: scripts/models/make_test_models.sh [OUTDIR] [PART ...]
#   OUTDIR  default: models/ at the repository root (relative paths are
#           taken from the current directory)
#   PART    fmnist  -> OUTDIR/fmnist/{test.npz,calib.npz,calib_png,test_png,cnn.pt,cnn.json,
#                      cnn_imbalanced.pt, mbv2_imbalanced.pt (function-preserving variants,
#                      make_imbalanced.py),
#                      cnn_outlier.pt (one layer's input with an outlier channel,
#                      make_outlier_layer.py),
#                      mbv2.pt (MobileNetV2-style: depthwise, ReLU6),
#                      resnet.pt (a narrow ResNet: residual blocks, BN),
#                      effnet.pt (EfficientNet-style: SiLU, squeeze-excite),
#                      vit_qkv.pt (timm-style ViT), vit_qkv_outliers.pt (its
#                      LayerNorm outputs with outlier channels, make_outliers.py),
#                      vit.pt (the ViT with nn.TransformerEncoder: in_proj)}
#           demo    -> OUTDIR/fmnist/{test.npz,calib.npz,calib_png,test_png,cnn.pt,cnn.json}:
#                      what scripts/demo.sh needs (a part of fmnist)
#           tv      -> OUTDIR/tv/{resnet18.pt,imagenet_rand_n8_224.npz}
#           tiny    -> OUTDIR/tiny/ (random-weight transformer encoder, EfficientNet-B0, DenseNets)
#           extra   -> OUTDIR/fmnist/{cnn_bn,resnet,mlp}.pt (+ .json); not in "all"
#           all     -> fmnist tv tiny (the default)
#         The test fixtures build the same in groups (tests/CMakeLists.txt), so that
#         one net that fails does not fail the tests of the others:
#           base    -> the fmnist data, cnn and its variants, tv, tiny
#           mbv2    -> the fmnist data, mbv2, mbv2_imbalanced
#           resnet  -> the fmnist data, resnet
#           effnet  -> the fmnist data, effnet
#           vit     -> the fmnist data, vit_qkv, vit_qkv_outliers, vit
#
# Environment: TQ_MODELS_RECIPE=test (default) trains each Fashion-MNIST net
# on a subset of the training set for fewer epochs (what the tests need: a
# trained net, cheap on a busy machine); TQ_MODELS_RECIPE=full trains the nets
# behind the figures in README.md and docs/ (train_fmnist.py --recipe).
#
# Everything is a cache: an artifact that exists is never rebuilt (delete it,
# or the whole OUTDIR, to rebuild).  Each artifact group has its own lock
# (flock on OUTDIR/.lock-<group>): concurrent calls that need the same group
# wait for each other (the second then finds it cached), while a call that
# needs only present artifacts never waits.  Every artifact is produced under
# a temporary name in OUTDIR and renamed into place, so no half-written file
# is ever visible under its final name.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
PY=/usr/bin/python3

OUTDIR="${1:-${REPO_ROOT}/models}"
if [[ $# -gt 0 ]]; then shift; fi
PARTS=("$@")
if [[ ${#PARTS[@]} -eq 0 ]]; then PARTS=(all); fi

RECIPE="${TQ_MODELS_RECIPE:-test}"
case "${RECIPE}" in
  test | full) ;;
  *) echo "make_test_models: TQ_MODELS_RECIPE='${RECIPE}' is not a recipe (test|full)" >&2; exit 2 ;;
esac

# What to build: the cnn group (the CNN and its variants), each slower net's
# group, the torchvision and tiny nets, the extra nets.
want_cnn=0 want_demo=0 want_mbv2=0 want_resnet=0 want_effnet=0 want_vit=0 want_tv=0 want_extra=0
want_tiny=0
for part in "${PARTS[@]}"; do
  case "${part}" in
    all) want_cnn=1 want_mbv2=1 want_resnet=1 want_effnet=1 want_vit=1 want_tv=1 want_tiny=1 ;;
    fmnist) want_cnn=1 want_mbv2=1 want_resnet=1 want_effnet=1 want_vit=1 ;;
    base) want_cnn=1 want_tv=1 want_tiny=1 ;;
    demo) want_demo=1 ;;
    mbv2) want_mbv2=1 ;;
    resnet) want_resnet=1 ;;
    effnet) want_effnet=1 ;;
    vit) want_vit=1 ;;
    tiny) want_tiny=1 ;;
    tv) want_tv=1 ;;
    extra) want_extra=1 ;;
    *)
      echo "make_test_models: unknown part '${part}' (all|fmnist|base|demo|mbv2|resnet|effnet|vit|tv|tiny|extra)" >&2
      exit 2
      ;;
  esac
done

mkdir -p "${OUTDIR}"
OUTDIR="$(cd "${OUTDIR}" && pwd)"

TMP=""
cleanup() { if [[ -n "${TMP}" ]]; then rm -rf "${TMP}"; fi; }
trap cleanup EXIT

# Called before building anything: checks Python and makes the scratch folder
# (inside OUTDIR, so that the final mv is a rename on one filesystem).
prepare() {
  if [[ -n "${TMP}" ]]; then return 0; fi
  if [[ ! -x "${PY}" ]] || ! "${PY}" -c 'import torch, torchvision, numpy' 2>/dev/null; then
    echo "make_test_models: ${PY} with torch/torchvision/numpy is required (run scripts/setup.sh)" >&2
    exit 1
  fi
  TMP="$(mktemp -d "${OUTDIR}/.tmp-make.XXXXXX")"
}

log() { echo "make_test_models: $*"; }
did_something=0

# lock NAME: holds OUTDIR/.lock-NAME on fd 9 until unlock (or exit).
lock() {
  exec 9>"${OUTDIR}/.lock-$1"
  if ! flock -n 9; then
    log "waiting for another run to finish ${OUTDIR}/.lock-$1 ..."
    flock 9
  fi
}
unlock() { exec 9>&-; }

# Moves TMP/src to dest (same filesystem: a rename) unless dest exists.
install_artifact() {
  local src="$1" dest="$2"
  if [[ -e "${dest}" ]]; then return 0; fi
  mv -T "${src}" "${dest}"
  log "created ${dest}"
}

fmnist_data_missing() {
  local f
  for f in test.npz calib.npz calib_png test_png; do
    [[ -e "${OUTDIR}/fmnist/${f}" ]] || return 0
  done
  return 1
}

fmnist_data() {
  local d="${OUTDIR}/fmnist" f
  mkdir -p "${d}"
  if ! fmnist_data_missing; then
    log "fmnist data present in ${d} (cached)"
    return 0
  fi
  lock fmnist-data
  if ! fmnist_data_missing; then
    unlock
    log "fmnist data present in ${d} (made by a concurrent run)"
    return 0
  fi
  prepare
  log "writing Fashion-MNIST data to ${d} ..."
  "${PY}" "${SCRIPT_DIR}/fmnist_data.py" "${TMP}/fmnist"
  for f in test.npz calib.npz calib_png test_png; do
    install_artifact "${TMP}/fmnist/${f}" "${d}/${f}"
  done
  unlock
  did_something=1
}

fmnist_model() {
  local arch="$1" d="${OUTDIR}/fmnist"
  mkdir -p "${d}"
  if [[ -e "${d}/${arch}.pt" ]]; then
    log "fmnist/${arch}.pt present (cached)"
    return 0
  fi
  lock "fmnist-${arch}"
  if [[ -e "${d}/${arch}.pt" ]]; then
    unlock
    log "fmnist/${arch}.pt present (made by a concurrent run)"
    return 0
  fi
  prepare
  log "training fmnist/${arch} (Fashion-MNIST, recipe ${RECIPE}, 2 threads) ..."
  local t0=${SECONDS}
  "${PY}" "${SCRIPT_DIR}/train_fmnist.py" --arch "${arch}" --recipe "${RECIPE}" --out "${TMP}/train-${arch}"
  # JSON first: the .pt is the "done" marker.
  rm -f "${d}/${arch}.json"
  install_artifact "${TMP}/train-${arch}/${arch}.json" "${d}/${arch}.json"
  install_artifact "${TMP}/train-${arch}/${arch}.pt" "${d}/${arch}.pt"
  unlock
  log "fmnist/${arch} took $((SECONDS - t0))s"
  did_something=1
}

# A model made by a generator script is cached together with a stamp (the
# generator's hash in MODEL.gen): when the script changes, the model is made
# again.
gen_stamp() { cat "$@" | sha256sum | cut -c1-16; }
is_current() { [[ -e "$1" && -e "$1.gen" && "$(cat "$1.gen")" == "$2" ]]; }

tv_models() {
  local d="${OUTDIR}/tv" npz="imagenet_rand_n8_224.npz"
  local stamp
  stamp="$(gen_stamp "${SCRIPT_DIR}/make_torchvision.py")"
  mkdir -p "${d}"
  if is_current "${d}/resnet18.pt" "${stamp}" && [[ -e "${d}/${npz}" ]]; then
    log "tv/resnet18.pt and tv/${npz} present (cached)"
    return 0
  fi
  lock tv
  if is_current "${d}/resnet18.pt" "${stamp}"; then
    log "tv/resnet18.pt present (cached)"
  else
    prepare
    log "exporting torchvision resnet18 (random weights) ..."
    "${PY}" "${SCRIPT_DIR}/make_torchvision.py" --arch resnet18 --out "${TMP}/resnet18.pt"
    install_artifact "${TMP}/resnet18.pt" "${d}/resnet18.pt"
    echo "${stamp}" > "${d}/resnet18.pt.gen"
    did_something=1
  fi
  if [[ -e "${d}/${npz}" ]]; then
    log "tv/${npz} present (cached)"
  else
    prepare
    "${PY}" "${SCRIPT_DIR}/make_torchvision.py" --npz-only --npz 8 --input-size 224 --out "${TMP}/x.pt"
    install_artifact "${TMP}/${npz}" "${d}/${npz}"
    did_something=1
  fi
  unlock
}

tiny_models() {
  local d="${OUTDIR}/tiny"
  local stamp
  stamp="$(gen_stamp "${SCRIPT_DIR}/make_tiny_models.py" "${SCRIPT_DIR}/make_torchvision.py")"
  if [[ -e "${d}/encoder.pt" && -e "${d}/effnet_x.npz" && -e "${d}/densenet_x.npz" ]] &&
     is_current "${d}/effnet_b0.pt" "${stamp}" && [[ -e "${d}/densenet_tiny.pt" && -e "${d}/densenet_shared.pt" ]]; then
    log "tiny models present (cached)"
    return 0
  fi
  lock tiny
  prepare
  log "writing tiny random-weight models (transformer encoder, efficientnet_b0) ..."
  "${PY}" "${SCRIPT_DIR}/make_tiny_models.py" "${TMP}/tiny"
  mkdir -p "${d}"
  for f in encoder_x.npz encoder.pt effnet_x.npz effnet_b0.pt densenet_x.npz densenet_tiny.pt densenet_shared.pt; do
    install_artifact "${TMP}/tiny/${f}" "${d}/${f}"
  done
  echo "${stamp}" > "${d}/effnet_b0.pt.gen"
  unlock
  did_something=1
}

# A function-preserving variant of a trained net: fmnist_variant SCRIPT SRC OUT
# (the CNN with uneven per-channel ranges, for equalization; the ViT with
# outlier channels, for SmoothQuant).
fmnist_variant() {
  local script="$1" src="$2" out="$3" d="${OUTDIR}/fmnist" stamp
  stamp="$(gen_stamp "${SCRIPT_DIR}/${script}" "${SCRIPT_DIR}/variant_util.py" "${d}/${src}")"
  if is_current "${d}/${out}" "${stamp}"; then
    log "fmnist/${out} present (cached)"
    return 0
  fi
  lock "fmnist-${out%.pt}"
  prepare
  "${PY}" "${SCRIPT_DIR}/${script}" "${d}/${src}" "${TMP}/${out}" "${d}/test.npz"
  rm -f "${d}/${out}"
  install_artifact "${TMP}/${out}" "${d}/${out}"
  echo "${stamp}" > "${d}/${out}.gen"
  unlock
  did_something=1
}

if [[ ${want_tiny} -eq 1 ]]; then
  tiny_models
fi
if [[ $((want_cnn + want_demo + want_mbv2 + want_resnet + want_effnet + want_vit + want_extra)) -gt 0 ]]; then
  fmnist_data
fi
if [[ ${want_demo} -eq 1 && ${want_cnn} -eq 0 ]]; then
  fmnist_model cnn
fi
if [[ ${want_cnn} -eq 1 ]]; then
  fmnist_model cnn
  fmnist_variant make_imbalanced.py cnn.pt cnn_imbalanced.pt
  fmnist_variant make_outlier_layer.py cnn.pt cnn_outlier.pt
fi
if [[ ${want_mbv2} -eq 1 ]]; then
  fmnist_model mbv2
  fmnist_variant make_imbalanced.py mbv2.pt mbv2_imbalanced.pt
fi
if [[ ${want_resnet} -eq 1 ]]; then
  fmnist_model resnet
fi
if [[ ${want_effnet} -eq 1 ]]; then
  fmnist_model effnet
fi
if [[ ${want_vit} -eq 1 ]]; then
  fmnist_model vit_qkv
  fmnist_variant make_outliers.py vit_qkv.pt vit_qkv_outliers.pt
  fmnist_model vit
fi
if [[ ${want_tv} -eq 1 ]]; then
  tv_models
fi
if [[ ${want_extra} -eq 1 ]]; then
  for arch in cnn_bn resnet mlp; do
    fmnist_model "${arch}"
  done
fi

if [[ ${did_something} -eq 0 ]]; then
  log "all requested artifacts already present in ${OUTDIR}"
else
  log "done (${OUTDIR})"
fi
