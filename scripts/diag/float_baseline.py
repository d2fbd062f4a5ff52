#!/usr/bin/python3
"""How much of an int8 artifact's speed-up is not int8's: the float model as
loaded against the same model frozen (torch.jit.freeze: BatchNorm folded
into the convolutions, attributes made constants, methods inlined).

The never-slower check and `evaluate --compare` time an artifact against the
float model as the user gave it. An artifact is always frozen (LibTorch's
Finalize, as quantize_jit's is) and its BatchNorms are folded, so its float
layers run faster than the given model's by this much before any layer is
int8. With --artifact, a published artifact is timed beside both, and its
int8 ops alone are counted: quantized ops other than a layer that float
values enter and leave (each input straight from quantize_per_tensor, each
use of the output a dequantize), which tao-quant no longer makes
(docs/spec.md, "Float layers, float modules").

Each model and batch size: 3 warm-up calls each, then --rounds interleaved
rounds of one call each (the order alternating), medians; one process,
--threads intra-op threads (OPENBLAS_NUM_THREADS=1, as the launcher sets).

Usage: float_baseline.py [--models zoo|resnet18,mobilenet_v2,...] [--batches 1,8]
                         [--rounds 7] [--threads 2] [--artifact model=path ...]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import static_ptq_bench as bench  # noqa: E402  (models, zoo, input shapes)
import torch  # noqa: E402

# GoogLeNet's scripted model warns at every call that it returns a tuple.
warnings.filterwarnings("ignore", category=UserWarning)


def medians(models, x, rounds):
    times = {k: [] for k in models}
    with torch.no_grad():
        for m in models.values():
            for _ in range(3):
                m(x)
        for r in range(rounds):
            order = list(models.items())
            for k, m in order if r % 2 == 0 else reversed(order):
                t = time.perf_counter()
                m(x)
                times[k].append((time.perf_counter() - t) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def int8_alone(m):
    """Quantized non-layer ops of m's graph that float values enter and leave."""
    n = 0
    for node in m.inlined_graph.nodes():
        k = node.kind()
        if not k.startswith("quantized::") or k.startswith(("quantized::conv", "quantized::linear")):
            continue
        ins = [v for v in node.inputs() if v.type().kind() == "TensorType"]
        n += (all(v.node().kind() == "aten::quantize_per_tensor" for v in ins) and
              all(u.user.kind() == "aten::dequantize" for o in node.outputs() for u in o.uses()))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="zoo")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="onednn")
    ap.add_argument("--artifact", action="append", default=[], metavar="MODEL=PATH")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = a.engine
    artifacts = dict(s.split("=", 1) for s in a.artifact)
    names = [n for part in a.models.split(",") for n in (bench.ZOO if part == "zoo" else (part,))]
    print("| model | batch | as loaded ms | frozen ms | frozen / as loaded | artifact ms "
          "| int8 ops alone |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        path, _, _, shape = bench.MODELS[name]
        models = {"loaded": torch.jit.load(path).eval()}
        models["frozen"] = torch.jit.freeze(torch.jit.load(path).eval())
        if name in artifacts:
            models["artifact"] = torch.jit.load(artifacts[name]).eval()
        dims = [int(s) for s in shape.split(",")][1:]
        for bs in (int(b) for b in a.batches.split(",")):
            t = medians(models, torch.randn(bs, *dims), a.rounds)
            art, alone = "-", "-"
            if "artifact" in t:
                art, alone = "%.2f" % t["artifact"], int8_alone(models["artifact"])
            print("| %s | %d | %.2f | %.2f | %.3f | %s | %s |" %
                  (name, bs, t["loaded"], t["frozen"], t["frozen"] / t["loaded"], art, alone),
                  flush=True)
    print("\n%d threads, engine %s, medians of %d interleaved rounds" %
          (a.threads, a.engine, a.rounds))


if __name__ == "__main__":
    main()
