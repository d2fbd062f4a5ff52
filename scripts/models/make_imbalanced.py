#!/usr/bin/python3
"""Writes a function-preserving, channel-imbalanced variant of a trained net.

Usage: make_imbalanced.py IN.pt OUT.pt TEST.npz [--seed 0] [--spread 40]

For each link "layer A -> ReLU / max-pool / flatten -> layer B" of the
Fashion-MNIST CNN (conv1 -> conv2, conv2 -> fc1 through flatten, fc1 -> fc)
or MLP (fc1 -> fc2, fc2 -> fc3),
output channel i of A (weight and bias) is multiplied by s_i and the inputs
of B that channel i feeds are divided by s_i, with log s_i uniform over
[-log 40, log 40]. Positive scales commute with ReLU and max-pooling, so the
float model computes the same outputs (checked here to 1e-5, relative); the
per-channel ranges become as uneven as those of trained depthwise nets, the
case where per-tensor quantization collapses and cross-layer equalization
(Nagel et al. 2019) helps.

The trained MobileNetV2-style net (FmnistMobileNetV2 in train_fmnist.py) gets
the same treatment on each "BatchNorm -> ReLU6 -> layer" link inside a block
or the head (expand -> depthwise, depthwise -> project, head conv -> fc
through pooling; not the stem, whose output the first residual add reads): the BatchNorm's gamma and beta times s_i, the next layer's
input channel i divided by s_i (a depthwise filter: filter i). ReLU6 does
not commute with a scale, so it becomes a per-channel clip,
minimum(relu(x), 6 s_i), held in a `_tq_clip` buffer (the form tao-quant's
own equalization writes): exact again.

The ResNet (FmnistResNet) gets it on each BasicBlock's "bn1 -> ReLU -> conv2"
link. The ResNet and MLP variants are held out: no test or default was tuned
on them (scripts/bench/heldout.sh measures them).
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

LINKS = {"FmnistCNN": [("features.conv1", "features.conv2"),
                       ("features.conv2", "classifier.fc1"),
                       ("classifier.fc1", "classifier.fc")],
         "FmnistMLP": [("fc1", "fc2"), ("fc2", "fc3")]}


def submodule(m, path):
    for part in path.split("."):
        m = getattr(m, part)
    return m


def scales(n, a, g):
    return torch.exp(torch.empty(n).uniform_(-math.log(a.spread), math.log(a.spread),
                                             generator=g))


def imbalance(m, a, g):
    for first, second in LINKS[m.original_name]:
        A, B = submodule(m, first), submodule(m, second)
        n = A.weight.shape[0]
        s = scales(n, a, g)
        A.weight.mul_(s.view(-1, *([1] * (A.weight.dim() - 1))))
        A.bias.mul_(s)
        w = B.weight
        if w.dim() == 4:
            w.div_(s.view(1, -1, 1, 1))
        else:  # linear, possibly after flatten: channel i feeds a block of inputs
            w.view(w.shape[0], n, -1).div_(s.view(1, -1, 1))


class ChannelClip(torch.nn.Module):
    """ReLU6 with a clip per channel: minimum(relu(x), _tq_clip[c])."""

    def __init__(self, clip):
        super().__init__()
        self.register_buffer("_tq_clip", clip.view(1, -1, 1, 1).clone())

    def forward(self, x):
        return torch.minimum(torch.relu(x), self._tq_clip)


def mbv2_links(m):
    """(BatchNorm, module holding the ReLU6, its name, next layer) of each link.
    Not the stem: its output also feeds the first block's residual add."""
    links = []
    for block in m.blocks:
        c = block.conv
        if hasattr(c, "expand"):
            links.append((c.bn1, c, "relu1", c.dw))
        links.append((c.bn2, c, "relu2", c.project))
    links.append((m.head.bn, m.head, "relu", m.fc))
    return links


def imbalance_mbv2(scripted, a, g):
    from train_fmnist import FmnistMobileNetV2
    m = FmnistMobileNetV2()
    m.load_state_dict(scripted.state_dict())
    m.eval()
    for bn, parent, name, nxt in mbv2_links(m):
        n = bn.weight.shape[0]
        s = torch.exp(torch.empty(n).uniform_(-math.log(a.spread), math.log(a.spread),
                                              generator=g))
        bn.weight.mul_(s)
        bn.bias.mul_(s)
        setattr(parent, name, ChannelClip(6.0 * s))
        w = nxt.weight
        if w.dim() == 4 and nxt.groups == n:  # depthwise: filter i reads channel i
            w.div_(s.view(-1, 1, 1, 1))
        elif w.dim() == 4:
            w.div_(s.view(1, -1, 1, 1))
        else:
            w.div_(s.view(1, -1))
    return torch.jit.script(m)


def imbalance_resnet(m, a, g):
    """Each BasicBlock's bn1 -> ReLU -> conv2 (the block's only link that no
    residual add reads): bn1's gamma and beta times s, conv2's input channels
    divided by s. The scripted model is changed in place."""
    blocks = [c for _, c in m.named_children() if hasattr(c, "bn1")]
    for _, stage in m.named_children():  # stages that are Sequentials of blocks
        blocks += [c for _, c in stage.named_children() if hasattr(c, "bn1")]
    assert blocks, "no BasicBlock found"
    for block in blocks:
        s = scales(block.bn1.weight.shape[0], a, g)
        block.bn1.weight.mul_(s)
        block.bn1.bias.mul_(s)
        block.conv2.weight.div_(s.view(1, -1, 1, 1))


def transform(m, a, g):
    if m.original_name == "FmnistMobileNetV2":
        return imbalance_mbv2(m, a, g)
    if m.original_name == "FmnistResNet":
        return imbalance_resnet(m, a, g)
    return imbalance(m, a, g)


def main():
    make_variant("make_imbalanced",
                 lambda ap: ap.add_argument("--spread", type=float, default=40.0), transform)


if __name__ == "__main__":
    main()
