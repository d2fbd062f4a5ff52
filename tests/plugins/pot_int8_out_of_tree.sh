#!/usr/bin/env bash
# The pot_int8 worked example of docs/extending.md, end to end: install
# tao-quant into a fresh prefix, build the example plugin out of tree against
# it (find_package(TaoQuant) only), quantize the Fashion-MNIST CNN with it and
# evaluate the artifact against the float model with the gate
# max_top1_drop: 1.0 (exit code 3 when it fails). The commands are the ones
# the guide shows; test_plugins_pot_int8.cpp runs this and checks the results.
#
# Usage: tests/plugins/pot_int8_out_of_tree.sh <tao-quant build dir> <work dir>
# The work dir is deleted and recreated; it must not be / or the repository.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <tao-quant build dir> <work dir>" >&2
  exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$(cd "$1" && pwd)"
WORK="$2"
mkdir -p "${WORK}"
WORK="$(cd "${WORK}" && pwd)"
if [[ "${WORK}" == "/" || "${WORK}" == "${REPO}" || "${WORK}" == "${BUILD}" ]]; then
  echo "$0: refusing to use '${WORK}' as the work dir" >&2
  exit 2
fi
rm -rf "${WORK:?}"/*
cd "${REPO}"

PREFIX="${WORK}/prefix"
LAUNCHER=()
if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
GENERATOR=()
if command -v ninja >/dev/null; then GENERATOR=(-G Ninja); fi

set -x
# 1. Install tao-quant (tool, library, headers, CMake package).
cmake --install "${BUILD}" --prefix "${PREFIX}"
# 2. Build the plugin out of tree against the installed package.
cmake -S backends/examples/pot_int8 -B "${WORK}/build" "${GENERATOR[@]}" "${LAUNCHER[@]}" \
  -DCMAKE_PREFIX_PATH="${PREFIX}"
cmake --build "${WORK}/build"
# 3. Quantize with the plugin.
"${PREFIX}/bin/tao-quant" --plugin "${WORK}/build/libpot_int8.so" \
  quantize -e backends/examples/pot_int8/fmnist_cnn_pot_int8.yaml results_dir="${WORK}/results"
# 4. Evaluate the artifact against the float model (gate: top-1 drop <= 1 point).
"${PREFIX}/bin/tao-quant" evaluate -e backends/examples/pot_int8/fmnist_cnn_pot_int8.yaml --compare \
  results_dir="${WORK}/results"
