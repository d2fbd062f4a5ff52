"""What make_imbalanced.py and make_outliers.py share: the command line
(SRC OUT TEST.npz [--seed]), loading the trained TorchScript net, checking
that the variant computes the same outputs (1e-5, relative) on 256 test
images, and writing it atomically."""
import argparse
import os
import sys

import numpy as np
import torch


def make_variant(name, add_args, transform):
    """add_args(parser) adds the script's options; transform(model, args,
    generator) changes the model's parameters in place (under no_grad), or
    returns a new TorchScript model to write instead."""
    ap = argparse.ArgumentParser(prog=name)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("test_npz")
    ap.add_argument("--seed", type=int, default=0)
    add_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(2)
    m = torch.jit.load(a.src)
    m.eval()
    x = torch.from_numpy(np.load(a.test_npz)["x"][:256]).float()
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        ref = m(x)
        m = transform(m, a, g) or m
        out = m(x)
    rel = ((out - ref).abs().max() / ref.abs().max()).item()
    if rel > 1e-5:
        sys.exit(f"{name}: the variant changed the outputs (max relative {rel:.2e})")
    tmp = a.out + ".tmp"
    m.save(tmp)
    os.replace(tmp, a.out)
    print(f"{name}: wrote {a.out} (outputs equal to {rel:.1e}, relative)")
