#!/usr/bin/env bash
# Builds tao-quant (scripts/setup.sh) and runs the test suite with ctest.
#
# Usage: scripts/test.sh [extra ctest args...]   e.g. scripts/test.sh -R unit
# Environment: BUILD_DIR (default build/), JOBS (default 2).
# The first run also builds the test models (ctest fixture "models", cached in
# models/ by scripts/models/make_test_models.sh).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
cd "${REPO_ROOT}"

BUILD_DIR="${BUILD_DIR:-build}"
if [[ "${BUILD_DIR}" != /* ]]; then
  BUILD_DIR="${REPO_ROOT}/${BUILD_DIR}"
fi
export BUILD_DIR

bash "${SCRIPT_DIR}/setup.sh"
ctest --test-dir "${BUILD_DIR}" --output-on-failure -j"${JOBS:-2}" "$@"
