#!/usr/bin/python3
"""Writes a function-preserving variant of the Fashion-MNIST CNN whose one
layer, features.conv2, has a large activation outlier in its input.

Usage: make_outlier_layer.py IN.pt OUT.pt TEST.npz [--seed 0] [--scale 300]

Output channel 0 of features.conv1 (weight and bias) is multiplied by
--scale and the inputs of features.conv2 that it feeds are divided by it.
A positive scale commutes with ReLU and max-pooling, so the float model
computes the same outputs (checked to 1e-5, relative), but conv2's input
now has one channel --scale times larger than the others: per-tensor
activation quantization of that one input collapses the other channels.
The sensitivity table must rank conv2 first (tests/torch/test_tune.cpp).
"""
import os
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from variant_util import make_variant  # noqa: E402


def outlier(m, a, g):
    del g  # deterministic
    first, second = m.features.conv1, m.features.conv2
    first.weight[0].mul_(a.scale)
    first.bias[0].mul_(a.scale)
    second.weight[:, 0].div_(a.scale)


def main():
    make_variant("make_outlier_layer",
                 lambda ap: ap.add_argument("--scale", type=float, default=300.0), outlier)


if __name__ == "__main__":
    main()
