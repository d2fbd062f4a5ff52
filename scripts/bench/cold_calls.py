#!/usr/bin/python3
"""The cold call at a new batch size, against the calls after it.

The never-slower check lets a clean cold pair decide a clear difference
where the float call takes 1 s or more and both models already ran at
another batch size (backends/libtorch/latency.h, kColdCallMs). This prints
the evidence: for each model, the float model and its int8 artifact in plain
PyTorch, three calls each at the small batch (the models' plans compiled
there), then --calls calls each at the large batch, interleaved, each call's
wall time in seconds. The first large-batch call is the cold one.

Usage: cold_calls.py MODEL.pt ARTIFACT.pth [MODEL.pt ARTIFACT.pth ...]
                     [--shape 3,224,224] [--small 1] [--large 32] [--calls 4]
                     [--threads 2] [--engine onednn]
Artifacts: e.g. `tao-quant quantize` of models/tv/<arch>.pt with the
imagenet_rand_n8_224.npz calibration data (scripts/bench/quantize_time.py's
spec).
"""

import argparse
import time

import torch


def call_s(model, x):
    t0 = time.perf_counter()
    model(x)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="MODEL.pt ARTIFACT.pth, repeated")
    ap.add_argument("--shape", default="3,224,224")
    ap.add_argument("--small", type=int, default=1)
    ap.add_argument("--large", type=int, default=32)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="onednn")
    a = ap.parse_args()
    if len(a.pairs) % 2:
        ap.error("give a float model and its int8 artifact for each model")
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = a.engine
    shape = [int(s) for s in a.shape.split(",")]
    torch.manual_seed(0)
    small, large = torch.randn([a.small] + shape), torch.randn([a.large] + shape)
    for fp, qp in zip(a.pairs[::2], a.pairs[1::2]):
        f, q = torch.jit.load(fp).eval(), torch.jit.load(qp).eval()
        with torch.no_grad():
            for _ in range(3):
                f(small)
                q(small)
            fs, qs = [], []
            for _ in range(a.calls):
                fs.append(call_s(f, large))
                qs.append(call_s(q, large))
        print(f"{fp}: batch {a.large} after {a.small}, cold call first")
        print("  fp32: " + " ".join(f"{s:.3f}" for s in fs))
        print("  int8: " + " ".join(f"{s:.3f}" for s in qs))
        print(f"  cold fp32 - fastest later fp32: {fs[0] - min(fs[1:]):+.3f} s")


if __name__ == "__main__":
    main()
