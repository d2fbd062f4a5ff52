#!/usr/bin/python3
"""Are this CPU's quantized int8 convolutions exact? (plain PyTorch)

Usage: int8_kernel_exactness.py

For each engine PyTorch has here (onednn, qnnpack, fbgemm) and for 8-bit and
7-bit (reduce_range) uint8 activations: a quantized 1x1, 3x3 and depthwise
3x3 convolution against the same quantized math computed in float. Prints
the RMS error in output steps: 0.29 (1/sqrt(12)) is the output rounding
alone; more means the kernel lost precision. Without VNNI, onednn and fbgemm
add pairs of uint8 x int8 products in int16 with saturation (vpmaddubsw),
which 7-bit activations avoid: see backend_kwargs.activation_range in
docs/spec.md.
"""
import torch


def rms_steps(engine, act_levels, groups, cin, cout, k):
    torch.backends.quantized.engine = engine
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, cin, 14, 14, generator=g) * 4.0
    w = torch.randn(cout, cin // groups, k, k, generator=g)
    xq = torch.quantize_per_tensor(x, 4.0 / act_levels, 0, torch.quint8)
    wq = torch.quantize_per_channel(w, w.abs().amax((1, 2, 3)) / 127,
                                    torch.zeros(cout, dtype=torch.long), 0, torch.qint8)
    ref = torch.nn.functional.conv2d(xq.dequantize(), wq.dequantize(), None, 1, k // 2, 1, groups)
    step = ref.abs().max().item() / 127
    conv = torch.nn.quantized.Conv2d(cin, cout, k, padding=k // 2, groups=groups)
    conv.set_weight_bias(wq, None)
    conv.scale, conv.zero_point = step, 128
    return ((conv(xq).dequantize() - ref).pow(2).mean().sqrt() / step).item()


def main():
    engines = [e for e in ("onednn", "qnnpack", "fbgemm")
               if e in torch.backends.quantized.supported_engines]
    print("%-8s %-11s %8s %8s %8s" % ("engine", "activations", "1x1", "3x3", "dw 3x3"))
    for e in engines:
        for bits, levels in (("8-bit", 255), ("7-bit", 127)):
            r = [rms_steps(e, levels, 1, 64, 64, 1), rms_steps(e, levels, 1, 32, 32, 3),
                 rms_steps(e, levels, 64, 64, 64, 3)]
            print("%-8s %-11s %8.2f %8.2f %8.2f" % (e, bits, *r))


if __name__ == "__main__":
    main()
