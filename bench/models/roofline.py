"""How far a training step is from the GPU's limits: FLOPs and the bytes a fused runtime must still move.

    /usr/bin/python3 bench/models/roofline.py --models resnet50,resnet18,densenet121 [--out roofline.json]

Runs on the CPU (one image through the model with hooks, scaled to the zoo's full batch). Per training step:
- FLOPs of the convolutions and linear layers: forward, grad input and grad weight (3x the forward);
- bytes: each convolution or linear layer reads its input and weight and writes its output in the forward, and
  its backward reads grad output, input and weight and writes grad input and grad weight; each batch norm makes
  3 passes over its activation forward (statistics; normalize with the activation and any residual add fused)
  and 5 backward (gradient sums over dy and x; grad input); the optimizer reads weight, gradient and momentum and
  writes weight and momentum. Everything else (activations, residual adds, pooling) is assumed fused into those;
- the limit: per layer the larger of FLOPs / matrix peak and bytes / bandwidth, summed.
This is the floor of a runtime that, like Inductor, keeps convolutions and GEMMs as library calls and fuses the
rest into them or into the normalization passes. Ceilings (--tflops, --tbps): the H200's dense TF32 rate by the
datasheet and the device-to-device copy bandwidth measured on the lent H200 (4.3 TB/s).
"""

import argparse
import json
import os
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from zoo import catalog  # noqa: E402


def layer_costs(model, image, batch, dtype_bytes=4):
    """[(kind, flops, bytes)] per layer for one training step of `batch` images."""
    costs = []

    def conv_or_linear(mod, inputs, out):
        x = inputs[0]
        w = mod.weight
        if isinstance(mod, nn.Linear):
            flops = 2 * out.numel() * mod.in_features
        else:
            flops = 2 * out.numel() * (w.shape[1] * w[0, 0].numel())
        act = (x.numel() + out.numel()) * batch * dtype_bytes
        weight = w.numel() * dtype_bytes
        # forward: x, w -> y; backward: dy, w -> dx and dy, x -> dw
        moved = (act + weight) + (act + weight) + (act + weight)
        costs.append(("matmul", 3 * flops * batch, moved))

    def norm(mod, inputs, out):
        costs.append(("norm", 0, 8 * out.numel() * batch * dtype_bytes))

    for mod in model.modules():
        if isinstance(mod, (nn.Conv2d, nn.Conv3d, nn.Linear)):
            mod.register_forward_hook(conv_or_linear)
        elif isinstance(mod, (nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)):
            mod.register_forward_hook(norm)
    with torch.no_grad():
        model(image)
    params = sum(p.numel() for p in model.parameters())
    costs.append(("optimizer", 0, 5 * params * dtype_bytes))
    return costs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,resnet18,densenet121")
    parser.add_argument("--tflops", type=float, default=495.0, help="matrix peak, TFLOP/s (TF32 dense)")
    parser.add_argument("--tbps", type=float, default=4.3, help="memory bandwidth, TB/s")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        model, _, make_batch = catalog.entry(name).builder("full")
        model.eval()
        x = make_batch(torch.Generator().manual_seed(0))[0]
        costs = layer_costs(model, x[:1], x.shape[0])
        flops = sum(c[1] for c in costs)
        moved = sum(c[2] for c in costs)
        limit = sum(max(f / (args.tflops * 1e12), b / (args.tbps * 1e12)) for _, f, b in costs)
        row = {"model": name, "batch": int(x.shape[0]), "gflop": round(flops / 1e9, 1),
               "gbytes": round(moved / 1e9, 2), "flop_ms": round(flops / (args.tflops * 1e12) * 1e3, 3),
               "byte_ms": round(moved / (args.tbps * 1e12) * 1e3, 3), "limit_ms": round(limit * 1e3, 3)}
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"tflops": args.tflops, "tbps": args.tbps, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
