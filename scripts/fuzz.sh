#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang-14 with ASan + UBSan) in
# build-fuzz/ and runs each for SECONDS (default 600), one after the other.
# Reports each harness's executions and findings (crashes, leaks, timeouts,
# out-of-memory); the exit code is 1 when any harness found something.
#
# Usage: scripts/fuzz.sh [SECONDS] [HARNESS...]
#   HARNESS: spec manifest npy timing_cache report (default: all five)
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
  HARNESSES=(spec manifest npy timing_cache report)
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
    timing_cache | report)
      # A timing cache as quantize writes it; a quantize report's artifact
      # record and a batch summary as tao-quant writes them.
      /usr/bin/python3 - "${dir}" "${name}" <<'PY'
import json, sys
out, name = sys.argv[1], sys.argv[2]
machine = {"cpu": "Fuzz CPU", "isa": "avx2 fma", "libtorch": "1.13.0", "schema": 1, "threads": 2}
seeds = {"timing_cache": [
    {"engine": "onednn", "entries": {"layer/Conv2d/w=32x1x3x3/bs=1/int8": 0.0123,
                                     "model/3f2a/bs=32/fp32": 1.5},
     "format": "tao-quant timing cache", "machine": machine, "schema": 1},
    {"engine": "", "entries": {}, "format": "tao-quant timing cache", "machine": machine,
     "schema": 1}],
  "report": [
    {"schema_version": 1, "backend": {"requested": "libtorch", "resolved": "libtorch"},
     "artifact": {"file": "quantized_model_libtorch.pth", "bytes": 16,
                  "xxh64": "0123456789abcdef"}},
    {"schema_version": 1, "wall_s": 12.5,
     "manifest": {"path": "m.yaml", "name": "m", "hash": "0123456789abcdef",
                  "job_ids": ["a", "b"]},
     "shard": {"index": 1, "count": 1},
     "jobs": [{"id": "a", "index": 0, "spec": "s.yaml", "model": "m.pt", "backend": "libtorch",
               "mode": "static_ptq", "status": "passed", "failure": "", "stage": "evaluate",
               "exit_code": 0, "signal": 0, "message": "", "log_tail": [], "dir": "out/a",
               "duration_s": 1.5, "size_ratio": 0.25, "fp32_top1": 91.0, "quant_top1": 90.5,
               "top1_drop": 0.5, "speedup": 1.8, "resumed": False},
              {"id": "b", "index": 1, "spec": "s.yaml", "model": "m.pt", "backend": "libtorch",
               "mode": "weight_only_ptq", "status": "failed", "failure": "exit",
               "stage": "quantize", "exit_code": 1, "signal": 0, "message": "it <b>broke</b> |",
               "log_tail": ["line"], "dir": "out/b", "duration_s": None, "size_ratio": None,
               "fp32_top1": None, "quant_top1": None, "top1_drop": None, "speedup": None,
               "resumed": True}]}]}
for i, s in enumerate(seeds[name]):
    with open("%s/seed%d.json" % (out, i), "w") as f:
        json.dump(s, f, indent=2)
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
