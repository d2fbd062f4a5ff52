#!/usr/bin/python3
"""ONNX Runtime's graph optimizations against the Q/DQ model as written,
and both against the TorchScript int8 artifact, per trained net.

For each Fashion-MNIST net: `tao-quant quantize`, static int8, exported as
Q/DQ ONNX (`latency_check: false`, so that every layer is int8), then the
first --images test images through the artifact (plain PyTorch) and through
ONNX Runtime at each graph optimization level (scripts/ort/run.js --level).
Prints the SQNR (dB) of each level's outputs against the graph as written
(level `disabled`: ONNX's own semantics, each Q/DQ pair in float), and of
the fully optimized run (`all`) against the artifact, with its top-1
agreement.

`basic` only rewrites the graph (Q/DQ propagation, constant folding, and
since ONNX Runtime 1.20 the quantization of a float bias between dequantized
operands): it must give the graph's own numbers (inf). Below that, the
export left ONNX Runtime a number to choose, as a float bias of
nn.MultiheadAttention's in_proj once was (docs/deploy.md). `extended` and
`all` fuse int8 kernels (QGemm, QLinearConv), whose requantization rounds
differently: 50-70 dB here.

Usage: ort_levels.py [--nets cnn,resnet,mbv2,effnet,vit_qkv,vit] [--images 2000]
                     [--cli build/bin/tao-quant]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
import static_ptq_bench as bench  # noqa: E402  (the spec)

LEVELS = ("disabled", "basic", "extended", "all")

def sqnr(ref, x):
    err = float(((ref - x) ** 2).sum())
    return float("inf") if err == 0 else 10 * np.log10(float((ref ** 2).sum()) / err)


def ort(model, images, out_dir, level):
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run(["node", os.path.join(ROOT, "scripts/ort/run.js"), model, "--input", images,
                    "--output-dir", out_dir, "--batch", "500", "--level", level],
                   check=True, capture_output=True)
    return np.load(os.path.join(out_dir, "output_0.npy"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default="cnn,resnet,mbv2,effnet,vit_qkv,vit")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/bin/tao-quant"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tq_ort_levels_")
    fm = os.path.join(ROOT, "models/fmnist")
    x = np.load(os.path.join(fm, "test.npz"))["x"].astype(np.float32)[:a.images]
    images = os.path.join(tmp, "x.npy")
    np.save(images, x)
    torch.backends.quantized.engine = "onednn"
    print("| net | " + " | ".join(f"{lv} vs as written dB" for lv in LEVELS[1:]) +
          " | all vs artifact dB | top-1 agreement % |")
    print("|---|" + "---:|" * (len(LEVELS) + 1))
    for net in a.nets.split(","):
        out = os.path.join(tmp, net)
        os.makedirs(out)
        spec = os.path.join(out, "spec.yaml")
        with open(spec, "w") as f:
            f.write(bench.spec_text(os.path.join(fm, net + ".pt"), os.path.join(fm, "calib.npz"),
                                    out, "onednn", 64, activation="int8",
                                    quantize_lines=("sensitivity: false",
                                                    "export: {formats: [onnx, onnx_qdq]}"),
                                    backend_kwargs="latency_check: false", max_batches=4))
        r = subprocess.run([a.cli, "quantize", "-e", spec], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{net}: tao-quant quantize exited {r.returncode}:\n{r.stderr}")
        art = torch.jit.load(os.path.join(out, "quantized_model_libtorch.pth"))
        with torch.no_grad():
            ref = torch.cat([art(torch.from_numpy(x[i:i + 500]))
                             for i in range(0, len(x), 500)]).numpy()
        qdq = os.path.join(out, "quantized_model_libtorch.onnx")
        runs = {lv: ort(qdq, images, os.path.join(out, lv), lv) for lv in LEVELS}
        cells = [f"{sqnr(runs['disabled'], runs[lv]):.1f}" for lv in LEVELS[1:]]
        agree = 100.0 * float((ref.argmax(1) == runs["all"].argmax(1)).mean())
        print(f"| {net} | " + " | ".join(cells) +
              f" | {sqnr(ref, runs['all']):.1f} | {agree:.2f} |")


if __name__ == "__main__":
    main()
