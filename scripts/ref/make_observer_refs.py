#!/usr/bin/python3
"""Reference qparams from PyTorch's observers, for tests/torch/test_observers_ref.cpp.

Feeds fixed-seed tensors (batches) to torch.ao.quantization's MinMaxObserver,
PerChannelMinMaxObserver, MovingAverageMinMaxObserver and
MovingAveragePerChannelMinMaxObserver for every dtype (quint8, qint8), qscheme
and reduce_range combination PyTorch accepts, and writes the inputs and the
resulting min/max, scale and zero_point. Floats are stored as their IEEE-754
float32 bit patterns (unsigned 32-bit integers), so the C++ test compares bit
for bit.

Usage: /usr/bin/python3 scripts/ref/make_observer_refs.py [OUT.json]
(default: tests/data/observer_refs.json next to this repository's tests).
"""
import json
import os
import struct
import sys
import warnings

import torch
from torch.ao.quantization.observer import (
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)

warnings.filterwarnings("ignore")  # reduce_range deprecation notes


def bits(t):
    """float32 values -> list of uint32 bit patterns."""
    vals = t.detach().to(torch.float32).reshape(-1).tolist()
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in vals]


def make_tensors():
    g = torch.Generator().manual_seed(20240613)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def rand(*shape):
        return torch.rand(*shape, generator=g)

    t = {}
    # Per-tensor inputs; several batches exercise the running/moving statistics.
    t["gaussian"] = [randn(4, 16), 2.5 * randn(4, 16), 0.3 * randn(4, 16)]
    t["all_positive"] = [rand(3, 20) + 0.5, 2 * rand(3, 20) + 0.25]
    t["all_negative"] = [-(rand(3, 20) + 0.1), -(3 * rand(3, 20) + 0.2)]
    t["constant"] = [torch.full((5, 7), 0.37)]
    t["constant_negative"] = [torch.full((2, 9), -1.75)]
    t["zeros"] = [torch.zeros(3, 4)]
    t["tiny_range"] = [1e-9 * randn(4, 8), 3e-9 * randn(4, 8)]
    t["tiny_offset"] = [1000 + 1e-5 * randn(4, 8)]
    t["large_range"] = [1e30 * randn(4, 8), 1e33 * randn(2, 8)]
    mags = torch.exp(rand(64) * 16 - 8)
    signs = torch.where(rand(64) < 0.5, -1.0, 1.0)
    t["log_uniform"] = [(mags * signs).reshape(8, 8)]
    t["growing"] = [randn(16) * s for s in (0.1, 0.5, 2.0, 8.0)]
    t["relu_like"] = [torch.relu(randn(6, 10)), torch.relu(3 * randn(6, 10))]
    # Per-channel inputs.
    a0 = randn(6, 3, 5) * torch.tensor([0.01, 0.5, 1.0, 4.0, 100.0, 1.0]).reshape(6, 1, 1)
    a0[5] = 0.25  # a constant channel
    t["pc_axis0"] = [a0, 1.5 * randn(6, 3, 5)]
    a1 = randn(4, 6, 3, 3)
    a1[:, 0] = a1[:, 0].abs() + 0.1  # all positive
    a1[:, 1] = -a1[:, 1].abs() - 0.2  # all negative
    a1[:, 2] = 0.0  # all zero
    a1[:, 3] *= 1e-8  # tiny
    t["pc_axis1"] = [a1, randn(4, 6, 3, 3) * 2]
    # 256 random (lo, hi) pairs over many magnitudes and sign patterns: each
    # row is one channel holding exactly its lo and hi.
    n = 256
    lo_mag = torch.exp(rand(n) * 30 - 20)
    hi_mag = torch.exp(rand(n) * 30 - 20)
    kind = (rand(n) * 3).floor()
    lo = torch.where(kind == 0, -lo_mag, torch.where(kind == 1, lo_mag, -lo_mag))
    hi = torch.where(kind == 0, hi_mag, torch.where(kind == 1, lo_mag + hi_mag, -lo_mag + 0.5 * lo_mag * rand(n)))
    t["pc_ranges"] = [torch.stack([lo, hi], dim=1)]
    return t


PER_CHANNEL_AXIS = {"pc_axis0": 0, "pc_axis1": 1, "pc_ranges": 0}
MOVING_TENSORS = {"gaussian", "all_positive", "all_negative", "tiny_range", "large_range",
                  "growing", "relu_like", "constant", "pc_axis0", "pc_axis1"}


def configs(per_channel):
    schemes = ([torch.per_channel_affine, torch.per_channel_symmetric] if per_channel
               else [torch.per_tensor_affine, torch.per_tensor_symmetric])
    for dtype in (torch.quint8, torch.qint8):
        for qscheme in schemes:
            for reduce_range in (False, True):
                symmetric = qscheme in (torch.per_tensor_symmetric, torch.per_channel_symmetric)
                if dtype == torch.quint8 and symmetric and reduce_range:
                    continue  # PyTorch raises NotImplementedError
                yield dtype, qscheme, symmetric, reduce_range


def run_case(name, batches, observer, dtype, qscheme, symmetric, reduce_range, axis, c):
    per_channel = axis is not None
    kw = dict(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range)
    if observer == "minmax":
        obs = PerChannelMinMaxObserver(ch_axis=axis, **kw) if per_channel else MinMaxObserver(**kw)
    else:
        obs = (MovingAveragePerChannelMinMaxObserver(averaging_constant=c, ch_axis=axis, **kw)
               if per_channel else MovingAverageMinMaxObserver(averaging_constant=c, **kw))
    for b in batches:
        obs(b)
    scale, zp = obs.calculate_qparams()
    case = {
        "observer": observer,
        "tensor": name,
        "dtype": "uint8" if dtype == torch.quint8 else "int8",
        "symmetric": symmetric,
        "per_channel": per_channel,
        "axis": axis if per_channel else 0,
        "reduce_range": reduce_range,
        "min_val": bits(obs.min_val.reshape(-1)),
        "max_val": bits(obs.max_val.reshape(-1)),
        "scale": bits(scale),
        "zero_point": [int(v) for v in zp.reshape(-1).tolist()],
    }
    if observer == "moving_average_minmax":
        case["averaging_constant"] = c
    return case


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "tests", "data",
                                                              "observer_refs.json")
    tensors = make_tensors()
    cases = []
    for name, batches in tensors.items():
        axis = PER_CHANNEL_AXIS.get(name)
        for dtype, qscheme, symmetric, rr in configs(axis is not None):
            cases.append(run_case(name, batches, "minmax", dtype, qscheme, symmetric, rr, axis, None))
            if name in MOVING_TENSORS:
                for c in (0.01, 0.3):
                    cases.append(run_case(name, batches, "moving_average_minmax", dtype, qscheme,
                                          symmetric, rr, axis, c))
    with open(out, "w") as f:
        f.write("{\n")
        f.write('"generator": "scripts/ref/make_observer_refs.py",\n')
        f.write('"torch_version": %s,\n' % json.dumps(torch.__version__))
        f.write('"eps": %d,\n' % bits(torch.tensor([torch.finfo(torch.float32).eps]))[0])
        f.write('"tensors": {\n')
        items = list(tensors.items())
        for i, (name, batches) in enumerate(items):
            entry = {"batches": [{"shape": list(b.shape), "bits": bits(b)} for b in batches]}
            f.write("%s: %s%s\n" % (json.dumps(name), json.dumps(entry, separators=(",", ":")),
                                     "," if i + 1 < len(items) else ""))
        f.write("},\n")
        f.write('"cases": [\n')
        for i, c in enumerate(cases):
            f.write(json.dumps(c, separators=(",", ":")) + ("," if i + 1 < len(cases) else "") + "\n")
        f.write("]\n}\n")
    print("wrote %s: %d tensors, %d cases, %d bytes" % (out, len(tensors), len(cases), os.path.getsize(out)))


if __name__ == "__main__":
    main()
