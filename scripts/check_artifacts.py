#!/usr/bin/python3
"""Loads tao-quant artifacts in Python's torch.jit.load and runs one batch.

Usage: check_artifacts.py [--data NPZ] [--batch N] DIR [DIR...]

Every quantize_report.json under the DIRs names a float model and its
artifact (paths as the report has them, relative to the current directory).
Both are loaded with torch.jit.load and run on one batch; the artifact must
return what the float model returns: the same Python type (NamedTuple class
and field names, dict keys, tuple and list nesting, None where None) and
tensors of the same dtype and shape.

The batch is the first N samples (default 2) of --data, else of the spec's
calibration or test data_file, else of the first .npz beside the float model.

One line per artifact; exit 0 when all match, 1 when one does not (or does
not load or run), 2 when there is nothing to check.
"""

import argparse
import glob
import json
import os
import sys

import numpy as np
import torch


def structure(v):
    """A comparable description of a forward's output."""
    if isinstance(v, torch.Tensor):
        return ("Tensor", str(v.dtype), tuple(v.shape))
    if v is None:
        return ("None",)
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return ("NamedTuple", type(v).__name__, tuple(v._fields), tuple(structure(e) for e in v))
    if isinstance(v, (tuple, list)):
        return (type(v).__name__, tuple(structure(e) for e in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, structure(v[k])) for k in sorted(v)))
    return (type(v).__name__,)


def describe(s):
    """`Heads(logits: Tensor float32 [2, 10], ...)` for a structure."""
    kind = s[0]
    if kind == "Tensor":
        return "Tensor %s %s" % (s[1].replace("torch.", ""), list(s[2]))
    if kind == "NamedTuple":
        fields = ", ".join("%s: %s" % (f, describe(e)) for f, e in zip(s[2], s[3]))
        return "%s(%s)" % (s[1], fields)
    if kind in ("tuple", "list"):
        inner = ", ".join(describe(e) for e in s[1])
        return "(%s)" % inner if kind == "tuple" else "[%s]" % inner
    if kind == "dict":
        return "{%s}" % ", ".join("%r: %s" % (k, describe(e)) for k, e in s[1])
    return kind


def data_file(report, model_path, forced):
    if forced:
        return forced
    dataset = report.get("spec", {}).get("dataset", {})
    for section in ("quant_calibration_dataset", "test_dataset"):
        f = (dataset.get(section) or {}).get("data_file")
        if f:
            return f
    beside = sorted(glob.glob(os.path.join(os.path.dirname(model_path), "*.npz")))
    return beside[0] if beside else None


def first_batch(path, n):
    with np.load(path) as z:
        key = "x" if "x" in z.files else z.files[0]
        x = z[key][:n]
    return torch.from_numpy(np.ascontiguousarray(x)).float()


def check(report_path, forced_data, n):
    """Returns (ok, line)."""
    with open(report_path) as f:
        report = json.load(f)
    model, artifact = report["model"]["path"], report["artifact"]["path"]
    data = data_file(report, model, forced_data)
    if not data:
        return False, "no input data for %s (pass --data)" % model
    x = first_batch(data, n)
    torch.manual_seed(0)
    with torch.no_grad():
        want = structure(torch.jit.load(model, map_location="cpu").eval()(x))
        try:
            q = torch.jit.load(artifact, map_location="cpu").eval()
            got = structure(q(x))
        except Exception as e:  # noqa: BLE001 - any load or run failure is the finding
            msg = str(e).strip().splitlines()
            return False, "does not run in PyTorch: %s" % (msg[0] if msg else type(e).__name__)
    if got != want:
        return False, "returns %s, the float model returns %s" % (describe(got), describe(want))
    return True, describe(got)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="an .npz whose first array is the input batch")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args(argv[1:])
    reports = sorted(r for d in args.dirs
                     for r in glob.glob(os.path.join(d, "**", "quantize_report.json"), recursive=True))
    if not reports:
        print("check_artifacts.py: no quantize_report.json under %s" % " ".join(args.dirs),
              file=sys.stderr)
        return 2
    failed = 0
    for r in reports:
        try:
            ok, line = check(r, args.data, args.batch)
        except Exception as e:  # noqa: BLE001 - the float model or the data failed
            ok, line = False, "cannot check: %s" % str(e).strip().splitlines()[0]
        failed += not ok
        print("%s  %s  %s" % ("ok  " if ok else "FAIL", os.path.dirname(r), line))
    print("%d of %d artifacts run in PyTorch with the float model's output type"
          % (len(reports) - failed, len(reports)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
