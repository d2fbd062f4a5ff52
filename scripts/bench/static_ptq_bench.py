#!/usr/bin/python3
"""Static int8 PTQ: tao-quant vs PyTorch's quantize_jit, side by side.

For each model, on the same calibration data and the same qengine:
  - quantize wall time, process start to artifact on disk: `tao-quant quantize`
    vs a Python process running torch.jit.load + quantize_jit + save
    (median of --repeats runs, interleaved);
  - top-1 on Fashion-MNIST test data (fmnist models) of fp32, tao-quant int8
    and quantize_jit int8, evaluated in plain PyTorch (scripts/eval_torch.py);
  - fp32 vs int8 latency at batch 1 and 32 (scripts/bench/weight_only_latency.py,
    interleaved medians).
Writes a markdown table (stdout, and --md FILE) and --json FILE.

Usage: static_ptq_bench.py [--models cnn_bn,resnet,mlp,vit,resnet18] [--repeats 3]
                           [--threads 1] [--engine onednn] [--md docs/benchmarks_static.md]
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

MODELS = {
    # name: (model path, calib npz, test npz or None, input shape)
    "cnn_bn": ("models/fmnist/cnn_bn.pt", "models/fmnist/calib.npz", "models/fmnist/test.npz", "1,1,28,28"),
    "resnet": ("models/fmnist/resnet.pt", "models/fmnist/calib.npz", "models/fmnist/test.npz", "1,1,28,28"),
    "mlp": ("models/fmnist/mlp.pt", "models/fmnist/calib.npz", "models/fmnist/test.npz", "1,1,28,28"),
    "vit": ("models/fmnist/vit.pt", "models/fmnist/calib.npz", "models/fmnist/test.npz", "1,1,28,28"),
    "resnet18": ("models/tv/resnet18.pt", "models/tv/imagenet_rand_n8_224.npz", None, "1,3,224,224"),
    "mobilenet_v2": ("models/tv/mobilenet_v2.pt", "models/tv/imagenet_rand_n8_224.npz", None, "1,3,224,224"),
}

# The torchvision zoo (scripts/zoo/build.sh tv: random weights, 224x224):
# --models zoo runs every static one of them.
ZOO = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "shufflenet_v2_x1_0",
       "squeezenet1_1", "efficientnet_b0", "regnet_x_400mf", "densenet121", "googlenet",
       "mnasnet1_0", "vit_b_16")
for _arch in ZOO:
    MODELS.setdefault(_arch, ("models/tv/%s.pt" % _arch, "models/tv/imagenet_rand_n8_224.npz", None,
                              "1,3,224,224"))

BATCHES = (1, 8, 32)

QUANTIZE_JIT = r"""
import sys, numpy as np, torch
from torch.ao.quantization import get_default_qconfig, quantize_jit
model_path, calib, out, engine, threads, batch = sys.argv[1:7]
torch.set_num_threads(int(threads))
torch.backends.quantized.engine = engine
m = torch.jit.load(model_path).eval()
x = torch.from_numpy(np.load(calib)["x"]).float()
bs = int(batch)
def calibrate(model, data):
    with torch.no_grad():
        for i in range(0, x.shape[0], bs):
            model(x[i:i + bs])
q = quantize_jit(m, {"": get_default_qconfig(engine)}, calibrate, [x], inplace=False)
q.save(out)
"""


def spec_text(model, calib, out_dir, engine, batch, activation="uint8", quantize_lines=(),
              backend_kwargs="", max_batches=None):
    """A static int8 spec; `quantize_lines`: more `quantize:` keys ("sensitivity: false"),
    `backend_kwargs`: more of them ("latency_check: false"), `max_batches`: a cap on calibration."""
    kwargs = ", ".join(["engine: " + engine] + ([backend_kwargs] if backend_kwargs else []))
    extra = "".join(f"  {line}\n" for line in quantize_lines)
    cap = f"    max_batches: {max_batches}\n" if max_batches else ""
    return f"""results_dir: {out_dir}
quantize:
  backend: libtorch
  mode: static_ptq
  default_layer_dtype: int8
  default_activation_dtype: {activation}
  model_path: {model}
{extra}  backend_kwargs: {{{kwargs}}}
dataset:
  quant_calibration_dataset:
    data_file: {calib}
    batch_size: {batch}
{cap}"""


def timed(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))
    return dt


def top1(model, data, env):
    r = subprocess.run([PY, "scripts/eval_torch.py", model, data, "--json"], cwd=ROOT, env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["top1"]


def latency(fp32, quants, shape, env, threads, iters=50, repeats=5):
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    subprocess.run([PY, "scripts/bench/weight_only_latency.py", "--fp32", fp32] +
                   sum([["--quant", q] for q in quants], []) +
                   ["--input-shape", shape, "--threads", str(threads), "--iters", str(iters), "--repeats", str(repeats),
                    "--warmup", "3", "--block", str(min(10, iters)),
                    "--json", path], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="cnn_bn,resnet,mlp,vit,resnet18,mobilenet_v2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engine", default="onednn")
    ap.add_argument("--batch", type=int, default=64, help="calibration batch size")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/bin/tao-quant"))
    ap.add_argument("--iters", type=int, default=50, help="latency calls per model and repeat")
    ap.add_argument("--lat-repeats", type=int, default=5, help="latency repeats")
    ap.add_argument("--batches", default="1,8,32", help="latency batch sizes")
    ap.add_argument("--jit-hugepages", action="store_true",
                    help="also time quantize_jit with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, the heap "
                         "setting the tao-quant launcher uses with TQ_HUGEPAGES=1")
    ap.add_argument("--md")
    ap.add_argument("--json")
    a = ap.parse_args()
    global BATCHES
    BATCHES = tuple(int(b) for b in a.batches.split(","))
    # The same allocator settings for every process compared: by default glibc
    # returns large blocks to the OS on each free, and the float models then
    # page-fault their buffers on every call (3-4x slower at batch 32).
    # OpenBLAS's own threads beside LibTorch's OpenMP ones oversubscribe the
    # cores in plain PyTorch (speed_table.py): one BLAS thread.
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), TQ_NUM_THREADS=str(a.threads),
               OPENBLAS_NUM_THREADS="1",
               MALLOC_MMAP_THRESHOLD_=str(256 << 20), MALLOC_TRIM_THRESHOLD_=str(512 << 20))
    rows, results = [], {}
    tmp = tempfile.mkdtemp(prefix="tq_bench_")
    names = [n for part in a.models.split(",") for n in (ZOO if part == "zoo" else (part,))]
    for name in names:
        model, calib, test, shape = MODELS[name]
        if not os.path.exists(os.path.join(ROOT, model)):
            print(f"skip {name}: {model} missing (scripts/models/make_test_models.sh models extra)", file=sys.stderr)
            continue
        out_dir = os.path.join(tmp, name)
        os.makedirs(out_dir, exist_ok=True)
        spec = os.path.join(out_dir, "spec.yaml")
        with open(spec, "w") as f:
            f.write(spec_text(model, calib, out_dir, a.engine, a.batch))
        tq_art = os.path.join(out_dir, "quantized_model_libtorch.pth")
        pt_art = os.path.join(out_dir, "quantize_jit.pt")
        t_tq, t_pt, t_pt_hp = [], [], []
        env_hp = dict(env, GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
        jit_error = None
        for _ in range(a.repeats):  # interleaved
            t_tq.append(timed([a.cli, "-q", "quantize", "-e", spec], env))
            if jit_error is None:
                try:
                    jit_cmd = [PY, "-c", QUANTIZE_JIT, model, calib, pt_art, a.engine, str(a.threads),
                               str(a.batch)]
                    t_pt.append(timed(jit_cmd, env))
                    if a.jit_hugepages:
                        t_pt_hp.append(timed(jit_cmd, env_hp))
                except RuntimeError as e:  # e.g. branching graphs: quantize_jit cannot observe them
                    lines = [ln for ln in str(e).splitlines() if ln.strip()]
                    jit_error = next((ln.strip() for ln in lines if "RuntimeError" in ln or "Error" in ln),
                                     lines[-1] if lines else "failed")
        r = {"quantize_s": {"tao_quant": statistics.median(t_tq),
                            "quantize_jit": statistics.median(t_pt) if t_pt else None}}
        r["quantize_s"]["ratio"] = (r["quantize_s"]["tao_quant"] / r["quantize_s"]["quantize_jit"]
                                    if t_pt else None)
        if t_pt_hp:
            r["quantize_s"]["quantize_jit_hugepages"] = statistics.median(t_pt_hp)
            r["quantize_s"]["ratio_hugepages"] = r["quantize_s"]["tao_quant"] / statistics.median(t_pt_hp)
        if jit_error:
            r["quantize_jit_error"] = jit_error
        quants = [tq_art] + ([pt_art] if not jit_error else [])
        if test:
            r["top1"] = {"fp32": top1(model, test, env), "tao_quant": top1(tq_art, test, env),
                         "quantize_jit": top1(pt_art, test, env) if not jit_error else None}
        for bs in BATCHES:
            bshape = ",".join([str(bs)] + shape.split(",")[1:])
            lat = latency(model, quants, bshape, env, a.threads, a.iters, a.lat_repeats)
            r[f"latency_bs{bs}"] = lat
        results[name] = r
        t1 = r.get("top1", {})

        def ratio(bs, i):
            lat = r[f"latency_bs{bs}"]
            try:
                return "%.2fx" % (1.0 / lat["models"][i + 1]["ratio_vs_fp32_median"])
            except (KeyError, IndexError, TypeError):
                return "fails" if jit_error and i == 1 else "?"

        def pct(v):
            return "%.2f" % (100 * v) if v is not None else ("fails" if jit_error else "-")
        qs = r["quantize_s"]
        rows.append([name, "%.2f" % qs["tao_quant"],
                     "%.2f" % qs["quantize_jit"] if qs["quantize_jit"] else "fails",
                     "%.2f" % qs["ratio"] if qs["ratio"] else "-"] +
                    (["%.2f" % qs["quantize_jit_hugepages"] if "quantize_jit_hugepages" in qs else "fails",
                      "%.2f" % qs["ratio_hugepages"] if "ratio_hugepages" in qs else "-"]
                     if a.jit_hugepages else []) + [
                     pct(t1.get("fp32")) if t1 else "-", pct(t1.get("tao_quant")) if t1 else "-",
                     pct(t1.get("quantize_jit")) if t1 else "-"] +
                    [ratio(bs, 0) for bs in BATCHES] + [ratio(bs, 1) for bs in BATCHES])
        print(" | ".join(rows[-1]), file=sys.stderr)
    head = (["model", "tao-quant s", "quantize_jit s", "time ratio"] +
            (["quantize_jit s, huge pages", "time ratio, huge pages"] if a.jit_hugepages else []) +
            ["fp32 top-1", "tao int8 top-1", "jit int8 top-1"] + ["tao speedup bs%d" % b for b in BATCHES] +
            ["jit speedup bs%d" % b for b in BATCHES])
    md = md_table(head, rows)
    md += (f"\nthreads {a.threads}, engine {a.engine}, medians of {a.repeats} interleaved runs; "
           "speedup = fp32/int8 latency.\n")
    for name, r in results.items():
        if r.get("quantize_jit_error"):
            md += f"\nquantize_jit on {name} fails: `{r['quantize_jit_error']}`\n"
    write_outputs(md, results, a.md, a.json)


def md_table(head, rows):
    """A markdown table: a header row and one row per list of cells."""
    md = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n"
    return md + "".join("| " + " | ".join(r) + " |\n" for r in rows)


def write_outputs(md, results, md_path, json_path):
    """Prints the markdown; writes it and the results' JSON where asked."""
    print(md)
    if md_path:
        with open(md_path, "w") as f:
            f.write(md)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
