#!/usr/bin/python3
"""Per-model details of a zoo batch run, as a markdown table (docs/zoo.md).

Usage: scripts/zoo/report.py [RESULTS_DIR]   (default results/batch/manifest)

Reads each job's quantize_report.json (and job_result.json): layers in int8
vs kept float (and why), the held-out output SQNR against the float model,
the branches specialized away, the model-level latency check of static int8
(fp32 and int8 medians at batch 1 and 32, from quantize), and the size ratio.
"""
import glob
import json
import os
import sys


def fmt_ms(v):
    return "%.1f" % v if v >= 1 else "%.2f" % v


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "results/batch/manifest"
    rows = []
    for job_dir in sorted(glob.glob(os.path.join(root, "*"))):
        jr_path = os.path.join(job_dir, "job_result.json")
        if not os.path.exists(jr_path):
            continue
        with open(jr_path) as f:
            jr = json.load(f).get("result", {})
        job = jr.get("id", os.path.basename(job_dir))
        rep_path = os.path.join(job_dir, "quantize_report.json")
        if jr.get("status") != "passed" or not os.path.exists(rep_path):
            rows.append([job, jr.get("status", "?"), "-", "-", "-", "-", "-"])
            continue
        with open(rep_path) as f:
            r = json.load(f)
        layers = r["layers"]
        q = sum(1 for l in layers if not l["kept_float"])
        reasons = {}
        for l in layers:
            if l["kept_float"]:
                key = l["reason"].split(" (")[0]
                reasons[key] = reasons.get(key, 0) + 1
        meta = r["backend"]["meta"]
        sqnr = meta.get("holdout_output_sqnr_db")
        br = meta.get("specialized_branches", {})
        lat = [x for x in meta.get("latency_check", []) if x.get("stage") == "planned"]
        def lat_entry(x):
            if "inferred_from_batch_size" in x:  # not measured: won by 2x at a smaller batch
                return "bs%d ~%s ms fp32, inferred from bs%d" % (
                    x["batch_size"], fmt_ms(x["fp32_ms_estimate"]), x["inferred_from_batch_size"])
            return "bs%d %s/%s ms" % (x["batch_size"], fmt_ms(x["fp32_ms"]), fmt_ms(x["int8_ms"]))
        lat_s = ", ".join(lat_entry(x) for x in lat) or "-"
        kept = "; ".join("%d: %s" % (n, k) for k, n in sorted(reasons.items())) or "-"
        rows.append([job, "%d/%d" % (q, len(layers)), kept,
                     "%.1f" % sqnr if isinstance(sqnr, (int, float)) else "-",
                     "%s removed, %s kept" % (br.get("removed", "-"), br.get("kept", "-")) if br else "-",
                     lat_s, "%.3f" % r["totals"]["file_ratio"] if "file_ratio" in r.get("totals", {}) else "-"])
    head = ["job", "layers quantized", "kept float (why)", "holdout SQNR dB", "branches",
            "quantize-time latency fp32/int8", "file ratio"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")


if __name__ == "__main__":
    main()
