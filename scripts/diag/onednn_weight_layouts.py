#!/usr/bin/python3
"""Does oneDNN pick a different int8 weight layout at another batch size, on
this CPU? (issue 31: the batch-change defect's precondition)

LibTorch 1.13's onednn int8 convolutions pack a weight once and, at a call
whose batch size makes oneDNN pick another weight layout, reorder it; some
pairs of blocked layouts have no reorder, and the call fails
(docs/reliability.md#batch-size-changes, onednn_reorder_repro.py). Where
the layout is the same at every batch size, nothing is reordered, and the
defect cannot occur.

For each model: PyTorch's quantize_jit makes a static int8 model (every
layer int8, as the peer makes it), which runs at each batch size in a fresh
process with ONEDNN_VERBOSE=1 at each thread count. Every convolution,
inner product and matmul oneDNN executes is grouped by its problem with the
batch size taken out; a group whose weight layouts differ between batch
sizes is printed. Also printed: the ISA oneDNN runs with and its
implementations. (The peer's GoogLeNet model does not load, and it cannot
quantize EfficientNet-B0: both are reported and skipped.)

Usage: onednn_weight_layouts.py [--models resnet50,mobilenet_v2,...|zoo]
                                [--batches 1,8,32] [--threads 1,2]
Exit 0 when no layout depends on the batch size, 1 when one does.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import static_ptq_bench as bench  # noqa: E402  (models, quantize_jit)

RUN = r"""
import sys, torch
art, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.backends.quantized.engine = "onednn"
m = torch.jit.load(art).eval()
with torch.no_grad():
    m(torch.rand(batch, 3, 224, 224))
"""

# onednn_verbose,exec,cpu,convolution,IMPL,PROP,MDS,ATTRS,AUX,PROBLEM,TIME
EXEC = re.compile(r"^onednn_verbose,exec,cpu,(convolution|inner_product|matmul),([^,]*),[^,]*,"
                  r"([^,]*),([^,]*),([^,]*),([^,]*),")


def weight_md(mds):
    return next((m for m in mds.split() if m.startswith("wei_")), "?")


def without_batch(problem):
    return re.sub(r"^mb\d+", "mb*", problem)


def layouts(art, batch, threads):
    env = dict(os.environ, ONEDNN_VERBOSE="1", OMP_NUM_THREADS=str(threads))
    out = subprocess.run([bench.PY, "-c", RUN, art, str(batch), str(threads)], env=env,
                         capture_output=True, text=True, check=True).stdout
    isa = next((line.split(":", 1)[1] for line in out.splitlines()
                if ",info,cpu,isa:" in line), "?")
    seen = []
    for line in out.splitlines():
        m = EXEC.match(line)
        if m:
            kind, impl, mds, _, _, problem = m.groups()
            seen.append((kind, without_batch(problem), impl, weight_md(mds)))
    return isa, seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,mobilenet_v2,squeezenet1_1,mnasnet1_0")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    names = [n for p in a.models.split(",") for n in (bench.ZOO if p == "zoo" else (p,))]
    tmp = tempfile.mkdtemp(prefix="tq_layouts_")
    differ = 0
    for name in names:
        model, calib, _, _ = bench.MODELS[name]
        art = os.path.join(tmp, name + ".pt")
        try:
            subprocess.run([bench.PY, "-c", bench.QUANTIZE_JIT, os.path.join(bench.ROOT, model),
                            os.path.join(bench.ROOT, calib), art, "onednn", "2", "8"],
                           check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            print(f"{name}: quantize_jit fails: {e.stderr.strip().splitlines()[-1]}")
            continue
        by_problem = collections.defaultdict(set)
        impls = collections.Counter()
        try:
            runs = [(t, layouts(art, b, t)) for t in map(int, a.threads.split(","))
                    for b in map(int, a.batches.split(","))]
        except subprocess.CalledProcessError as e:
            lines = e.stderr.strip().splitlines()
            why = next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else "")
            print(f"{name}: the int8 model does not run: {why.strip()}")
            continue
        isa = runs[0][1][0]
        for t, (_, seen) in runs:
            for kind, problem, impl, wei in seen:
                by_problem[(kind, problem, t)].add(wei)
                impls[impl] += 1
        bad = {k: v for k, v in by_problem.items() if len(v) > 1}
        differ += len(bad)
        print(f"{name}: ISA {isa}; {len(by_problem)} problems x thread counts; implementations "
              + ", ".join(f"{i} ({n})" for i, n in sorted(impls.items()))
              + f"; weight layout differs between batch sizes: {len(bad)}")
        for (kind, problem, t), weis in sorted(bad.items()):
            print(f"  {kind} {problem} at {t} threads: {' / '.join(sorted(weis))}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
