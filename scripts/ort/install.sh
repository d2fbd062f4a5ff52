#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (npm onnxruntime-node, CPU provider)
# into third_party/ort/ (git-ignored): what the tests run exported models
# in. Idempotent; no Python. ONNXRUNTIME_NODE_INSTALL=skip: the package's
# postinstall would otherwise download a CUDA provider from a host this
# kind of machine cannot reach (../shared/notes/deploy-export.md).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="${REPO_ROOT}/third_party/ort"
VERSION="${ORT_NODE_VERSION:-1.30.0}"
if [[ -f "${DEST}/node_modules/onnxruntime-node/package.json" ]] &&
   grep -q "\"version\": \"${VERSION}\"" "${DEST}/node_modules/onnxruntime-node/package.json"; then
  echo "ort/install.sh: onnxruntime-node ${VERSION} present in ${DEST}"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "ort/install.sh: npm (Node.js) is required to install onnxruntime-node" >&2
  exit 1
fi
mkdir -p "${DEST}"
echo "ort/install.sh: installing onnxruntime-node ${VERSION} into ${DEST} ..."
[[ -f "${DEST}/package.json" ]] || echo '{"private": true}' >"${DEST}/package.json"
ONNXRUNTIME_NODE_INSTALL=skip npm install --prefix "${DEST}" --no-audit --no-fund \
  "onnxruntime-node@${VERSION}" >/dev/null
echo "ort/install.sh: done"
