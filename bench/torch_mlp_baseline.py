"""The native baseline of mlp_step_bench: the same MLP training step in
PyTorch on the same GPU, eager and as a replayed CUDA graph of the whole
step (torch.cuda.graph), which is the floor for PyTorch's kernels.

Same model (Linear+ReLU layers, log-softmax + NLL loss), float32 without
TF32 (PyTorch's default for float32 matmul), SGD with momentum 0.9, the
batch copied from pinned host memory every step as a client would send it.
Prints one JSON object.

    python3 bench/torch_mlp_baseline.py --inputs 784 --hidden 4096 --layers 4 --batch 256
"""
import argparse
import json

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--inputs", type=int, default=784)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--iterations", type=int, default=200)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    widths = [a.inputs] + [a.hidden] * a.layers + [a.classes]
    mods = []
    for i in range(len(widths) - 1):
        mods.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    host_x = torch.randn(a.batch, a.inputs).pin_memory()
    host_y = torch.randint(0, a.classes, (a.batch,)).pin_memory()
    x = torch.empty(a.batch, a.inputs, device=dev)
    y = torch.empty(a.batch, dtype=torch.long, device=dev)

    def step():
        x.copy_(host_x, non_blocking=True)
        y.copy_(host_y, non_blocking=True)
        opt.zero_grad(set_to_none=False)
        loss = F.nll_loss(F.log_softmax(model(x), dim=1), y)
        loss.backward()
        opt.step()
        return loss

    def timed(fn, iters):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters

    eager_ms = timed(step, a.iterations)
    # Capture the whole step (warm-up on a side stream first, as the docs say).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    replay_ms = timed(graph.replay, a.iterations)
    print(json.dumps({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                      "eager_ms_per_iter": eager_ms, "graph_replay_ms_per_iter": replay_ms}))


if __name__ == "__main__":
    main()
