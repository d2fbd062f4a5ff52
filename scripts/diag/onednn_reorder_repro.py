#!/usr/bin/env python3
"""The smallest reproduction of LibTorch 1.13's onednn batch-change defect
(issue 31), in plain PyTorch: one quantized conv2d, packed once, run at
batch 1 and then at batch 8 in one process.

    /usr/bin/python3 scripts/diag/onednn_reorder_repro.py            # the table
    /usr/bin/python3 scripts/diag/onednn_reorder_repro.py --threads 1

What it showed here (AMD EPYC, AVX-512 VNNI, 2 threads; F = "could not
create a primitive descriptor for a reorder primitive" at batch 8):

    1x1 conv, 64 input channels, output channels x input size
    7x7    none fail
    13x13  192 fails                      (SqueezeNet 1.1's expand1x1 192x48)
    14x14  576 fails                      (MobileNetV2's / MNASNet's 576x96)
    28x28, 56x56: none fail; 3x3 and depthwise convs: none fail; 1 thread: none

The weight is packed in the blocked layout oneDNN picks for a dummy input;
the first call caches a primitive for its batch size, and a call at another
batch size reorders the packed weight to the layout picked for that size
(brgconv_1x1's block of output/input channels depends on the batch size
and the thread count). oneDNN has no reorder between some pairs of blocked
layouts; PyTorch #86876 (after 1.13) reorders through the plain layout.
No rule of shape predicts it, so tao-quant runs each int8 layer alone at
the sequence before it converts (backends/libtorch/batch_change.cpp) and
keeps the failing ones float.
"""
import argparse

import torch


def fails(ic, oc, k, hw, groups=1, batches=(1, 8, 1)):
    w = torch.quantize_per_channel(torch.randn(oc, ic // groups, k, k),
                                   torch.full((oc,), 0.01, dtype=torch.double),
                                   torch.zeros(oc, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.conv2d_prepack(w, torch.zeros(oc), [1, 1], [k // 2, k // 2],
                                                [1, 1], groups)
    for b in batches:
        x = torch.quantize_per_tensor(torch.rand(b, ic, hw, hw), 0.02, 0, torch.quint8)
        try:
            torch.ops.quantized.conv2d(x, packed, 0.05, 0)
        except RuntimeError:
            return True
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="onednn")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.quantized.engine = a.engine
    ocs = [16, 32, 48, 64, 96, 128, 144, 160, 192, 256, 320, 384, 576, 960]
    print(f"1x1 conv, 64 input channels, batch 1 then 8, {a.threads} thread(s), {a.engine}")
    print("input  " + " ".join(f"{oc:>4}" for oc in ocs))
    for hw in [7, 13, 14, 28, 56]:
        print(f"{hw:>2}x{hw:<2}  " + " ".join(f"{'F' if fails(64, oc, 1, hw) else '.':>4}" for oc in ocs))
    print("3x3 conv 64 -> 192 on 13x13:", "F" if fails(64, 192, 3, 13) else ".")
    print("depthwise 3x3 192 on 13x13:", "F" if fails(192, 192, 3, 13, groups=192) else ".")


if __name__ == "__main__":
    main()
