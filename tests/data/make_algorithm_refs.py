#!/usr/bin/python3
"""Independent references for tao-quant's weight algorithms (tests/torch/test_algorithms.cpp).

Computed in float64 with PyTorch from the papers' definitions, not from
tao-quant's code:
  - GPTQ (Frantar et al. 2022, Algorithm 1) in its plain, unblocked form:
    H = X^T X, dampened by damp * mean(diag H); the inverse taken with
    torch.linalg.inv (tao-quant uses Cholesky inverses and lazy blocks);
    each column rounded on the fixed per-channel / per-group grid of the
    nearest rounding, its error spread with the upper Cholesky factor of
    H^-1.
  - The Hessian of a grouped, strided convolution from F.unfold.
  - Empirical bias correction (Nagel et al. 2019, sec. 4.2): the bias minus
    the mean over samples and positions of conv(x, Wq) - conv(x, W), with
    the whole batch (tao-quant uses the mean input); in static mode with the
    input quantized too: the mean of conv(Q(x), Wq) - conv(x, W).
  - Cross-layer equalization (Nagel et al. 2019, sec. 4.1), one sweep over
    conv -> ReLU -> depthwise conv -> ReLU -> conv: s_i = sqrt(r1_i / r2_i)
    with r1 the first layer's output-channel ranges and r2 the second's
    input-channel ranges; the model goes to OUT.json's folder as cle.pt.
  - SmoothQuant (Xiao et al. 2022, eq. 4): s_j = max|X_j|^a / max|W_j|^(1-a)
    for a LayerNorm -> two Linears (with outlier channels) and a
    Linear -> ReLU -> Linear pair, the scales folded into the LayerNorm's
    affine and the first Linear; the model goes there as smooth.pt.
  - AWQ (Lin et al. 2023, sec. 3.2): the grid search over a of
    s = mean|X|^a / sqrt(max * min), with the loss ||X (Q(W s)/s - W)^T||^2
    on the LayerNorm's output, int4 symmetric per channel.

Usage: make_algorithm_refs.py OUT.json   (deterministic: seeded)
"""
import json
import os
import sys

import torch
import torch.nn.functional as F


def grid_int(w, scales, qmin, qmax, group=0):
    """Round float64 values w [rows, K] on a symmetric integer grid in float32,
    as tao-quant does: v = w / s (float32), clamp, round half to even, times s."""
    s = scales
    if group:
        s = scales.repeat_interleave(group, dim=1)[:, : w.shape[1]]
    v = (w.float() / s).clamp(qmin, qmax)
    return (torch.round(v) * s).double()


def sym_scales(w, qmax, group=0):
    w32 = w.float()
    if group:
        rows, K = w32.shape
        g = (K + group - 1) // group
        pad = torch.zeros(rows, g * group, dtype=torch.float32)
        pad[:, :K] = w32
        amax = pad.view(rows, g, group).abs().amax(2)
    else:
        amax = w32.abs().amax(1, keepdim=True)
    return torch.where(amax > 0, amax / qmax, torch.ones_like(amax))


def gptq_reference(w, x, qmin, qmax, damp=0.01, group=0, act_order=False):
    w = w.double().clone()
    scales = sym_scales(w, qmax, group)
    h = x.double().t() @ x.double()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    h += damp * torch.mean(torch.diag(h)) * torch.eye(h.shape[0], dtype=torch.float64)
    K = w.shape[1]
    perm = torch.arange(K)
    if act_order:
        perm = torch.sort(torch.diag(h), descending=True, stable=True).indices
    hp = h[perm][:, perm]
    u = torch.linalg.cholesky(torch.linalg.inv(hp), upper=True)
    wp = w[:, perm].clone()
    q = torch.zeros_like(wp)
    for i in range(K):
        col = perm[i].item()
        s = scales[:, col // group] if group else scales[:, 0]
        qi = (torch.round((wp[:, i].float() / s).clamp(qmin, qmax)) * s).double()
        q[:, i] = qi
        err = (wp[:, i] - qi) / u[i, i]
        wp[:, i:] -= err[:, None] * u[i, i:][None, :]
    out = torch.zeros_like(q)
    out[:, perm] = q
    return out, scales


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.relu1 = torch.nn.ReLU()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.relu2 = torch.nn.ReLU()
        self.conv3 = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.conv3(self.relu2(self.dw(self.relu1(self.conv1(x)))))


def equalize_pair(w1, b1, w2, depthwise):
    r1 = w1.reshape(w1.shape[0], -1).abs().amax(1)
    r2 = w2.reshape(w2.shape[0], -1).abs().amax(1) if depthwise else \
        w2.transpose(0, 1).reshape(w2.shape[1], -1).abs().amax(1)
    s = torch.sqrt(r1 / r2)
    w1 = w1 / s.view(-1, 1, 1, 1)
    b1 = b1 / s
    w2 = w2 * (s.view(-1, 1, 1, 1) if depthwise else s.view(1, -1, 1, 1))
    return w1, b1, w2


def equalization_ref(model_path):
    torch.manual_seed(1)
    m = Chain().eval()
    with torch.no_grad():
        for conv in (m.conv1, m.dw, m.conv3):  # uneven channels
            conv.weight.mul_(torch.exp(torch.randn(conv.weight.shape[0], 1, 1, 1) * 1.5))
    torch.jit.script(m).save(model_path)
    w1, b1 = m.conv1.weight.double(), m.conv1.bias.double()
    w2, b2, w3 = m.dw.weight.double(), m.dw.bias.double(), m.conv3.weight.double()
    w1, b1, w2 = equalize_pair(w1, b1, w2, True)   # conv1 -> dw
    w2, b2, w3 = equalize_pair(w2, b2, w3, False)  # dw -> conv3
    return {"conv1.weight": w1.tolist(), "conv1.bias": b1.tolist(), "dw.weight": w2.tolist(),
            "dw.bias": b2.tolist(), "conv3.weight": w3.tolist()}


class Smooth(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.q = torch.nn.Linear(16, 8)
        self.k = torch.nn.Linear(16, 8)
        self.a = torch.nn.Linear(8, 12)
        self.relu = torch.nn.ReLU()
        self.b = torch.nn.Linear(12, 6)

    def forward(self, x):
        y = self.norm(x)
        return self.b(self.relu(self.a(self.q(y) + self.k(y))))


def smoothing_ref(model_path):
    torch.manual_seed(2)
    m = Smooth().eval()
    with torch.no_grad():
        m.norm.weight.copy_(1 + 0.1 * torch.randn(16))
        m.norm.bias.copy_(0.1 * torch.randn(16))
        m.norm.weight[[3, 11]] *= 30  # outlier channels
        m.a.weight.mul_(torch.exp(torch.randn(12, 1)))
    torch.jit.script(m).save(model_path)
    x = torch.randn(32, 5, 16)
    md = {k: v.double() for k, v in m.state_dict().items()}
    y = F.layer_norm(x.double(), (16,), md["norm.weight"], md["norm.bias"])
    h = F.linear(y, md["q.weight"], md["q.bias"]) + F.linear(y, md["k.weight"], md["k.bias"])
    z = torch.relu(F.linear(h, md["a.weight"], md["a.bias"]))
    alpha = 0.5
    x1, x2 = y.reshape(-1, 16), z.reshape(-1, 12)
    w1 = torch.maximum(md["q.weight"].abs().amax(0), md["k.weight"].abs().amax(0))
    s1 = x1.abs().amax(0).pow(alpha) / w1.pow(1 - alpha)
    s2 = x2.abs().amax(0).pow(alpha) / md["b.weight"].abs().amax(0).pow(1 - alpha)
    sq = {"norm.weight": md["norm.weight"] / s1, "norm.bias": md["norm.bias"] / s1,
          "q.weight": md["q.weight"] * s1, "k.weight": md["k.weight"] * s1,
          "a.weight": md["a.weight"] / s2[:, None], "a.bias": md["a.bias"] / s2,
          "b.weight": md["b.weight"] * s2}
    # AWQ on the LayerNorm group, int4 symmetric per channel.
    mean = x1.abs().mean(0)
    losses, best = [], None
    for i in range(20):
        a = i / 20
        s = mean.pow(a)
        s = s / (s.max() * s.min()).sqrt()
        loss = 0.0
        for w in (md["q.weight"], md["k.weight"]):
            ws = w * s
            q = grid_int(ws, sym_scales(ws, 7), -8, 7)
            loss += float(((q / s - w) @ x1.t()).pow(2).sum())
        losses.append(loss)
        if best is None or loss < losses[best]:
            best = i
    return {"x": x.tolist(), "alpha": alpha,
            "smoothquant": {k: v.tolist() for k, v in sq.items()},
            "awq": {"losses": losses, "alpha": best / 20}}


def sequential_ref():
    """Sequential GPTQ's target for a grouped, strided, padded conv whose
    input in the partly rounded model (xq) differs from the float model's
    (x): V = argmin ||W X - V Xq||^2 + lam ||V - W||^2 per group, with X, Xq
    the F.unfold columns and lam = damp * mean(diag(Xq Xq^T)), solved as one
    least-squares problem on the stacked system [Xq^T; sqrt(lam) I] V^T =
    [(W X)^T; sqrt(lam) W^T] (torch.linalg.lstsq), not from the closed form
    the C++ code uses. Also the statistics: Xq Xq^T and W (X - Xq) Xq^T."""
    torch.manual_seed(1)
    groups, kh, kw, damp = 2, 3, 2, 0.01
    x = torch.randn(5, 4, 9, 7, dtype=torch.float64)
    xq = x + 0.1 * torch.randn_like(x) + 0.05  # the incoming error, with a mean
    w = torch.randn(6, 4 // groups, kh, kw, dtype=torch.float64) * 0.3
    K = 4 // groups * kh * kw

    def cols(t):
        c = F.unfold(t, (kh, kw), dilation=1, padding=(1, 0), stride=(2, 1))
        return c.view(t.shape[0], groups, K, -1).permute(1, 2, 0, 3).reshape(groups, K, -1)
    cx, cq = cols(x), cols(xq)
    wg = w.reshape(groups, 6 // groups, K)
    h = cq @ cq.transpose(1, 2)
    r = (wg @ (cx - cq)) @ cq.transpose(1, 2)
    target = []
    for g in range(groups):
        lam = damp * float(h[g].diagonal().mean())
        a = torch.cat([cq[g].t(), lam ** 0.5 * torch.eye(K, dtype=torch.float64)])
        b = torch.cat([(wg[g] @ cx[g]).t(), lam ** 0.5 * wg[g].t()])
        target.append(torch.linalg.lstsq(a, b).solution.t())
    return {"x": x.tolist(), "xq": xq.tolist(), "w": w.tolist(), "groups": groups,
            "kernel": [kh, kw], "stride": [2, 1], "padding": [1, 0], "dilation": [1, 1],
            "damp": damp, "h": h.tolist(), "r": r.tolist(),
            "target": torch.stack(target).reshape(w.shape).tolist()}


def main():
    torch.manual_seed(0)
    refs = {"gptq": [], "hessian": [], "bias_correction": []}
    # GPTQ on a small Linear with correlated inputs and an outlier column.
    rows, K, n = 8, 48, 512
    w = torch.randn(rows, K, dtype=torch.float64) * 0.1
    w[:, 5] *= 6
    mix = torch.randn(K, K, dtype=torch.float64) * 0.3 + torch.eye(K, dtype=torch.float64)
    x = torch.randn(n, K, dtype=torch.float64) @ mix
    for name, qmin, qmax, group, act_order in [
        ("int4_per_channel", -8, 7, 0, False),
        ("int8_per_channel", -127, 127, 0, False),
        ("int4_per_group16", -8, 7, 16, False),
        ("int4_per_channel_act_order", -8, 7, 0, True),
    ]:
        q, scales = gptq_reference(w, x, qmin, qmax, group=group, act_order=act_order)
        near = grid_int(w, scales, qmin, qmax, group)
        err = lambda m: float(((m - w) @ x.t()).pow(2).sum())
        refs["gptq"].append({"name": name, "group_size": group, "act_order": act_order,
                             "bits": 4 if qmax == 7 else 8, "w": w.tolist(), "x": x.tolist(),
                             "q": q.tolist(), "output_err_gptq": err(q),
                             "output_err_nearest": err(near)})
    # The Hessian of a grouped, strided, padded conv2d from F.unfold.
    xc = torch.randn(3, 4, 9, 7, dtype=torch.float64)
    groups, kh, kw = 2, 3, 2
    cols = F.unfold(xc, (kh, kw), dilation=1, padding=(1, 0), stride=(2, 1))  # [N, C*kh*kw, L]
    Kc = 4 // groups * kh * kw
    cols = cols.view(3, groups, Kc, -1).permute(1, 2, 0, 3).reshape(groups, Kc, -1)
    h = cols @ cols.transpose(1, 2)
    refs["hessian"].append({"x": xc.tolist(), "groups": groups, "kernel": [kh, kw],
                            "stride": [2, 1], "padding": [1, 0], "dilation": [1, 1],
                            "h": h.tolist()})
    # Bias correction on convs and a Linear over [N, T, C] inputs.
    cases = [("conv_pad1", (6, 3, 3, 3), (16, 3, 8, 8), dict(padding=1), 1),
             ("conv_grouped_strided", (6, 1, 3, 3), (16, 3, 9, 9), dict(stride=2, groups=3), 3),
             ("linear_tokens", (5, 12), (16, 4, 12), {}, 1)]
    for name, wshape, xshape, kw_, _ in cases:
        wt = torch.randn(*wshape, dtype=torch.float64) * 0.2
        b = torch.randn(wshape[0], dtype=torch.float64)
        xb = torch.randn(*xshape, dtype=torch.float64) + 0.5  # nonzero mean
        s = sym_scales(wt.reshape(wshape[0], -1), 7)
        wq = grid_int(wt.reshape(wshape[0], -1), s, -8, 7).reshape(wshape)
        if len(wshape) == 4:
            y, yq = F.conv2d(xb, wt, None, **kw_), F.conv2d(xb, wq, None, **kw_)
            dims = (0, 2, 3)
        else:
            y, yq = F.linear(xb, wt), F.linear(xb, wq)
            dims = (0, 1)
        corrected = b - (yq - y).mean(dim=dims)
        # Static mode: the input is quantized too (uint8, min-max affine
        # qparams over the batch): b - mean(op(Q(x); Wq) - op(x; W)).
        lo, hi = min(xb.min().item(), 0.0), max(xb.max().item(), 0.0)
        in_scale = (hi - lo) / 255.0
        in_zp = int(min(255, max(0, round(-lo / in_scale))))
        xq = (torch.clamp(torch.round(xb / in_scale) + in_zp, 0, 255) - in_zp) * in_scale
        if len(wshape) == 4:
            yqq = F.conv2d(xq, wq, None, **kw_)
        else:
            yqq = F.linear(xq, wq)
        corrected_static = b - (yqq - y).mean(dim=dims)
        refs["bias_correction"].append({"name": name, "w": wt.tolist(), "wq": wq.tolist(),
                                        "x": xb.tolist(), "b": b.tolist(),
                                        "stride": kw_.get("stride", 1),
                                        "padding": kw_.get("padding", 0),
                                        "groups": kw_.get("groups", 1),
                                        "corrected": corrected.tolist(),
                                        "input_scale": in_scale, "input_zero_point": in_zp,
                                        "corrected_static": corrected_static.tolist()})
    refs["sequential"] = sequential_ref()
    refs["equalization"] = equalization_ref(os.path.join(os.path.dirname(sys.argv[1]), "cle.pt"))
    refs["smoothing"] = smoothing_ref(os.path.join(os.path.dirname(sys.argv[1]), "smooth.pt"))
    with open(sys.argv[1], "w") as f:
        json.dump(refs, f)


if __name__ == "__main__":
    main()
