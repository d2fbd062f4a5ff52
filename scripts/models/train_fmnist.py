#!/usr/bin/python3
"""Trains a small Fashion-MNIST model and saves it as TorchScript.

Usage: train_fmnist.py --arch {cnn,cnn_bn,resnet,vit,vit_qkv,mlp,mbv2,effnet} --out OUTDIR
                       [--recipe {test,full}] [--epochs N] [--train-samples N]
                       [--threads 2] [--seed 0]

Recipes: "full" (the default) trains on all 60,000 images for the epochs
behind the figures in README.md and docs/. "test" (what the test fixture,
make_test_models.sh, builds unless TQ_MODELS_RECIPE=full) trains on a
seeded subset of the training set for fewer epochs: the tests need a
trained net, not the best one, and the fixture must stay cheap on a busy
2-core machine.

Writes OUTDIR/<arch>.pt (torch.jit.script of the eval-mode model) and
OUTDIR/<arch>.json (fp32 top-1 on the 10k test set, training time, ...).
Both are written to temporary names and renamed into place, JSON first, so
the .pt appearing means the pair is complete.

The models take NORMALIZED input [N,1,28,28] (see fmnist_data.py: MEAN/STD)
and return logits [N,10].  Module names are part of the contract with the
tests and specs (e.g. skip_names: [classifier.fc]); do not rename them.
Training is seeded and deterministic for a given torch build and thread count.
"""

import argparse
import json
import os
import sys
import time
from collections import OrderedDict


# TorchScript serializes some class attributes in set order, which depends on
# Python's string hashing; a fixed PYTHONHASHSEED makes the saved file
# byte-for-byte reproducible, so the script re-execs itself once with it.
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist_data  # noqa: E402  (sibling module)
from atomic_io import atomic_write  # noqa: E402  (sibling module)


# --------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------
class FmnistCNN(nn.Module):
    """The demo model: 2 conv + 2 linear; ~0.8M of its ~0.83M params in fc1."""

    def __init__(self, batch_norm=False):
        super().__init__()
        feats = [("conv1", nn.Conv2d(1, 32, 3, padding=1))]
        if batch_norm:
            feats.append(("bn1", nn.BatchNorm2d(32)))
        feats += [("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
                  ("conv2", nn.Conv2d(32, 64, 3, padding=1))]
        if batch_norm:
            feats.append(("bn2", nn.BatchNorm2d(64)))
        feats += [("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2))]
        self.features = nn.Sequential(OrderedDict(feats))
        self.classifier = nn.Sequential(OrderedDict([
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(64 * 7 * 7, 256)),
            ("relu", nn.ReLU()),
            ("fc", nn.Linear(256, 10)),
        ]))

    def forward(self, x):
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(cin, cout, 1, stride=stride, bias=False)),
                ("bn", nn.BatchNorm2d(cout)),
            ]))
        else:
            self.downsample = nn.Identity()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.downsample(x))


class FmnistResNet(nn.Module):
    """stem (conv+bn+relu, maxpool) -> 3 residual blocks -> avgpool -> fc.

    Narrow (16/32 channels) so that it trains in a few minutes on 2 cores."""

    def __init__(self, width=16):
        super().__init__()
        w = width
        self.stem = nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(1, w, 3, padding=1, bias=False)),
            ("bn", nn.BatchNorm2d(w)),
            ("relu", nn.ReLU()),
            ("pool", nn.MaxPool2d(2)),                  # 28 -> 14
        ]))
        self.layer1 = BasicBlock(w, w)                  # 14x14
        self.layer2 = BasicBlock(w, 2 * w, stride=2)    # 7x7, 1x1 downsample
        self.layer3 = BasicBlock(2 * w, 2 * w)          # 7x7
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(2 * w, 10)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.flatten(self.avgpool(x)))


def add_patch_tokens(m, dim, patch):
    """The ViTs' stem: a patch-`patch` conv embedding, a cls token and
    learned position embeddings (set on module `m`, in this order)."""
    num_patches = (28 // patch) ** 2
    m.patch_embed = nn.Conv2d(1, dim, patch, stride=patch)
    m.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
    m.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
    nn.init.trunc_normal_(m.pos_embed, std=0.02)
    nn.init.trunc_normal_(m.cls_token, std=0.02)


class FmnistViT(nn.Module):
    """Patch-7 conv embedding (16 patches) + cls token + 3 encoder layers."""

    def __init__(self, dim=64, depth=3, heads=4, mlp_dim=128, patch=7):
        super().__init__()
        add_patch_tokens(self, dim, patch)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=mlp_dim, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)        # [N,16,dim]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


class Attention(nn.Module):
    """Multi-head self-attention with one qkv Linear, as timm's ViT has it."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = float(dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        return self.proj(torch.matmul(attn, v).transpose(1, 2).reshape(b, n, c))


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: LayerNorm -> attention, LayerNorm -> MLP."""

    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class FmnistViTQkv(nn.Module):
    """A timm-style ViT: every Linear is a module (qkv, proj, fc1, fc2, head),
    so LayerNorm -> Linear links are visible, as in real transformers."""

    def __init__(self, dim=64, depth=4, heads=4, mlp_dim=128, patch=7):
        super().__init__()
        add_patch_tokens(self, dim, patch)
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.blocks(torch.cat([cls, x], dim=1) + self.pos_embed)
        return self.head(self.norm(x)[:, 0])


class FmnistMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(784, 512)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(512, 256)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.relu1(self.fc1(self.flatten(x)))
        return self.fc3(self.relu2(self.fc2(x)))


class SqueezeExcite(nn.Module):
    """EfficientNet's squeeze-and-excitation: channel gates from the pooled input."""

    def __init__(self, ch, squeeze):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(ch, squeeze, 1)
        self.act = nn.SiLU()
        self.expand = nn.Conv2d(squeeze, ch, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand -> BN -> ReLU6 -> depthwise 3x3 -> BN ->
    ReLU6 -> 1x1 project -> BN, plus the input when the shape allows. With
    `act=nn.SiLU, act_name="act", se=True` it is EfficientNet's MBConv
    (squeeze-excite after the depthwise conv)."""
    __constants__ = ["use_res"]  # a constant, so the residual branch folds in TorchScript

    def __init__(self, cin, cout, stride, expand, act=nn.ReLU6, act_name="relu", se=False):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers += [("expand", nn.Conv2d(cin, hidden, 1, bias=False)),
                       ("bn1", nn.BatchNorm2d(hidden)), (act_name + "1", act())]
        layers += [("dw", nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)),
                   ("bn2", nn.BatchNorm2d(hidden)), (act_name + "2", act())]
        if se:
            layers.append(("se", SqueezeExcite(hidden, max(4, cin // 4))))
        layers += [("project", nn.Conv2d(hidden, cout, 1, bias=False)),
                   ("bn3", nn.BatchNorm2d(cout))]
        self.conv = nn.Sequential(OrderedDict(layers))

    def forward(self, x):
        if self.use_res:
            return x + self.conv(x)
        return self.conv(x)


class MBConv(InvertedResidual):
    """EfficientNet's block: 1x1 expand -> BN -> SiLU -> depthwise 3x3 -> BN ->
    SiLU -> squeeze-excite -> 1x1 project -> BN, plus the input when the shape allows."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__(cin, cout, stride, expand, nn.SiLU, "act", se=True)


class InvertedNet(nn.Module):
    """Stem (3x3 stride 2) -> `block`s as `cfg` (cin, cout, stride, expand)
    says -> head (1x1 to 128, pool) -> fc, for 28x28 inputs."""

    def __init__(self, block, cfg, act, act_name):
        super().__init__()
        self.stem = nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(1, 16, 3, stride=2, padding=1, bias=False)),  # 28 -> 14
            ("bn", nn.BatchNorm2d(16)), (act_name, act())]))
        self.blocks = nn.Sequential(*[block(*c) for c in cfg])
        self.head = nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(cfg[-1][1], 128, 1, bias=False)),
            ("bn", nn.BatchNorm2d(128)), (act_name, act()),
            ("pool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten())]))
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.head(self.blocks(self.stem(x))))


class FmnistMobileNetV2(InvertedNet):
    """A MobileNetV2-style net for 28x28: inverted residuals, depthwise 3x3, ReLU6."""

    def __init__(self):
        super().__init__(InvertedResidual, [(16, 16, 1, 1), (16, 24, 2, 4), (24, 24, 1, 4),
                                            (24, 32, 1, 4), (32, 32, 1, 4), (32, 64, 1, 4)],
                         nn.ReLU6, "relu")  # 14x14, then 7x7


class FmnistEfficientNet(InvertedNet):
    """An EfficientNet-style net for 28x28: MBConv blocks with SiLU and squeeze-excite."""

    def __init__(self):
        super().__init__(MBConv, [(16, 16, 1, 1), (16, 24, 2, 4), (24, 24, 1, 4), (24, 40, 1, 4),
                                  (40, 40, 1, 4)], nn.SiLU, "act")


# arch -> (constructor, learning rate, {recipe: (training images, epochs)})
FULL = 60000
ARCHS = {
    "cnn": (lambda: FmnistCNN(batch_norm=False), 1e-3, {"full": (FULL, 3), "test": (30000, 2)}),
    "cnn_bn": (lambda: FmnistCNN(batch_norm=True), 1e-3, {"full": (FULL, 2), "test": (15000, 2)}),
    "resnet": (FmnistResNet, 3e-3, {"full": (FULL, 3), "test": (15000, 2)}),
    "vit": (FmnistViT, 1e-3, {"full": (FULL, 3), "test": (15000, 3)}),
    "vit_qkv": (FmnistViTQkv, 1e-3, {"full": (FULL, 3), "test": (15000, 3)}),
    "mlp": (FmnistMLP, 1e-3, {"full": (FULL, 3), "test": (15000, 2)}),
    "mbv2": (FmnistMobileNetV2, 3e-3, {"full": (FULL, 1), "test": (20000, 1)}),
    "effnet": (FmnistEfficientNet, 3e-3, {"full": (FULL, 1), "test": (20000, 1)}),
}


# --------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], batch):
        correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    return correct / x.shape[0]


def write_json(path, obj):
    def writer(p):
        with open(p, "w") as f:
            f.write(json.dumps(obj, indent=2) + "\n")
    atomic_write(path, writer)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Train a Fashion-MNIST model, save TorchScript.")
    ap.add_argument("--arch", required=True, choices=sorted(ARCHS))
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--recipe", choices=["test", "full"], default="full",
                    help="training images and epochs per arch (see the docstring)")
    ap.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    ap.add_argument("--train-samples", type=int, default=None,
                    help="train on this many images (a seeded subset); default: the recipe's")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=fmnist_data.DATA_DIR)
    args = ap.parse_args(argv)

    ctor, default_lr, recipes = ARCHS[args.arch]
    default_samples, default_epochs = recipes[args.recipe]
    epochs = args.epochs if args.epochs is not None else default_epochs
    samples = args.train_samples if args.train_samples is not None else default_samples
    lr = args.lr if args.lr is not None else default_lr

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.makedirs(args.out, exist_ok=True)

    tx, ty = fmnist_data.load_split("train", args.data_dir)
    if samples < tx.shape[0]:  # a seeded subset, the same for every arch
        keep = torch.randperm(tx.shape[0], generator=torch.Generator().manual_seed(1234))
        keep = keep[:samples].sort().values.numpy()
        tx, ty = tx[keep], ty[keep]
    vx, vy = fmnist_data.load_split("t10k", args.data_dir)
    train_x = torch.from_numpy(fmnist_data.normalize(tx))
    train_y = torch.from_numpy(ty)
    test_x = torch.from_numpy(fmnist_data.normalize(vx))
    test_y = torch.from_numpy(vy)

    model = ctor()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps_per_epoch = (train_x.shape[0] + args.batch - 1) // args.batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * steps_per_epoch,
                                                pct_start=0.15)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)

    t0 = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        te = time.perf_counter()
        perm = torch.randperm(train_x.shape[0], generator=gen)
        total_loss = 0.0
        for i in range(0, train_x.shape[0], args.batch):
            idx = perm[i:i + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
            sched.step()
            total_loss += float(loss) * idx.shape[0]
        print("[%s] epoch %d/%d loss %.4f (%.1fs)" % (args.arch, epoch + 1, epochs,
                                                      total_loss / train_x.shape[0],
                                                      time.perf_counter() - te), flush=True)
    train_time = time.perf_counter() - t0

    model.eval()
    te = time.perf_counter()
    top1 = evaluate(model, test_x, test_y)
    eval_time = time.perf_counter() - te

    scripted = torch.jit.script(model)
    # The scripted module must agree with eager on the test set.
    top1_scripted = evaluate(scripted, test_x, test_y)

    n_params = sum(p.numel() for p in model.parameters())
    n_lin_conv = sum(m.weight.numel() for m in model.modules()
                     if isinstance(m, (nn.Linear, nn.Conv2d)))
    pt_path = os.path.join(args.out, args.arch + ".pt")
    json_path = os.path.join(args.out, args.arch + ".json")
    info = OrderedDict([
        ("arch", args.arch),
        ("fp32_top1", round(top1, 6)),
        ("fp32_top1_scripted", round(top1_scripted, 6)),
        ("num_test_samples", int(test_x.shape[0])),
        ("train_time_s", round(train_time, 2)),
        ("eval_time_s", round(eval_time, 2)),
        ("recipe", args.recipe),
        ("train_samples", int(train_x.shape[0])),
        ("epochs", epochs),
        ("batch_size", args.batch),
        ("lr", lr),
        ("optimizer", "Adam+OneCycleLR"),
        ("seed", args.seed),
        ("threads", args.threads),
        ("num_params", int(n_params)),
        ("linear_conv_weight_params", int(n_lin_conv)),
        ("input_shape", [1, 1, 28, 28]),
        ("input_normalization", {"mean": fmnist_data.MEAN, "std": fmnist_data.STD}),
        ("torch_version", torch.__version__),
        ("model_file", os.path.basename(pt_path)),
    ])
    write_json(json_path, info)
    atomic_write(pt_path, lambda p: torch.jit.save(scripted, p))
    info["model_size_bytes"] = os.path.getsize(pt_path)
    write_json(json_path, info)
    print("[%s] fp32 top-1 %.4f, train %.1fs, %d params (%.1f%% in Linear/Conv weights) -> %s"
          % (args.arch, top1, train_time, n_params, 100.0 * n_lin_conv / n_params, pt_path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
