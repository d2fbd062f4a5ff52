#!/usr/bin/python3
"""Writes the small .npz/.npy/.pt files the data-loader and evaluate tests read.

Usage: test_data_fixtures.py OUTDIR

Real numpy.savez / savez_compressed / numpy.save and torch.save output, so
the C++ readers are tested against the formats as those libraries write
them. The values follow simple formulas the tests recompute:
  f32.npz, f32c.npz  x = arange(240).reshape(10,2,3,4) float32, y = arange(10) % 3 int64
                     (f32c: compressed members)
  u8.npz             x = (arange(24) * 10 % 256).reshape(2,3,2,2) uint8, y int32 [2]
  f64.npz            x = arange(20).reshape(5,4) / 8 float64, y = [4,3,2,1,0] int64
  multi.npz          a = arange(21).reshape(7,3) f32, b = -arange(35).reshape(7,5) f32, y = arange(7) int64
  multi_bad.npz      a [7,3], b [6,5] (different sample counts)
  f16.npz            x float16 (unsupported)
  fortran.npz        x Fortran-order float32 [4,3]
  bigend.npz         x big-endian float32 [4,3]
  flabels.npz        x float32 [4,2], y float32 (labels must be integers)
  zero.npz           x float32 [0,3]
  arr0.npz           numpy.savez(f, data) -> key arr_0
  x.npy              arange(36).reshape(9,4) float32
  tensor.pt          torch.arange(12.).reshape(6,2)
  tuple.pt           (arange(12.).reshape(6,2), arange(6) int64)
  dict.pt            {"x": arange(12.).reshape(6,2), "y": arange(6) % 2}
  mismatch.npz       fmnist-shaped x randn [16,1,28,28] f32, y = arange(16) % 13 (labels up to 12)
  nolabels.npz       fmnist-shaped x randn [16,1,28,28] f32, no y
  corrupt.npz        not a zip file
  raising.pt         a scripted Conv2d(1, 4, 3) model whose forward raises its own
                     ValueError (a two-line message) on fmnist-shaped input
  raising_flat.pt    a scripted model that flattens its input, applies Linear(784, 10)
                     and raises its own RuntimeError
  named_out.pt       conv -> relu -> pool -> linear on fmnist-shaped input, returning
                     Heads(logits, features, aux=None), a NamedTuple (like GoogLeNet's)
  dict_out.pt        the same net returning {"logits": ..., "features": ...}
  nested_out.pt      the same net returning (logits, (features, pooled))
  high_bias.pt       conv a (1->8, 3x3) -> BatchNorm (gamma 1, beta 10 on channels 0-3,
                     else 0; running mean 0, var 1) -> ReLU -> conv b (8->4, 3x3, bias),
                     and conv c (1->8) -> BatchNorm (same) -> ReLU -> depthwise conv d
                     (no bias) -> BatchNorm -> flatten: the high-bias absorption test
"""

import os
import sys
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np
import torch


class Raising(torch.nn.Module):
    """A model whose own input check fails: its error must reach the user."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        if bool(y.abs().sum() >= 0):
            raise ValueError("input rejected by the model: values must be in [-1, 1]\n"
                             "(normalize the calibration data first)")
        return y


class RaisingFlat(torch.nn.Module):
    """Flattens its input before its first layer, then raises its own error:
    a guess from the first layer (784 features) is wrong for [N,1,28,28]."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)

    def forward(self, x):
        y = self.fc(torch.flatten(x, 1))
        if bool(y.abs().sum() >= 0):
            raise RuntimeError("the model's own check failed: expected logits in a calibrated range")
        return y


class Heads(NamedTuple):
    logits: torch.Tensor
    features: torch.Tensor
    aux: Optional[torch.Tensor]


class Trunk(torch.nn.Module):
    """conv -> relu -> max-pool -> linear: every mode has a layer to quantize."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 13 * 13, 10)

    def parts(self, x):
        f = torch.relu(self.conv(x))
        p = torch.nn.functional.max_pool2d(f, 2)
        return self.fc(torch.flatten(p, 1)), f, p


class NamedOut(Trunk):
    def forward(self, x) -> Heads:
        logits, f, _ = self.parts(x)
        return Heads(logits, f, None)


class DictOut(Trunk):
    def forward(self, x) -> Dict[str, torch.Tensor]:
        logits, f, _ = self.parts(x)
        return {"logits": logits, "features": f}


class NestedOut(Trunk):
    def forward(self, x) -> Tuple[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        logits, f, p = self.parts(x)
        return logits, (f, p)


class HighBias(torch.nn.Module):
    """Two pairs whose first BatchNorm shifts half its channels far above 3 sigma."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(1, 8, 3)
        self.bn_a = torch.nn.BatchNorm2d(8)
        self.b = torch.nn.Conv2d(8, 4, 3)
        self.c = torch.nn.Conv2d(1, 8, 3)
        self.bn_c = torch.nn.BatchNorm2d(8)
        self.d = torch.nn.Conv2d(8, 8, 3, groups=8, bias=False)
        self.bn_d = torch.nn.BatchNorm2d(8)
        with torch.no_grad():
            for bn in (self.bn_a, self.bn_c, self.bn_d):
                bn.bias.copy_(torch.tensor([10.0] * 4 + [0.0] * 4))

    def forward(self, x):
        y = self.b(torch.relu(self.bn_a(self.a(x))))
        z = self.bn_d(self.d(torch.relu(self.bn_c(self.c(x)))))
        return torch.cat([torch.flatten(y, 1), torch.flatten(z, 1)], 1)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    p = lambda name: os.path.join(out, name)  # noqa: E731

    x = np.arange(240, dtype=np.float32).reshape(10, 2, 3, 4)
    y = (np.arange(10) % 3).astype(np.int64)
    np.savez(p("f32.npz"), x=x, y=y)
    np.savez_compressed(p("f32c.npz"), x=x, y=y)
    np.savez(p("u8.npz"), x=(np.arange(24) * 10 % 256).astype(np.uint8).reshape(2, 3, 2, 2),
             y=np.array([1, 0], dtype=np.int32))
    np.savez(p("f64.npz"), x=np.arange(20, dtype=np.float64).reshape(5, 4) / 8, y=np.array([4, 3, 2, 1, 0]))
    np.savez(p("multi.npz"), a=np.arange(21, dtype=np.float32).reshape(7, 3),
             b=-np.arange(35, dtype=np.float32).reshape(7, 5), y=np.arange(7, dtype=np.int64))
    np.savez(p("multi_bad.npz"), a=np.zeros((7, 3), np.float32), b=np.zeros((6, 5), np.float32))
    np.savez(p("f16.npz"), x=np.zeros((4, 3), np.float16))
    np.savez(p("fortran.npz"), x=np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3)))
    np.savez(p("bigend.npz"), x=np.arange(12, dtype=">f4").reshape(4, 3))
    np.savez(p("flabels.npz"), x=np.zeros((4, 2), np.float32), y=np.zeros(4, np.float32))
    np.savez(p("zero.npz"), x=np.zeros((0, 3), np.float32))
    np.savez(p("arr0.npz"), np.zeros((3, 2), np.float32))
    np.save(p("x.npy"), np.arange(36, dtype=np.float32).reshape(9, 4))

    t = torch.arange(12.0).reshape(6, 2)
    torch.save(t, p("tensor.pt"))
    torch.save((t, torch.arange(6)), p("tuple.pt"))
    torch.save({"x": t, "y": torch.arange(6) % 2}, p("dict.pt"))
    torch.jit.script(Raising()).save(p("raising.pt"))
    torch.jit.script(RaisingFlat()).save(p("raising_flat.pt"))
    torch.manual_seed(0)
    torch.jit.script(HighBias().eval()).save(p("high_bias.pt"))
    for name, cls in (("named_out", NamedOut), ("dict_out", DictOut), ("nested_out", NestedOut)):
        torch.manual_seed(0)
        torch.jit.script(cls().eval()).save(p(name + ".pt"))

    rng = np.random.default_rng(0)
    fx = rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    np.savez(p("mismatch.npz"), x=fx, y=(np.arange(16) % 13).astype(np.int64))
    np.savez(p("nolabels.npz"), x=fx)
    with open(p("corrupt.npz"), "w") as f:
        f.write("this is not a zip archive\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
