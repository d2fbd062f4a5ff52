#!/usr/bin/python3
"""Fidelity of quantized artifacts to their float model, in plain PyTorch.

Usage: fidelity.py FLOAT.pt DATA.npz ARTIFACT.pt [ARTIFACT.pt ...]

For each artifact: the SQNR (dB) of its logits against the float model's,
and the share (%) of samples whose argmax agrees with the float model's,
over all of DATA's x. One line per artifact: "sqnr_db agreement_pct path".
A top-1 difference of a few images between two artifacts close to float
is noise; these two say which one is closer to the float model.
"""
import sys

import numpy as np
import torch


def logits(m, x):
    out = []
    with torch.no_grad():
        for i in range(0, x.shape[0], 500):
            y = m(x[i:i + 500])
            out.append(y[0] if isinstance(y, (tuple, list)) else y)
    return torch.cat(out).double()


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    torch.set_num_threads(2)
    x = torch.from_numpy(np.load(sys.argv[2])["x"]).float()
    ref = logits(torch.jit.load(sys.argv[1]).eval(), x)
    for path in sys.argv[3:]:
        y = logits(torch.jit.load(path).eval(), x)
        sqnr = 10 * torch.log10(ref.pow(2).sum() / (y - ref).pow(2).sum()).item()
        agree = 100 * (y.argmax(1) == ref.argmax(1)).double().mean().item()
        print(f"{sqnr:.2f} {agree:.2f} {path}")


if __name__ == "__main__":
    main()
