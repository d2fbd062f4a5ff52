#!/usr/bin/env python3
"""Runs a TorchScript artifact at a sequence of batch sizes in one process,
in plain PyTorch, as a server that takes variable batches does (issue 31).

LibTorch 1.13's onednn int8 convolutions fail a weight reorder on some
models ("could not create a primitive descriptor for a reorder primitive")
when the batch size changes between 1 and more; measured on this kind of
machine (AMD EPYC, AVX-512 VNNI) with the static int8 MobileNetV2 of the zoo:

    scripts/diag/batch_change.py results/mbv2/quantized_model_libtorch.pth --threads 2 1,8,1
    # call 1 batch 8: FAIL RuntimeError: could not create a primitive descriptor ...
    scripts/diag/batch_change.py ... --threads 1 1,8,1              # ok
    scripts/diag/batch_change.py ... --threads 2 --engine qnnpack 1,8,1,32,1   # ok
    # 4,8 and 8,32 are ok: only a change between batch 1 and more fails.

PyTorch's quantize_jit artifacts of MobileNetV2, SqueezeNet 1.1 and
MNASNet fail the same way (call 1, batch 8). One conv alone reproduces it
(scripts/diag/onednn_reorder_repro.py); PyTorch #86876 fixed the reorder
upstream (after 1.13). tao-quant keeps the failing layers float
(backends/libtorch/batch_change.cpp), runs this sequence before it
publishes a static artifact, and refuses one that fails
(lib/src/torch/artifact_checks.h): docs/reliability.md.

Usage: batch_change.py ARTIFACT [--threads N] [--engine onednn|qnnpack]
                       [--shape 3,224,224] BATCHES (e.g. 1,8,1)
Exit 0 when every call ran, 1 at the first failure.
"""
import argparse
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("artifact")
    ap.add_argument("batches")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="onednn")
    ap.add_argument("--shape", default="3,224,224")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = a.engine
    shape = [int(s) for s in a.shape.split(",")]
    m = torch.jit.load(a.artifact).eval()
    with torch.no_grad():
        for i, b in enumerate(int(s) for s in a.batches.split(",")):
            try:
                m(torch.randn(b, *shape))
            except Exception as e:  # the model's own error, last line
                print(f"call {i} batch {b}: FAIL {str(e).strip().splitlines()[-1]}")
                return 1
    print(f"ok: batches {a.batches} at {a.threads} thread(s), engine {a.engine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
