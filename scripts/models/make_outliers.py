#!/usr/bin/python3
"""Writes a function-preserving variant of a trained ViT whose LayerNorm
outputs have outlier channels, as large transformers' do.

Usage: make_outliers.py IN.pt OUT.pt TEST.npz [--seed 0] [--channels 4]
                        [--low 16] [--high 64]

In real transformers a few channels of each LayerNorm's output are tens of
times larger than the rest, because the LayerNorm's affine weight is large
there (Dettmers et al. 2022; Wei et al. 2022, "Outlier Suppression"). This
makes the same structure in a trained net (vit_qkv of train_fmnist.py):
for each LayerNorm -> Linear link (blocks.i.norm1 -> attn.qkv, blocks.i.norm2
-> fc1, norm -> head), `--channels` channels (seeded) of the LayerNorm's
weight and bias are multiplied by c in [low, high] (log-uniform) and the
Linear's input columns divided by c. The float model computes the same
outputs (checked here to 1e-5, relative); per-tensor activation
quantization of those Linear inputs then loses most of its resolution to
the outliers, the case SmoothQuant (Xiao et al. 2022) addresses.
"""
import math
import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from variant_util import make_variant  # noqa: E402


def links(m):
    out = []
    for i, (_, b) in enumerate(m.blocks.named_children()):
        out.append((f"blocks.{i}.norm1", b.norm1, b.attn.qkv))
        out.append((f"blocks.{i}.norm2", b.norm2, b.fc1))
    out.append(("norm", m.norm, m.head))
    return out


def add_outliers(m, a, g):
    for _, norm, linear in links(m):
        n = norm.weight.shape[0]
        idx = torch.randperm(n, generator=g)[:a.channels]
        c = torch.exp(torch.empty(a.channels).uniform_(math.log(a.low), math.log(a.high),
                                                       generator=g))
        norm.weight[idx] *= c
        norm.bias[idx] *= c
        linear.weight[:, idx] /= c


def options(ap):
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--low", type=float, default=16.0)
    ap.add_argument("--high", type=float, default=64.0)


def main():
    make_variant("make_outliers", options, add_outliers)


if __name__ == "__main__":
    main()
