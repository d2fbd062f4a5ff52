#!/usr/bin/python3
"""Writes a function-preserving, channel-imbalanced variant of a trained net.

Usage: make_imbalanced.py IN.pt OUT.pt TEST.npz [--seed 0] [--spread 40]

For each link "layer A -> ReLU / max-pool / flatten -> layer B" of the
Fashion-MNIST CNN (conv1 -> conv2, conv2 -> fc1 through flatten, fc1 -> fc),
output channel i of A (weight and bias) is multiplied by s_i and the inputs
of B that channel i feeds are divided by s_i, with log s_i uniform over
[-log 40, log 40]. Positive scales commute with ReLU and max-pooling, so the
float model computes the same outputs (checked here to 1e-5, relative); the
per-channel ranges become as uneven as those of trained depthwise nets, the
case where per-tensor quantization collapses and cross-layer equalization
(Nagel et al. 2019) helps.
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

LINKS = [("features.conv1", "features.conv2"),
         ("features.conv2", "classifier.fc1"),
         ("classifier.fc1", "classifier.fc")]


def submodule(m, path):
    for part in path.split("."):
        m = getattr(m, part)
    return m


def imbalance(m, a, g):
    for first, second in LINKS:
        A, B = submodule(m, first), submodule(m, second)
        n = A.weight.shape[0]
        s = torch.exp(torch.empty(n).uniform_(-math.log(a.spread), math.log(a.spread),
                                              generator=g))
        A.weight.mul_(s.view(-1, *([1] * (A.weight.dim() - 1))))
        A.bias.mul_(s)
        w = B.weight
        if w.dim() == 4:
            w.div_(s.view(1, -1, 1, 1))
        else:  # linear, possibly after flatten: channel i feeds a block of inputs
            w.view(w.shape[0], n, -1).div_(s.view(1, -1, 1))


def main():
    make_variant("make_imbalanced",
                 lambda ap: ap.add_argument("--spread", type=float, default=40.0), imbalance)


if __name__ == "__main__":
    main()
