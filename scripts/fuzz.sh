#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang-14 with ASan + UBSan) in
# build-fuzz/ and runs each for SECONDS (default 600), one after the other.
# Reports each harness's executions and findings (crashes, leaks, timeouts,
# out-of-memory); the exit code is 1 when any harness found something.
#
# Usage: scripts/fuzz.sh [SECONDS] [HARNESS...]     HARNESS: spec manifest npy
#   e.g. scripts/fuzz.sh 60 npy
# Environment: FUZZ_DIR (default build-fuzz/), CXX (default clang++-14).
# Needs clang-14 and libclang-rt-14-dev. Corpora grow in FUZZ_DIR/corpus/NAME
# (seeded from specs/ and tests/data/yaml_corpus/); findings are written to
# FUZZ_DIR/findings/NAME/. Not part of CI (see docs/reliability.md).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
cd "${REPO_ROOT}"

SECONDS_EACH="${1:-600}"
shift || true
HARNESSES=("$@")
if [[ ${#HARNESSES[@]} -eq 0 ]]; then
  HARNESSES=(spec manifest npy)
fi
FUZZ_DIR="${FUZZ_DIR:-${REPO_ROOT}/build-fuzz}"

if [[ ! -f "${FUZZ_DIR}/build.ninja" ]]; then
  CXX="${CXX:-clang++-14}" CC="${CC:-clang-14}" cmake -S . -B "${FUZZ_DIR}" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_FUZZ=ON -DTQ_BUILD_TESTS=OFF
fi
targets=()
for h in "${HARNESSES[@]}"; do targets+=("fuzz_${h}"); done
# ccache is bypassed: its cached objects are not always valid for clang here.
CCACHE_DISABLE=1 cmake --build "${FUZZ_DIR}" -j"${JOBS:-1}" --target "${targets[@]}"

# Seeds: every spec, manifest and corpus case, plus a few NPY headers.
seed() {
  local name=$1 dir="${FUZZ_DIR}/corpus/$1"
  mkdir -p "${dir}"
  # Inputs that once found a bug (tests/fuzz/regressions/NAME_*).
  find tests/fuzz/regressions -name "${name}_*" -exec cp -n {} "${dir}/" \;
  case "${name}" in
    spec | manifest)
      find specs tests/data/yaml_corpus -name '*.yaml' -size -64k -exec cp -n {} "${dir}/" \; ;;
    npy)
      /usr/bin/python3 - "${dir}" <<'PY'
import io, sys, numpy as np
for i, a in enumerate([np.zeros((4, 3), np.float32), np.arange(10, dtype=np.int64),
                       np.zeros((2, 1, 2, 2), np.uint8), np.zeros((3,), np.float64),
                       np.zeros((0, 5), np.int32)]):
    b = io.BytesIO(); np.save(b, a); open("%s/seed%d.npy" % (sys.argv[1], i), "wb").write(b.getvalue())
PY
      ;;
  esac
}

status=0
for h in "${HARNESSES[@]}"; do
  seed "${h}"
  mkdir -p "${FUZZ_DIR}/findings/${h}"
  log="${FUZZ_DIR}/fuzz_${h}.log"
  echo "== fuzz_${h}: ${SECONDS_EACH} s (log ${log})"
  rc=0
  nice "${FUZZ_DIR}/bin/fuzz_${h}" "${FUZZ_DIR}/corpus/${h}" -max_total_time="${SECONDS_EACH}" \
    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="${FUZZ_DIR}/findings/${h}/" > "${log}" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "${log}" | grep -o '[0-9]*$' || echo "?")
  findings=$(find "${FUZZ_DIR}/findings/${h}" -type f | wc -l)
  echo "fuzz_${h}: exit ${rc}, ${execs} executions, ${findings} findings in ${FUZZ_DIR}/findings/${h}/"
  if [[ ${rc} -ne 0 || ${findings} -ne 0 ]]; then
    status=1
    grep -E 'ERROR|SUMMARY|==[0-9]+==' "${log}" | head -20 || true
  fi
done
exit "${status}"
