#!/usr/bin/python3
"""Latency of an fp32 TorchScript model vs its quantized artifacts, plain PyTorch.

Usage:
  weight_only_latency.py --fp32 A.pt --quant B.pt [--quant C.pt ...]
                         --input-shape 1,1,28,28 [--iters 200] [--repeats 7]
                         [--warmup 20] [--block 10] [--threads 1] [--seed 0] [--json FILE]

Every model is loaded with torch.jit.load (CPU, eval mode) and fed the same
random input (normal, fixed seed).  After warm-up (which also lets the
TorchScript profiling executor specialize), each repeat runs --iters calls per
model, interleaved in short blocks of --block calls: fp32, quant1, quant2,
fp32, quant1, ... (block order rotated every repeat), so that drifts in
machine load hit all models alike while each model still runs a few calls in
a row with warm caches.  Every call is timed; a repeat's latency for a model
is the median of its calls, and the ratio quant/fp32 is taken within the
repeat.  Reported: the median over repeats of each model's latency and of
each ratio, plus the largest |quant - fp32| output difference and top-1
agreement on the bench input.  Use --threads 1 and a quiet machine for
numbers you quote; comparing a model with itself shows the noise floor.

Prints a markdown table; --json FILE writes the numbers as JSON.

Run it with MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=536870912
in the environment (static_ptq_bench.py does): with glibc's defaults, large
blocks go back to the OS on every free, and a float model then page-faults its
buffers on each call, more or less depending on what else ran in the process.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

# first_tensor: the output tensor the reference evaluator (scripts/eval_torch.py) reads.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from eval_torch import first_tensor  # noqa: E402


def parse_shape(text):
    try:
        shape = [int(v) for v in text.replace("x", ",").split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("bad shape '%s' (want e.g. 1,1,28,28)" % text)
    if not shape or any(v <= 0 for v in shape):
        raise argparse.ArgumentTypeError("bad shape '%s'" % text)
    return shape


def time_calls(model, x, n, sink):
    clock = time.perf_counter
    for _ in range(n):
        t0 = clock()
        model(x)
        sink.append(clock() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description="fp32 vs quantized latency in plain PyTorch.")
    ap.add_argument("--fp32", required=True, help="reference TorchScript model")
    ap.add_argument("--quant", action="append", required=True, help="quantized model (repeatable)")
    ap.add_argument("--input-shape", type=parse_shape, required=True, help="e.g. 1,1,28,28")
    ap.add_argument("--iters", type=int, default=200, help="calls per model per repeat")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=20, help="warm-up calls per model")
    ap.add_argument("--block", type=int, default=10, help="calls in a row per model when interleaving")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE", help="write results as JSON to FILE ('-' = stdout)")
    args = ap.parse_args(argv)
    if args.iters < 1 or args.repeats < 1 or args.block < 1 or args.warmup < 0:
        ap.error("--iters/--repeats/--block must be >= 1, --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x = torch.randn(*args.input_shape, generator=torch.Generator().manual_seed(args.seed))

    paths = [args.fp32] + args.quant
    names = ["fp32"] + ["quant%d" % (i + 1) if len(args.quant) > 1 else "quant" for i in range(len(args.quant))]
    models = []
    for p in paths:
        try:
            m = torch.jit.load(p, map_location="cpu")
        except Exception as e:  # noqa: BLE001
            print("weight_only_latency: cannot load %s: %s" % (p, e), file=sys.stderr)
            return 1
        m.eval()
        models.append(m)

    outputs = []
    with torch.no_grad():
        for m in models:
            for _ in range(args.warmup):
                m(x)
            outputs.append(first_tensor(m(x)).float())

        per_model = [[] for _ in models]      # median seconds per call, one per repeat
        ratios = [[] for _ in args.quant]     # quant/fp32 per repeat
        order = list(range(len(models)))
        for r in range(args.repeats):
            rot = order[r % len(order):] + order[:r % len(order)]
            calls = [[] for _ in models]
            done = 0
            while done < args.iters:
                n = min(args.block, args.iters - done)
                for i in rot:
                    time_calls(models[i], x, n, calls[i])
                done += n
            this = [statistics.median(c) for c in calls]
            for i, v in enumerate(this):
                per_model[i].append(v)
            for q in range(len(args.quant)):
                ratios[q].append(this[q + 1] / this[0])

    ref = outputs[0]
    out = sys.stderr if args.json == "-" else sys.stdout  # keep stdout pure JSON for '-'
    rows = []
    for i, p in enumerate(paths):
        med = statistics.median(per_model[i])
        row = {
            "name": names[i],
            "path": os.path.abspath(p),
            "size_bytes": os.path.getsize(p),
            "median_ms": med * 1e3,
            "min_ms": min(per_model[i]) * 1e3,
            "max_ms": max(per_model[i]) * 1e3,
            "per_repeat_ms": [v * 1e3 for v in per_model[i]],
        }
        if i > 0:
            row["ratio_vs_fp32_median"] = statistics.median(ratios[i - 1])
            row["ratio_vs_fp32_per_repeat"] = ratios[i - 1]
            got = outputs[i]
            if got.shape == ref.shape:
                row["max_abs_diff_vs_fp32"] = float((got - ref).abs().max())
                if got.dim() >= 2:
                    row["argmax_agreement_vs_fp32"] = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
            else:
                row["max_abs_diff_vs_fp32"] = None
        rows.append(row)

    print("input %s, threads %d, %d repeats x %d calls per model (interleaved in blocks of %d), warm-up %d"
          % (list(args.input_shape), args.threads, args.repeats, args.iters, args.block, args.warmup), file=out)
    print(file=out)
    print("| model | file | size (MB) | median latency (ms) | min..max (ms) | quant/fp32 (median) | max abs diff |", file=out)
    print("|---|---|---:|---:|---:|---:|---:|", file=out)
    bases = [os.path.basename(r["path"]) for r in rows]
    unique = len(set(bases)) == len(bases)
    for row in rows:
        shown = os.path.basename(row["path"]) if unique else os.path.relpath(row["path"])
        ratio = "%.3f" % row["ratio_vs_fp32_median"] if "ratio_vs_fp32_median" in row else "1 (ref)"
        diff = row.get("max_abs_diff_vs_fp32")
        diff_s = "-" if row["name"] == "fp32" else ("shape mismatch" if diff is None else "%.3g" % diff)
        print("| %s | %s | %.3f | %.4f | %.4f..%.4f | %s | %s |"
              % (row["name"], shown, row["size_bytes"] / 1e6, row["median_ms"],
                 row["min_ms"], row["max_ms"], ratio, diff_s), file=out)

    if args.json:
        result = {
            "input_shape": list(args.input_shape),
            "threads": args.threads,
            "iters": args.iters,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "block": args.block,
            "torch_version": torch.__version__,
            "models": rows,
        }
        text = json.dumps(result, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
