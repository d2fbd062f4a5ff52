#!/usr/bin/env python3
"""An independent reference for TensorRT's calibration cache, written from
the format (docs/deploy.md, TensorRT's IInt8Calibrator cache): from a
tao-quant quantize report's own numbers (the activation ranges in
`quantization.tensors`, their ONNX names in the `onnx` export's facts, the
header in the `tensorrt_cache` export's facts), the expected file, one line
per activation tensor: `name: <hex>`, the big-endian float32 bits of
amax / 127.

Usage: trt_cache_ref.py quantize_report.json OUT
"""
import json
import struct
import sys


def main():
    report = json.load(open(sys.argv[1]))
    files = {f["format"]: f for f in report["exports"]["files"]}
    names = files["onnx"]["facts"]["tensor_names"]
    lines = [files["tensorrt_cache"]["facts"]["header"]]
    seen = set()
    for t in report["quantization"]["tensors"]:
        if t["role"] != "activation" or "scale" not in t:
            continue
        name = names[t["name"]]
        if name in seen:
            continue
        seen.add(name)
        lines.append("%s: %s" % (name, struct.pack(">f", t["amax"] / 127.0).hex()))
    with open(sys.argv[2], "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
