#!/usr/bin/env bash
# Installs tao-quant's Debian dependencies (only the missing ones), makes sure
# OpenBLAS (pthread) is the active BLAS, then configures (once) and builds.
#
# Usage: scripts/setup.sh [--no-build] [--demo]
#   --no-build   install/check packages and BLAS only; no configure, no build
#   --demo       only what scripts/demo.sh needs: no test-only packages
#                (chromium, strace, Slurm), build only the tao-quant target
# Environment:
#   BUILD_DIR    build folder (default: build/ at the repository root;
#                a relative path is taken from the repository root)
#   JOBS         parallel build jobs (default: 2)
#   CMAKE_ARGS   extra arguments for the first configure (word-split)
#   TARGET       build only this target (default: everything; --demo: tao-quant)
#
# Idempotent: a second run installs nothing, does not re-configure, and the
# build is incremental.  Works from any directory.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"

DO_BUILD=1
DEMO=0
for arg in "$@"; do
  case "${arg}" in
    --no-build) DO_BUILD=0 ;;
    --demo) DEMO=1 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "setup.sh: unknown argument '${arg}'" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libyaml-dev python3-yaml libcli11-dev nlohmann-json3-dev libspdlog-dev catch2
  libopencv-imgcodecs-dev libopencv-imgproc-dev libzip-dev libopenblas0-pthread libxml2-dev
  python3-torch python3-torchvision python3-numpy dataset-fashion-mnist clang-format
  clang-14 libclang-rt-14-dev
  libkainjow-mustache-dev
  libonnx-dev
)
# Only the tests need these (headless Chromium loads the HTML reports; strace
# injects faults into quantize runs; Slurm, munge and iproute2 make the
# throwaway one-node cluster of scripts/slurm/cluster.sh; python3-onnx: the
# ONNX checker from Python, an independent check of the exported files;
# nodejs: npm installs ONNX Runtime (scripts/ort/install.sh)).
TEST_PACKAGES=(chromium strace slurm-wlm munge iproute2 python3-onnx nodejs)
if [[ ${DEMO} -eq 0 ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi

SUDO=()
if [[ ${EUID} -ne 0 ]]; then
  SUDO=(sudo)
fi

log() { echo "setup.sh: $*"; }

# ---------------------------------------------------------------- packages
is_installed() {
  local status
  status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null || true)"
  [[ "${status}" == ii* ]]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! is_installed "${pkg}"; then
    missing+=("${pkg}")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing missing packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "all ${#PACKAGES[@]} Debian packages present"
fi

# --------------------------------------------------------------------- BLAS
# Debian's libtorch links libblas.so.3 / liblapack.so.3 through alternatives;
# the reference (netlib) implementation is many times slower than OpenBLAS.
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
check_alternative() {
  local lib="$1" name="$1.so.3-${multiarch}"
  local want="/usr/lib/${multiarch}/openblas-pthread/$1.so.3"
  local current
  current="$(update-alternatives --query "${name}" 2>/dev/null | sed -n 's/^Value: //p' || true)"
  if [[ "${current}" == "${want}" ]]; then
    log "${lib}: OpenBLAS (pthread) is active"
    return 0
  fi
  if [[ ! -e "${want}" ]]; then
    echo "setup.sh: WARNING: ${want} not found; ${lib} alternative is '${current:-unset}'" >&2
    return 0
  fi
  {
    echo "************************************************************************"
    echo "setup.sh: WARNING: the active ${lib} is '${current:-unset}',"
    echo "setup.sh: WARNING: not OpenBLAS pthread -- LibTorch would be very slow."
    echo "setup.sh: WARNING: fixing: update-alternatives --set ${name} ${want}"
    echo "************************************************************************"
  } >&2
  "${SUDO[@]}" update-alternatives --set "${name}" "${want}"
}
check_alternative libblas
check_alternative liblapack

# ONNX Runtime for the tests (npm onnxruntime-node into third_party/ort/).
if [[ ${DEMO} -eq 0 ]]; then
  bash "${SCRIPT_DIR}/ort/install.sh"
fi

if [[ ${DO_BUILD} -eq 0 ]]; then
  log "--no-build: skipping configure and build"
  exit 0
fi

# -------------------------------------------------------- configure + build
BUILD_DIR="${BUILD_DIR:-build}"
if [[ "${BUILD_DIR}" != /* ]]; then
  BUILD_DIR="${REPO_ROOT}/${BUILD_DIR}"
fi
JOBS="${JOBS:-2}"

if [[ ! -f "${BUILD_DIR}/CMakeCache.txt" ]]; then
  generator=()
  if command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  extra=()
  if [[ -n "${CMAKE_ARGS:-}" ]]; then
    read -r -a extra <<<"${CMAKE_ARGS}"
  fi
  log "configuring ${BUILD_DIR} ${generator[*]}"
  cmake -S "${REPO_ROOT}" -B "${BUILD_DIR}" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}"
else
  log "${BUILD_DIR} already configured"
fi

TARGET="${TARGET:-}"
if [[ ${DEMO} -eq 1 && -z "${TARGET}" ]]; then
  TARGET=tao-quant
fi
target_args=()
if [[ -n "${TARGET}" ]]; then
  target_args=(--target "${TARGET}")
fi
log "building ${TARGET:-everything} (${JOBS} jobs)"
cmake --build "${BUILD_DIR}" -j"${JOBS}" "${target_args[@]}"
log "build OK: ${BUILD_DIR}"
