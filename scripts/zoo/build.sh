#!/usr/bin/env bash
# Builds (once) the model zoo that specs/zoo/manifest.yaml runs over.
#
# Usage: scripts/zoo/build.sh [OUTDIR] [PART ...]
#   OUTDIR  default: models/ at the repository root -- the same cache the tests
#           use (scripts/models/make_test_models.sh), so nothing is built twice.
#           specs/zoo/ finds another OUTDIR through TQ_ZOO_DIR (an absolute path).
#   PART    fmnist -> OUTDIR/fmnist/{cnn,cnn_bn,resnet,vit,mlp}.pt, trained on
#                     Fashion-MNIST, with test.npz and calib.npz (labels: accuracy)
#           tv     -> OUTDIR/tv/<arch>.pt for 12 torchvision architectures with
#                     random weights (coverage and speed), and
#                     OUTDIR/tv/imagenet_rand_n8_224.npz (calibration stand-in)
#           all    -> fmnist tv (the default)
#
# Needs Debian's /usr/bin/python3 with python3-torch and python3-torchvision.
# Every artifact is a cache: one that exists is never rebuilt (delete it to
# rebuild). Artifacts are written under a temporary name and renamed, and each
# has a lock, so concurrent runs neither clash nor build twice.
#
# Time on 2 cores: ~6 min for the torchvision models (vit_b_16, densenet121
# and resnet50 are most of it), ~8 min to train the Fashion-MNIST models.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
PY=/usr/bin/python3
MODELS="${REPO_ROOT}/scripts/models"

# The torchvision architectures of the zoo (make_torchvision.py --list).
TV_ARCHS=(resnet18 resnet50 mobilenet_v2 mobilenet_v3_small shufflenet_v2_x1_0 squeezenet1_1
          efficientnet_b0 regnet_x_400mf densenet121 googlenet mnasnet1_0 vit_b_16)
FMNIST_ARCHS=(cnn cnn_bn resnet vit mlp)

OUTDIR="${1:-${REPO_ROOT}/models}"
if [[ $# -gt 0 ]]; then shift; fi
PARTS=("$@")
if [[ ${#PARTS[@]} -eq 0 ]]; then PARTS=(all); fi
want_fmnist=0 want_tv=0
for part in "${PARTS[@]}"; do
  case "${part}" in
    all) want_fmnist=1 want_tv=1 ;;
    fmnist) want_fmnist=1 ;;
    tv) want_tv=1 ;;
    *) echo "zoo/build.sh: unknown part '${part}' (fmnist|tv|all)" >&2; exit 2 ;;
  esac
done

mkdir -p "${OUTDIR}/tv"
OUTDIR="$(cd "${OUTDIR}" && pwd)"
log() { echo "zoo: $*"; }

# Fashion-MNIST data + all five trained models, and the torchvision resnet18 +
# the random ImageNet-shaped npz: make_test_models.sh builds and caches them.
parts=()
if [[ ${want_fmnist} -eq 1 ]]; then parts+=(fmnist extra); fi
if [[ ${want_tv} -eq 1 ]]; then parts+=(tv); fi
bash "${MODELS}/make_test_models.sh" "${OUTDIR}" "${parts[@]}"

# A model is current when its stamp (MODEL.gen) is the generator's hash:
# changing make_torchvision.py remakes the models.
stamp="$(sha256sum < "${MODELS}/make_torchvision.py" | cut -c1-16)"
is_current() { [[ -e "$1" && -e "$1.gen" && "$(cat "$1.gen")" == "${stamp}" ]]; }

if [[ ${want_tv} -eq 1 ]]; then
  for arch in "${TV_ARCHS[@]}"; do
    out="${OUTDIR}/tv/${arch}.pt"
    if is_current "${out}"; then
      log "tv/${arch}.pt present (cached)"
      continue
    fi
    # One lock per model: a concurrent run waits, then finds it cached.
    exec 9>"${OUTDIR}/.lock-zoo-${arch}"
    flock 9
    if is_current "${out}"; then
      log "tv/${arch}.pt present (made by a concurrent run)"
    else
      if [[ ! -x "${PY}" ]] || ! "${PY}" -c 'import torch, torchvision' 2>/dev/null; then
        echo "zoo/build.sh: ${PY} with torch and torchvision is required (scripts/setup.sh)" >&2
        exit 1
      fi
      log "exporting torchvision ${arch} (random weights) ..."
      t0=${SECONDS}
      # make_torchvision.py writes through a temporary file and a rename.
      "${PY}" "${MODELS}/make_torchvision.py" --arch "${arch}" --out "${out}"
      echo "${stamp}" > "${out}.gen"
      log "tv/${arch}.pt took $((SECONDS - t0))s"
    fi
    exec 9>&-
  done
fi

log "zoo in ${OUTDIR}:"
listed=()
if [[ ${want_fmnist} -eq 1 ]]; then
  for arch in "${FMNIST_ARCHS[@]}"; do listed+=("${OUTDIR}/fmnist/${arch}.pt"); done
fi
if [[ ${want_tv} -eq 1 ]]; then
  for arch in "${TV_ARCHS[@]}"; do listed+=("${OUTDIR}/tv/${arch}.pt"); done
fi
for f in "${listed[@]}"; do
  printf '  %10d  %s\n' "$(stat -c %s "${f}")" "${f}"
done
log "run it: build/bin/tao-quant batch specs/zoo/manifest.yaml --jobs 2 --keep-going"
