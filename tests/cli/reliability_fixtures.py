#!/usr/bin/python3
"""Writes the crafted data and models of the reliability tests (issue 30).

Usage: reliability_fixtures.py MODELS_DIR OUTDIR

From the Fashion-MNIST data of MODELS_DIR/fmnist (calib.npz: 512 samples,
test.npz: 10000, x float32 [N,1,28,28], y int64):
  calib_nan.npz      calib.npz with x[37, 0, 5, 5] = NaN
  calib_inf.npz      calib.npz with x[300, 0, 14, 14] = +inf
  calib_outlier.npz  calib.npz with x[3, 0, 10, 10] = 1e30 (finite; a calibrating batch)
  test_label10.npz   the first 500 test samples, y[7] = 10 (the nets have 10 outputs)
  test_label_neg.npz the first 500 test samples, y[123] = -1
  val.npz            test samples 8000..9999 (a validation split)
  test_head.npz      test samples 0..1999 (the test split of the same file)
Models (TorchScript, on fmnist-shaped input):
  odd_names.pt       flatten -> seq.l1 Linear(784, 64) -> relu -> seq.l[1] Linear(64, 64)
                     -> relu -> seq.l* Linear(64, 10); seq.l*'s weight has one value
                     per row 10x the others' largest (int4 per channel rounds most
                     of its other weights to 0, int8 does not); seeded, untrained
  nan_bias.pt        flatten -> fc1 Linear(784, 32) -> relu -> fc2 Linear(32, 10)
                     whose bias[3] is NaN
"""

import collections
import os
import sys

import numpy as np
import torch


def save_npz(path, **arrays):
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def data_files(models, out):
    calib = np.load(os.path.join(models, "fmnist", "calib.npz"))
    test = np.load(os.path.join(models, "fmnist", "test.npz"))
    x, y = calib["x"], calib["y"]
    for name, (i, r, c), v in (("calib_nan", (37, 5, 5), np.nan),
                               ("calib_inf", (300, 14, 14), np.inf),
                               ("calib_outlier", (3, 10, 10), 1e30)):
        bad = x.copy()
        bad[i, 0, r, c] = v
        save_npz(os.path.join(out, name + ".npz"), x=bad, y=y)
    tx, ty = test["x"], test["y"]
    for name, i, v in (("test_label10", 7, 10), ("test_label_neg", 123, -1)):
        labels = ty[:500].copy()
        labels[i] = v
        save_npz(os.path.join(out, name + ".npz"), x=tx[:500], y=labels)
    save_npz(os.path.join(out, "val.npz"), x=tx[8000:], y=ty[8000:])
    save_npz(os.path.join(out, "test_head.npz"), x=tx[:2000], y=ty[:2000])


class Flat(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.seq = body

    def forward(self, x):
        return self.seq(x.flatten(1))


def save_script(module, path):
    module.eval()
    torch.jit.script(module).save(path + ".tmp")
    os.replace(path + ".tmp", path)


def models(out):
    torch.manual_seed(30)
    odd = torch.nn.Sequential(collections.OrderedDict([
        ("l1", torch.nn.Linear(784, 64)), ("r1", torch.nn.ReLU()),
        ("l[1]", torch.nn.Linear(64, 64)), ("r2", torch.nn.ReLU()),
        ("l*", torch.nn.Linear(64, 10))]))
    with torch.no_grad():
        w = odd[4].weight
        w[torch.arange(10), torch.arange(10)] = 10 * w.abs().max()
    save_script(Flat(odd), os.path.join(out, "odd_names.pt"))
    nan = torch.nn.Sequential(collections.OrderedDict([
        ("fc1", torch.nn.Linear(784, 32)), ("relu", torch.nn.ReLU()),
        ("fc2", torch.nn.Linear(32, 10))]))
    with torch.no_grad():
        nan[2].bias[3] = float("nan")
    save_script(Flat(nan), os.path.join(out, "nan_bias.pt"))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    os.makedirs(sys.argv[2], exist_ok=True)
    data_files(sys.argv[1], sys.argv[2])
    models(sys.argv[2])


if __name__ == "__main__":
    main()
