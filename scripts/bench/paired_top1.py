#!/usr/bin/python3
"""Two artifacts' top-1 on the same images, paired.

Usage: paired_top1.py DATA.npz A.pt B.pt

Prints one line: "top1_a top1_b only_a only_b p" -- top-1 (%) of each,
the images only A gets right, those only B gets right, and the two-sided
exact McNemar p-value of that split (the chance of a split at least this
uneven if A and B were equally good). Two artifacts close to their float
model differ by a few images either way; p says whether the difference is
more than that.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fidelity import logits  # noqa: E402  (sibling script)


def predictions(path, x):
    return logits(torch.jit.load(path).eval(), x).argmax(1)


def mcnemar_p(a, b):
    n, k = a + b, min(a, b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    torch.set_num_threads(2)
    d = np.load(sys.argv[1])
    x, y = torch.from_numpy(d["x"]).float(), torch.from_numpy(d["y"])
    a = predictions(sys.argv[2], x) == y
    b = predictions(sys.argv[3], x) == y
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    print("%.2f %.2f %d %d %.3f" % (100 * a.double().mean(), 100 * b.double().mean(), only_a, only_b,
                                    mcnemar_p(only_a, only_b)))


if __name__ == "__main__":
    main()
