#!/usr/bin/env python3
"""PyTorch's bfloat16 convolutions of the op table's rows, NCHW against channels_last.

Times, with cudnn.benchmark on, each row's forward and backward (grad_input and
grad_weight) replayed from a CUDA graph (torch_ops.py's Timer: warm-up, median
of timed batches), in both memory formats, and prints cuDNN's version: what
layout PyTorch's own fastest kernels need, next to Tandem's NCHW graphs
(bench/results/README.md, tenth run). GPU only.

    python3 bench/ops/torch_conv_layouts.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ops  # noqa: E402  (its Timer, with its default timing flags)

ROWS = {  # name: (batch, in channels, height = width, out channels, bias)
    "r50.layer1.conv2": (32, 64, 56, 64, False),
    "vgg.conv3_2": (32, 256, 56, 256, True),
}


def main():
    if not torch.cuda.is_available():
        raise SystemExit("torch_conv_layouts: no CUDA device")
    torch.backends.cudnn.benchmark = True
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), flush=True)
    timer = torch_ops.Timer("cuda", torch_ops.parse_args([]))
    graph_ms = lambda fn: timer.measure(fn)["graph_ms"]  # noqa: E731
    for name, (n, c, hw, o, bias) in ROWS.items():
        for layout in ("nchw", "channels_last"):
            fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            x = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt)
            w = torch.randn(o, c, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=fmt)
            b = torch.randn(o, device="cuda", dtype=torch.bfloat16) if bias else None
            forward = lambda: torch.nn.functional.conv2d(x, w, b, 1, 1)  # noqa: E731
            dy = torch.randn_like(forward())
            backward = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
            print(f"{name} {layout}: forward {graph_ms(forward):.4f} ms, backward {graph_ms(backward):.4f} ms",
                  flush=True)


if __name__ == "__main__":
    main()
