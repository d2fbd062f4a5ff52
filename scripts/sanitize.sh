#!/usr/bin/env bash
# Builds tao-quant, its plugins and every test with ASan + UBSan
# (RelWithDebInfo, so that the suite runs in reasonable time) in a build
# directory of its own, and runs the whole ctest suite there: unit, CLI and
# LibTorch tests, the models fixture included (it reuses models/).
#
# Usage: scripts/sanitize.sh [ctest args...]   e.g. scripts/sanitize.sh -R unit
# Environment: BUILD_DIR (default build-asan/), JOBS (build and ctest -j,
#              default 2).
# Exit code: ctest's (a sanitizer finding aborts the test that hit it).
# Not part of CI: a cold sanitizer build plus the suite takes about an hour on
# 2 cores (docs/reliability.md has the last run).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-${REPO_ROOT}/build-asan}"
JOBS="${JOBS:-2}"
cd "${REPO_ROOT}"

cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTQ_SANITIZE=address,undefined >/dev/null
cmake --build "${BUILD_DIR}" -j"${JOBS}"

SUPP="${REPO_ROOT}/tests/sanitize"
# Findings abort; leaks are checked at exit. LSan's suppressions name only
# allocations made inside LibTorch / Python's own runtime (see the file).
ASAN_COMMON="abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=${SUPP}/lsan.supp:print_suppressions=0"
# LeakSanitizer cannot run under ptrace: the tests that run tao-quant under
# strace (fault injection) run with leak checks off, ASan and UBSan on.
PTRACED="result pair"
rc=0
ASAN_OPTIONS="${ASAN_COMMON}:detect_leaks=1" \
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -j"${JOBS}" -E "${PTRACED}" "$@" || rc=$?
ASAN_OPTIONS="${ASAN_COMMON}:detect_leaks=0" \
  ctest --test-dir "${BUILD_DIR}" --output-on-failure -j"${JOBS}" -R "${PTRACED}" "$@" || rc=$?
exit "${rc}"
