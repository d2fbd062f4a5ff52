#!/usr/bin/python3
"""The error-correcting algorithms' cost, as ratios to one fp32 pass over the
same calibration data (a committed benchmark, not a timed test).

For each case, on the same machine in one run:
  - fp32 pass: torch.jit.load + forward over every calibration batch, in
    plain PyTorch (median of --repeats);
  - the algorithm: `tao-quant quantize` with it, its stage time from the
    report (timings.algorithms_s for GPTQ / bias correction,
    calibration.algorithms.equalization.seconds for equalization), median of
    --repeats.
Cases: GPTQ on every layer of torchvision ResNet-18 (int4 per-channel,
weight-only), sequential (the default) and not; equalization + bias correction on torchvision MobileNetV2
(int8 per-channel, weight-only). Random weights and random images: the cost
does not depend on the values.

Usage: algorithms_bench.py [--images 64] [--repeats 3] [--threads 2] [--md FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"
CLI = os.path.join(ROOT, "build", "bin", "tao-quant")

CASES = [
    ("GPTQ, every layer, int4 per-channel", "resnet18",
     "  weight_rounding: gptq\n", "int4"),
    ("GPTQ as above, sequential: false", "resnet18",
     "  weight_rounding: {method: gptq, sequential: false}\n", "int4"),
    ("equalization + bias correction, int8 per-channel", "mobilenet_v2",
     "  equalization: true\n  bias_correction: true\n", "int8"),
]


def fp32_pass(model, npz, batch, threads):
    code = (
        "import sys, time, numpy as np, torch\n"
        f"torch.set_num_threads({threads})\n"
        f"m = torch.jit.load('{model}'); m.eval()\n"
        f"x = torch.from_numpy(np.load('{npz}')['x']).float()\n"
        "with torch.no_grad():\n"
        f"  m(x[:{batch}])\n"
        "  t = time.perf_counter()\n"
        f"  for i in range(0, x.shape[0], {batch}): m(x[i:i + {batch}])\n"
        "  print(time.perf_counter() - t)\n")
    return float(subprocess.check_output([PY, "-c", code], text=True).strip())


def quantize(model, npz, batch, extra, dtype, tmp):
    spec = os.path.join(tmp, "spec.yaml")
    with open(spec, "w") as f:
        f.write(f"results_dir: {tmp}/out\nquantize:\n  backend: libtorch\n"
                f"  mode: weight_only_ptq\n  default_layer_dtype: {dtype}\n"
                f"  model_path: {model}\n  layers:\n    - module_name: '*'\n"
                f"      weights: {{dtype: {dtype}, granularity: per_channel}}\n{extra}"
                f"dataset:\n  quant_calibration_dataset:\n    data_file: {npz}\n"
                f"    batch_size: {batch}\n")
    subprocess.check_call([CLI, "-q", "--no-html", "quantize", "-e", spec],
                          stdout=subprocess.DEVNULL)
    with open(os.path.join(tmp, "out", "quantize_report.json")) as f:
        r = json.load(f)
    stages = r.get("calibration", {}).get("algorithms", {})
    eq = stages.get("equalization", {}).get("seconds", 0.0)
    return r["timings"]["algorithms_s"] + eq, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md")
    a = ap.parse_args()
    tv = os.path.join(ROOT, "models", "tv")
    os.makedirs(tv, exist_ok=True)
    npz = os.path.join(tv, f"imagenet_rand_n{a.images}_224.npz")
    if not os.path.exists(npz):
        subprocess.check_call([PY, os.path.join(ROOT, "scripts/models/make_torchvision.py"),
                               "--npz-only", "--npz", str(a.images), "--out",
                               os.path.join(tv, "x.pt")])
    rows = []
    for title, arch, extra, dtype in CASES:
        model = os.path.join(tv, f"{arch}.pt")
        if not os.path.exists(model):
            subprocess.check_call([PY, os.path.join(ROOT, "scripts/models/make_torchvision.py"),
                                   "--arch", arch, "--out", model])
        base, alg, facts = [], [], None
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(a.repeats):  # interleaved
                base.append(fp32_pass(model, npz, a.batch, a.threads))
                t, facts = quantize(model, npz, a.batch, extra, dtype, tmp)
                alg.append(t)
        b, t = statistics.median(base), statistics.median(alg)
        peak = facts["calibration"]["algorithms"].get("weights", {}).get(
            "statistics_peak_bytes", 0)
        rows.append((title, arch, b, t, t / b, peak / 2**20))
        print(f"{arch}: fp32 pass {b:.2f} s, algorithms {t:.2f} s, ratio {t / b:.1f}x, "
              f"statistics peak {peak / 2**20:.0f} MiB", flush=True)
    lines = [f"Calibration data: {a.images} random 224x224 images, batch {a.batch}; "
             f"{a.threads} threads; medians of {a.repeats}.", "",
             "| case | model | fp32 pass (s) | algorithms (s) | ratio | statistics peak (MiB) |",
             "|---|---|---|---|---|---|"]
    for title, arch, b, t, r, peak in rows:
        lines.append(f"| {title} | {arch} | {b:.2f} | {t:.2f} | {r:.1f}x | {peak:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
