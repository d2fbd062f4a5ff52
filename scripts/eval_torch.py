#!/usr/bin/python3
"""Top-1 of a TorchScript artifact in PLAIN PyTorch (no tao-quant code).

Usage: eval_torch.py MODEL.pt DATA.npz [--batch 500] [--limit N] [--threads 2]
                     [--latency 1,32] [--json] [--json-out FILE]

MODEL is loaded with torch.jit.load on the CPU and run in eval mode under
torch.no_grad(); DATA is an .npz with x (float32 [N,...], already normalized)
and y (int64 [N]).  This is the reference that tao-quant's artifacts
(quantized_model_<backend>.pth) are checked against.

Output: a human line "top1 0.9044 (9044/10000) ..." on stdout; with --json a
single JSON object {"model", "data", "top1", "correct", "num_samples",
"seconds"} on stdout instead; --json-out FILE writes that object to FILE too.
--latency B1,B2 adds "latency_ms": {"B1": median ms of one forward pass at
batch B1, ...} (after warm-up; at least 10 runs or 1 s per batch size).
A quantized artifact's engine (extra/tao_quant_meta.json: engine/qengine) is
selected with torch.backends.quantized.engine before it is loaded.
If the model returns a tuple/list/dict, its first tensor is the logits.
Exit status: 0 on success, 1 on a load/run error.
"""

import argparse
import json
import os
import sys
import time
import zipfile

import numpy as np
import torch


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and len(out) > 0:
        return first_tensor(out[0])
    if isinstance(out, dict) and out:
        return first_tensor(next(iter(out.values())))
    raise TypeError("model output has no tensor (%s)" % type(out).__name__)


def evaluate(model, x, y, batch):
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            xb = torch.from_numpy(np.ascontiguousarray(x[i:i + batch]))
            logits = first_tensor(model(xb))
            if logits.dim() != 2 or logits.shape[0] != xb.shape[0]:
                raise RuntimeError("expected logits [%d, C], got %s" % (xb.shape[0], list(logits.shape)))
            pred = logits.argmax(dim=1).numpy()
            correct += int((pred == y[i:i + batch]).sum())
    return correct


def artifact_engine(path):
    """The quantized engine a tao-quant artifact was made for, or None."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n.endswith("extra/tao_quant_meta.json")), None)
            meta = json.loads(z.read(name)) if name else {}
    except (OSError, zipfile.BadZipFile, ValueError):
        return None
    for block in (meta.get("backend_meta"), (meta.get("backend") or {}).get("meta")):
        for k in ("engine", "qengine"):
            if isinstance(block, dict) and isinstance(block.get(k), str):
                return "onednn" if block[k] == "mkldnn" else block[k]
    return None


def latency_ms(model, x, batch):
    """Median wall time (ms) of one forward pass at `batch`."""
    reps = int(np.ceil(batch / x.shape[0]))
    xb = torch.from_numpy(np.ascontiguousarray(np.concatenate([x] * reps)[:batch]))
    times = []
    with torch.no_grad():
        for _ in range(3):
            model(xb)
        start = time.perf_counter()
        while len(times) < 10 or (time.perf_counter() - start < 1.0 and len(times) < 200):
            t0 = time.perf_counter()
            model(xb)
            times.append(time.perf_counter() - t0)
    return round(1000.0 * float(np.median(times)), 4)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Top-1 of a TorchScript model in plain PyTorch.")
    ap.add_argument("model", help="TorchScript file (.pt/.pth)")
    ap.add_argument("data", help=".npz with x (float32) and y (int64)")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--limit", type=int, default=0, help="evaluate only the first N samples")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--latency", default="", help="batch sizes to time, e.g. 1,32")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON object to FILE")
    args = ap.parse_args(argv)

    torch.set_num_threads(max(1, args.threads))
    try:
        with np.load(args.data) as d:
            x = d["x"]
            y = d["y"].astype(np.int64)
    except (OSError, KeyError, ValueError) as e:
        print("eval_torch: cannot read %s: %s" % (args.data, e), file=sys.stderr)
        return 1
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    if args.limit > 0:
        x, y = x[:args.limit], y[:args.limit]
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        print("eval_torch: %s: %d inputs, %d labels" % (args.data, x.shape[0], y.shape[0]), file=sys.stderr)
        return 1

    try:
        engine = artifact_engine(args.model)
        if engine and engine in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = engine
        model = torch.jit.load(args.model, map_location="cpu")
        model.eval()
        t0 = time.perf_counter()
        correct = evaluate(model, x, y, max(1, args.batch))
        seconds = time.perf_counter() - t0
        latency = {b: latency_ms(model, x, int(b)) for b in args.latency.split(",") if b.strip()}
    except Exception as e:  # noqa: BLE001 -- report any load/run failure cleanly
        print("eval_torch: %s: %s: %s" % (args.model, type(e).__name__, e), file=sys.stderr)
        return 1

    n = int(x.shape[0])
    result = {
        "model": os.path.abspath(args.model),
        "data": os.path.abspath(args.data),
        "top1": correct / n,
        "correct": correct,
        "num_samples": n,
        "seconds": round(seconds, 3),
        "model_size_bytes": os.path.getsize(args.model),
    }
    if latency:
        result["latency_ms"] = latency
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result))
    else:
        print("top1 %.4f (%d/%d) %s [%.1fs]" % (result["top1"], correct, n, args.model, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
