"""PyTorch's time for the training step that cuda_timing_test times in Tandem.

fcn5 (784-4096x4-10 MLP, ReLU), batch 256, float32 (no TF32, PyTorch's
default for float32 matmul), log-softmax + NLL loss, plain SGD. Prints the
eager step time and the time of a replayed CUDA graph of the whole step,
both from CUDA events over many steps after a warm-up, so that the two
systems can be compared on the same machine in the same run.

Run on the GPU machine: python3 tests/gpu/fcn5_torch_reference.py
"""
import torch
import torch.nn.functional as F


def main():
    torch.manual_seed(0)
    assert not torch.backends.cuda.matmul.allow_tf32
    dev = torch.device("cuda")
    widths = [784, 4096, 4096, 4096, 4096, 10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 784, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.nll_loss(F.log_softmax(model(x), dim=1), y)
        loss.backward()
        opt.step()
        return loss

    def timed(fn, iters=50):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters

    eager_ms = timed(step)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph_ms = timed(graph.replay)
    print(f"pytorch {torch.__version__} fcn5 b256 step: eager {eager_ms:.3f} ms, graph replay {graph_ms:.3f} ms")


if __name__ == "__main__":
    main()
