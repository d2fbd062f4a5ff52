#!/usr/bin/python3
"""Small random-weight models whose graphs branch, for tests of static PTQ.

  OUTDIR/encoder.pt      Linear -> nn.TransformerEncoder (2 x TransformerEncoderLayer,
                         batch_first) -> Linear; input [N, 8, 16]
  OUTDIR/encoder_x.npz   x float32 [16, 8, 16]
  OUTDIR/effnet_b0.pt    torchvision efficientnet_b0 (random weights, BatchNorm statistics
                         set from random inputs so activations keep their scale)
  OUTDIR/effnet_x.npz    x float32 [32, 3, 64, 64]
  OUTDIR/densenet_tiny.pt  torchvision DenseNet (growth 8, blocks (2, 3)): _DenseLayer
                         instances share one TorchScript type and are called through
                         a ModuleDict loop (LibTorch's InsertObservers misses some)
  OUTDIR/densenet_shared.pt  the same with blocks (2, 2): the two blocks share a type too
  OUTDIR/densenet_x.npz  x float32 [16, 3, 32, 32]
Deterministic (seed 0). Writes temp files and renames them.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_torchvision import recalibrate_bn  # noqa: E402


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


def save_script(model, path):
    tmp = path + ".tmp"
    torch.jit.script(model.eval()).save(tmp)
    os.replace(tmp, path)


def save_npz(path, x):
    tmp = path + ".tmp.npz"
    np.savez(tmp, x=x)
    os.replace(tmp, path)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "models/tiny"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    save_script(Encoder(), os.path.join(out, "encoder.pt"))
    g = np.random.default_rng(0)
    save_npz(os.path.join(out, "encoder_x.npz"), g.standard_normal((16, 8, 16)).astype(np.float32))
    torch.manual_seed(0)
    save_script(recalibrate_bn(torchvision.models.efficientnet_b0(weights=None), size=64),
                os.path.join(out, "effnet_b0.pt"))
    save_npz(os.path.join(out, "effnet_x.npz"), g.standard_normal((32, 3, 64, 64)).astype(np.float32))
    torch.manual_seed(0)
    for name, blocks in (("densenet_tiny.pt", (2, 3)), ("densenet_shared.pt", (2, 2))):
        torch.manual_seed(0)
        dense = torchvision.models.DenseNet(growth_rate=8, block_config=blocks, num_init_features=16, num_classes=10)
        save_script(recalibrate_bn(dense, size=32), os.path.join(out, name))
    save_npz(os.path.join(out, "densenet_x.npz"), g.standard_normal((16, 3, 32, 32)).astype(np.float32))
    print("wrote", out)


if __name__ == "__main__":
    main()
