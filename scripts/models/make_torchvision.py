#!/usr/bin/python3
"""Exports a torchvision model (random weights) as TorchScript.

Usage:
  make_torchvision.py --arch NAME --out FILE.pt [--input-size 224] [--npz N]
  make_torchvision.py --list
  make_torchvision.py --npz-only --npz N --out DIR/any.pt [--input-size 224]

The model is built with torch.manual_seed(0) and weights=None (nothing is
downloaded), put in eval mode and compiled with torch.jit.script; if scripting
fails, torch.jit.trace on a [1,3,S,S] input is used instead and a NOTE says so
(a traced model has the control flow of that one input baked in).

--npz N also writes DIR/imagenet_rand_n<N>_<S>.npz next to FILE (unless it
exists): x float32 [N,3,S,S] ~ N(0,1) and y int64 [N] in [0,1000), both from a
fixed seed -- a stand-in calibration/test set of ImageNet shape.  Accuracy on
it means nothing (random weights, random labels); use it for shapes, timing
and fp32-vs-quantized agreement.

Note: scripted googlenet returns GoogLeNetOutputs(logits, aux2=None, aux1=None)
(a tuple), not a Tensor; take element 0.
"""

import argparse
import os
import sys
import time


# TorchScript serializes some class attributes in set order, which depends on
# Python's string hashing; a fixed PYTHONHASHSEED makes the saved file
# byte-for-byte reproducible, so the script re-execs itself once with it.
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from atomic_io import atomic_write  # noqa: E402  (sibling module)

SUPPORTED = [
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "shufflenet_v2_x1_0",
    "squeezenet1_1", "efficientnet_b0", "regnet_x_400mf", "densenet121", "googlenet",
    "mnasnet1_0", "vit_b_16",
]
# Extra constructor arguments per model.
KWARGS = {
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}
NPZ_SEED = 1234


def build(arch):
    if not hasattr(torchvision.models, arch):
        raise SystemExit("make_torchvision: unknown torchvision model '%s'" % arch)
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(weights=None, **KWARGS.get(arch, {}))
    return recalibrate_bn(random_zero_heads(model)).eval()


def random_zero_heads(model):
    """torchvision initializes some classifier heads to zero (ViT's): every
    output would then be 0 for every input, and nothing downstream could be
    compared. Such a Linear gets the default random initialization."""
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and not m.weight.detach().any():
            m.reset_parameters()
    return model


def recalibrate_bn(model, batches=4, size=224):
    """Sets BatchNorm running statistics from random inputs (cumulative
    average), so that a random-weight network has activations of a sane scale
    at every depth, as a trained one does, instead of vanishing or exploding.
    Without it, static quantization of deep random nets measures nothing."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return model
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(8, 3, size, size, generator=g))
    return model


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    raise TypeError("model output has no tensor: %r" % type(out))


def write_npz(out_file, n, size):
    d = os.path.dirname(os.path.abspath(out_file))
    path = os.path.join(d, "imagenet_rand_n%d_%d.npz" % (n, size))
    if os.path.exists(path):
        print("make_torchvision: %s exists, kept" % path)
        return path
    rng = np.random.RandomState(NPZ_SEED)
    x = rng.standard_normal((n, 3, size, size)).astype(np.float32)
    y = rng.randint(0, 1000, size=n).astype(np.int64)

    def writer(p):
        with open(p, "wb") as f:
            np.savez(f, x=x, y=y)
    atomic_write(path, writer)
    print("make_torchvision: wrote %s (x %s float32, y %s int64)" % (path, list(x.shape), list(y.shape)))
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description="Export a random-weight torchvision model as TorchScript.")
    ap.add_argument("--arch", help="torchvision model name, e.g. resnet18")
    ap.add_argument("--out", help="output .pt file")
    ap.add_argument("--input-size", type=int, default=224)
    ap.add_argument("--npz", type=int, default=0, metavar="N",
                    help="also write imagenet_rand_n<N>_<S>.npz next to --out")
    ap.add_argument("--npz-only", action="store_true", help="only write the npz")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", choices=["auto", "script", "trace"], default="auto",
                    help="auto: script, falling back to trace if scripting fails (default)")
    ap.add_argument("--no-check", action="store_true", help="skip the eager-vs-scripted check")
    ap.add_argument("--list", action="store_true", help="list the tested model names")
    args = ap.parse_args(argv)

    if args.list:
        print("\n".join(SUPPORTED))
        return 0
    if not args.out:
        ap.error("--out is required")
    torch.set_num_threads(args.threads)

    if args.npz_only:
        if args.npz <= 0:
            ap.error("--npz-only needs --npz N")
        write_npz(args.out, args.npz, args.input_size)
        return 0
    if not args.arch:
        ap.error("--arch is required")

    t0 = time.perf_counter()
    model = build(args.arch)
    example = torch.randn(1, 3, args.input_size, args.input_size,
                          generator=torch.Generator().manual_seed(NPZ_SEED))
    exported = None
    method = "script"
    if args.method in ("auto", "script"):
        try:
            exported = torch.jit.script(model)
        except Exception as e:  # noqa: BLE001 -- any scripting failure -> trace
            if args.method == "script":
                raise
            print("make_torchvision: NOTE: torch.jit.script failed for %s (%s: %s); "
                  "falling back to torch.jit.trace with a [1,3,%d,%d] input"
                  % (args.arch, type(e).__name__, str(e).splitlines()[0] if str(e) else "",
                     args.input_size, args.input_size), file=sys.stderr)
    if exported is None:
        if args.method == "trace":
            print("make_torchvision: NOTE: --method trace: tracing %s with a [1,3,%d,%d] input"
                  % (args.arch, args.input_size, args.input_size), file=sys.stderr)
        with torch.no_grad():
            exported = torch.jit.trace(model, example)
        method = "trace"

    if not args.no_check:
        with torch.no_grad():
            ref = first_tensor(model(example))
            raw = exported(example)
            got = first_tensor(raw)
        if not isinstance(raw, torch.Tensor):
            print("make_torchvision: NOTE: %s returns %s, not a Tensor; the logits are element 0"
                  % (args.arch, type(raw).__name__), file=sys.stderr)
        diff = float((ref - got).abs().max())
        if diff > 1e-3 * max(1.0, float(ref.abs().max())):
            raise SystemExit("make_torchvision: %s: exported model differs from eager (max |diff| %g)"
                             % (args.arch, diff))

    atomic_write(args.out, lambda p: torch.jit.save(exported, p))
    n_params = sum(p.numel() for p in model.parameters())
    print("make_torchvision: %s -> %s (%s, %.1fM params, %.1f MB, %.1fs)"
          % (args.arch, args.out, method, n_params / 1e6, os.path.getsize(args.out) / 1e6,
             time.perf_counter() - t0))
    if args.npz > 0:
        write_npz(args.out, args.npz, args.input_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
