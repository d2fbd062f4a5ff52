#!/usr/bin/env python3
"""ONNX Runtime int8 (the Q/DQ export) against ONNX Runtime fp32 (the float
export) and against the TorchScript int8 artifact, at batch 1 and 32, on the
Fashion-MNIST CNN, torchvision ResNet-18 and MobileNetV2 (random weights).

Each model is quantized static int8 by tao-quant with quantize.export
(onnx, onnx_qdq) and backend_kwargs.latency_check: false, so that every
layer is int8 in every form. Latency: the median over interleaved rounds
(each round times every form once: ORT through scripts/ort/run.js --time,
TorchScript in this process), on the same threads. Prints a markdown table
of milliseconds and ratios. Not a test: run it on an idle machine.

Usage: scripts/bench/onnx_bench.py [--rounds 5] [--iters 20] [--threads 2] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TQ = os.path.join(ROOT, "build", "bin", "tao-quant")
RUN_JS = os.path.join(ROOT, "scripts", "ort", "run.js")
MODELS = [
    ("cnn", "models/fmnist/cnn.pt", "models/fmnist/calib.npz", (1, 28, 28)),
    ("resnet18", "models/tv/resnet18.pt", "models/tv/imagenet_rand_n8_224.npz", (3, 224, 224)),
    ("mobilenet_v2", "models/tv/mobilenet_v2.pt", "models/tv/imagenet_rand_n8_224.npz",
     (3, 224, 224)),
]


def quantize(name, model, data, out):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    spec = os.path.join(d, "spec.yaml")
    with open(spec, "w") as f:
        f.write(f"""results_dir: {d}
quantize:
  backend: libtorch
  mode: static_ptq
  default_layer_dtype: int8
  default_activation_dtype: int8
  model_path: {os.path.join(ROOT, model)}
  sensitivity: false
  backend_kwargs: {{latency_check: false}}
  export: {{formats: [onnx, onnx_qdq]}}
dataset:
  quant_calibration_dataset: {{data_file: {os.path.join(ROOT, data)}, batch_size: 8, max_batches: 2}}
""")
    subprocess.run([TQ, "-q", "quantize", "--no-html", "-e", spec], check=True)
    return d


def ort_ms(model, x_path, batch, iters, threads):
    r = subprocess.run(["node", RUN_JS, model, "--input", x_path, "--batch", str(batch),
                        "--time", str(iters), "--threads", str(threads)],
                       check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["ms"]


def torch_ms(module, x, iters):
    with torch.no_grad():
        for _ in range(3):
            module(x)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            module(x)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "onnx_bench"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    for name, model, data, shape in MODELS:
        d = quantize(name, model, data, a.out)
        fp32 = torch.jit.load(os.path.join(ROOT, model)).eval()
        for batch in (1, 32):
            # A fresh load per batch size: LibTorch 1.13's onednn int8 convs
            # fail a batch-size change on MobileNetV2 (docs/reliability.md).
            int8 = torch.jit.load(os.path.join(d, "quantized_model_libtorch.pth")).eval()
            x = torch.randn(batch, *shape)
            xp = os.path.join(d, f"x{batch}.npy")
            np.save(xp, x.numpy())
            forms = {
                "ort_fp32": lambda: ort_ms(os.path.join(d, "model_float.onnx"), xp, batch,
                                           a.iters, a.threads),
                "ort_int8": lambda: ort_ms(os.path.join(d, "quantized_model_libtorch.onnx"), xp,
                                           batch, a.iters, a.threads),
                "ts_fp32": lambda: torch_ms(fp32, x, a.iters),
                "ts_int8": lambda: torch_ms(int8, x, a.iters),
            }
            seen = {k: [] for k in forms}
            for _ in range(a.rounds):
                for k, f in forms.items():
                    seen[k].append(f())
            m = {k: statistics.median(v) for k, v in seen.items()}
            rows.append((name, batch, m))
            print(f"{name} bs{batch}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in m.items()),
                  file=sys.stderr)
    print("| model | batch | ORT fp32 ms | ORT int8 ms | ORT int8/fp32 speed-up | "
          "TorchScript int8 ms | ORT int8 vs TorchScript int8 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, batch, m in rows:
        print(f"| {name} | {batch} | {m['ort_fp32']:.2f} | {m['ort_int8']:.2f} | "
              f"{m['ort_fp32'] / m['ort_int8']:.2f}x | {m['ts_int8']:.2f} | "
              f"{m['ts_int8'] / m['ort_int8']:.2f}x |")


if __name__ == "__main__":
    main()
