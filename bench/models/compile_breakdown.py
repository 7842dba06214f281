"""Where a training step's GPU time goes in PyTorch eager and in torch.compile, by kernel family.

    python3 bench/models/compile_breakdown.py --models resnet50 [--steps 20] [--out breakdown.json]

For each zoo model (zoo/catalog.py, full size) and each variant below, one training step (model, loss, backward,
SGD with momentum) is timed over --steps steps, then profiled for 3 steps with torch.profiler; kernel time is summed
by family: convolution (cuDNN and its engines), GEMM (cuBLAS/cuBLASLt/CUTLASS), Triton (Inductor's generated
kernels), and the rest (PyTorch's own elementwise, reduction, normalization and optimizer kernels).

Variants: eager; eager with channels_last weights and input; torch.compile (default mode, Inductor's defaults,
its layout optimization included); torch.compile with layout optimization off. The comparison says how much of
compile's lead over an NCHW runtime is its choice of layout for the convolutions, and how much its fusion.
"""

import argparse
import collections
import copy
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, bc.REPO_ROOT)
from zoo import catalog  # noqa: E402

FAMILIES = (
    ("convolution", ("conv", "cudnn", "xmma", "implicit", "wgrad", "dgrad", "fprop", "nhwc", "nchw")),
    ("gemm", ("gemm", "cublas", "cutlass", "sm90_", "sm80_", "ampere", "hopper")),
    ("triton", ("triton",)),
)


def family(name):
    lowered = name.lower()
    for fam, keys in FAMILIES:
        if any(k in lowered for k in keys):
            return fam
    return "other"


def kernel_families(fn, steps=3):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    totals = collections.Counter()
    counts = collections.Counter()
    top = collections.Counter()
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        fam = family(e.name)
        totals[fam] += us
        counts[fam] += 1
        top[e.name[:90]] += us
    return ({k: round(v / steps / 1e3, 3) for k, v in totals.items()},
            {k: v // steps for k, v in counts.items()},
            [(n, round(us / steps / 1e3, 3)) for n, us in top.most_common(12)])


def variant(entry, name, steps):
    torch.manual_seed(0)
    model, loss_fn, make_batch = entry.builder("full")
    catalog._without_randomness(model)
    batch = tuple(t.cuda() for t in make_batch(torch.Generator().manual_seed(1)))
    model = copy.deepcopy(model).cuda()
    if name == "eager_channels_last":
        model = model.to(memory_format=torch.channels_last)
        batch = tuple(t.to(memory_format=torch.channels_last) if t.dim() == 4 else t for t in batch)
    optimizer = bc.sgd(model.parameters())
    row = {"variant": name}
    torch._dynamo.reset()
    if name.startswith("compile"):
        import torch._inductor.config as inductor_config
        inductor_config.layout_optimization = name != "compile_nchw"
        t0 = time.perf_counter()
        model = torch.compile(model)
        bc.eager_step(model, loss_fn, optimizer, batch)()
        torch.cuda.synchronize()
        row["warmup_s"] = round(time.perf_counter() - t0, 1)
    fn = bc.eager_step(model, loss_fn, optimizer, batch)
    row["ms"] = round(bc.cuda_timed(fn, steps) * 1e3, 3)
    row["kernel_ms"], row["kernels"], row["top"] = kernel_families(fn)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--variants", default="eager,eager_channels_last,compile,compile_nchw")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cudnn_benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    rows = []
    for model_name in args.models.split(","):
        for v in args.variants.split(","):
            try:
                row = variant(catalog.entry(model_name), v, args.steps)
            except Exception as e:  # a variant that fails still gets its row
                row = {"variant": v, "error": f"{type(e).__name__}: {e}"[:400]}
            row["model"] = model_name
            rows.append(row)
            bc.log(json.dumps(row))
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": bc.metadata("cuda"), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
