#!/usr/bin/python3
"""Quantize wall time: tao-quant against PyTorch's quantize_jit, per model.

For each model, on the same calibration data, engine and thread count:
`tao-quant quantize` (defaults: never-slower check, batch-change probe,
automatic sensitivity table, quantization record) and a Python process
running torch.jit.load + quantize_jit + save, alternately, --repeats times.
Prints the median wall times, their ratio (tao-quant / quantize_jit), and
where tao-quant's time went in its median run (the report's `timings` and
`backend.meta.steps`; "start" is the process's wall time outside `total_s`:
LibTorch's own start-up and the exit).

Usage: quantize_time.py [--models cnn,resnet50,...|zoo] [--repeats 3] [--threads 2]
                        [--md FILE] [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import static_ptq_bench as bench  # noqa: E402  (models, quantize_jit, spec, timer)

# The CNN case: the Fashion-MNIST CNN, 16 calibration batches of 32.
bench.MODELS.setdefault("cnn", ("models/fmnist/cnn.pt", "models/fmnist/calib.npz",
                                "models/fmnist/test.npz", "1,1,28,28"))
CALIB_BATCH = {"cnn": 32, "cnn_bn": 32, "resnet": 32, "mlp": 32, "vit": 32}

STEPS = (("calibration", ("BatchNorm folding", "branch specialization", "insert observers",
                          "calibration batches", "first batch")),
         ("batch-change probe", ("batch-change probe",)),
         ("never-slower", ("latency check",)),
         ("convert", ("convert",)),
         ("fidelity + SQNR", ("fidelity pass", "layer SQNR")))


def spec_for(name, out_dir, engine):
    model, calib, test, _ = bench.MODELS[name]
    text = bench.spec_text(model, calib, out_dir, engine, CALIB_BATCH.get(name, 8))
    if test:  # the sensitivity table's evaluation data, as a user's spec has it
        text += f"  test_dataset:\n    data_file: {test}\n    batch_size: 32\n"
    path = os.path.join(out_dir, "spec.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def breakdown(report, wall):
    t = report["timings"]
    steps = {s["step"]: s["seconds"] for s in report["backend"]["meta"].get("steps", [])}
    row = {"load": t.get("load_s", 0)}
    for label, names in STEPS:
        row[label] = sum(steps.get(n, 0) for n in names)
    row["save + checks"] = t.get("save_s", 0)
    row["record/export"] = t.get("export_s", 0)
    row["sensitivity"] = t.get("sensitivity_s", 0)
    row["other"] = max(0.0, t.get("total_s", 0) - sum(row.values()))
    row["start"] = max(0.0, wall - t.get("total_s", 0))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn,resnet18,resnet50,mobilenet_v2,squeezenet1_1,mnasnet1_0")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="onednn")
    ap.add_argument("--cli", default=os.path.join(bench.ROOT, "build/bin/tao-quant"))
    ap.add_argument("--md")
    ap.add_argument("--json")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), TQ_NUM_THREADS=str(a.threads))
    tmp = tempfile.mkdtemp(prefix="tq_qtime_")
    names = [n for part in a.models.split(",") for n in (bench.ZOO if part == "zoo" else (part,))]
    rows, results = [], {}
    for name in names:
        model, calib, _, _ = bench.MODELS[name]
        if not os.path.exists(os.path.join(bench.ROOT, model)):
            print(f"skip {name}: {model} missing", file=sys.stderr)
            continue
        out_dir = os.path.join(tmp, name)
        os.makedirs(out_dir, exist_ok=True)
        spec = spec_for(name, out_dir, a.engine)
        jit_cmd = [bench.PY, "-c", bench.QUANTIZE_JIT, model, calib, os.path.join(out_dir, "jit.pt"),
                   a.engine, str(a.threads), str(CALIB_BATCH.get(name, 8))]
        tq, pt, parts = [], [], []
        jit_error = None
        for _ in range(a.repeats):  # interleaved
            wall = bench.timed([a.cli, "-q", "quantize", "-e", spec], env)
            with open(os.path.join(out_dir, "quantize_report.json")) as f:
                parts.append((wall, breakdown(json.load(f), wall)))
            tq.append(wall)
            if jit_error is None:
                try:
                    pt.append(bench.timed(jit_cmd, env))
                except RuntimeError as e:
                    jit_error = str(e).strip().splitlines()[-1]
        t_tq = statistics.median(tq)
        t_pt = statistics.median(pt) if pt else None
        median_parts = sorted(parts, key=lambda p: p[0])[len(parts) // 2][1]
        results[name] = {"tao_quant_s": t_tq, "quantize_jit_s": t_pt, "runs": tq, "peer_runs": pt,
                         "ratio": t_tq / t_pt if t_pt else None, "breakdown_s": median_parts,
                         "quantize_jit_error": jit_error}
        rows.append([name, "%.2f" % t_tq, "%.2f" % t_pt if t_pt else "fails",
                     "%.2f" % (t_tq / t_pt) if t_pt else "-"] +
                    ["%.2f" % v for v in median_parts.values()])
        print(" | ".join(rows[-1]), file=sys.stderr)
    head = ["model", "tao-quant s", "quantize_jit s", "ratio"] + (
        list(next(iter(results.values()))["breakdown_s"]) if results else [])
    md = bench.md_table(head, rows)
    md += (f"\n{a.threads} threads, engine {a.engine}, medians of {a.repeats} interleaved runs; "
           "ratio = tao-quant / quantize_jit wall time; the breakdown (s) is tao-quant's median run.\n")
    bench.write_outputs(md, results, a.md, a.json)


if __name__ == "__main__":
    main()
