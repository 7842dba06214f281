#!/usr/bin/env python3
"""PyTorch's bfloat16 convolutions of the op table's rows, NCHW against channels_last.

Times, with cudnn.benchmark on, each row's forward and backward (grad_input and
grad_weight) replayed 50 times from one CUDA graph, in both memory formats, and
prints cuDNN's version: what layout PyTorch's own fastest kernels need, next to
Tandem's NCHW graphs (bench/results/README.md, tenth run). GPU only.

    python3 bench/ops/torch_conv_layouts.py
"""
import time

import torch

ROWS = {  # name: (batch, in channels, height = width, out channels, bias)
    "r50.layer1.conv2": (32, 64, 56, 64, False),
    "vgg.conv3_2": (32, 256, 56, 256, True),
}


def graph_ms(step, n=50):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            step()
    graph.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def main():
    if not torch.cuda.is_available():
        raise SystemExit("torch_conv_layouts: no CUDA device")
    torch.backends.cudnn.benchmark = True
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), flush=True)
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
