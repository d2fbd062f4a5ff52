#!/usr/bin/env bash
# Runs the ctest suite while other processes keep every core busy, to show
# that no test races the CPU (docs/reliability.md). The load is one busy
# loop per core (LOAD, default: nproc); it is stopped when the script exits.
#
# Usage: scripts/test_under_load.sh [ctest args...]   e.g. -R unit
# Environment: BUILD_DIR (default build/), JOBS (ctest -j, default 2),
#              LOAD (busy loops, default nproc).
# The build must exist (scripts/setup.sh); the exit code is ctest's.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-${REPO_ROOT}/build}"
LOAD="${LOAD:-$(nproc)}"

if [[ ! -f "${BUILD_DIR}/CTestTestfile.cmake" ]]; then
  echo "test_under_load.sh: no build in ${BUILD_DIR}; run scripts/setup.sh first" >&2
  exit 2
fi

LOAD_PIDS=()
stop_load() {
  for pid in "${LOAD_PIDS[@]}"; do
    kill "${pid}" 2>/dev/null || true
  done
  for pid in "${LOAD_PIDS[@]}"; do
    wait "${pid}" 2>/dev/null || true
  done
}
trap stop_load EXIT
trap 'exit 130' INT TERM

for ((i = 0; i < LOAD; i++)); do
  yes > /dev/null &
  LOAD_PIDS+=("$!")
done
echo "test_under_load.sh: ${LOAD} busy loops (pids ${LOAD_PIDS[*]}) on $(nproc) cores" >&2

rc=0
ctest --test-dir "${BUILD_DIR}" --output-on-failure -j"${JOBS:-2}" "$@" || rc=$?
echo "test_under_load.sh: ctest exit code ${rc} under load" >&2
exit "${rc}"
