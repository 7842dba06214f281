"""PyTorch's times for the CNN layers that cuda_cnn_kernels_test times in Tandem.

ResNet-50 layers at batch 32, float32, forward + backward of one op each:
convolutions without TF32 (torch.backends.cudnn.allow_tf32 = False, the
numerics Tandem uses) and with PyTorch's default heuristics
(cudnn.benchmark = False); training batch norm [32, 64, 112, 112]; max pool
3x3 s2 [32, 64, 112, 112]. Times are eager, from CUDA events over many
iterations after a warm-up, so that both systems can be compared on the same
machine in the same run.

Run on the GPU machine: python3 tests/gpu/cnn_torch_reference.py
"""
import torch
import torch.nn.functional as F


def timed(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    convs = [
        ("stem 3->64 7x7 s2 @224 (grad_weight only)", (32, 3, 224, 224), (64, 3, 7, 7), 2, 3, False),
        ("64->64 3x3 @56", (32, 64, 56, 56), (64, 64, 3, 3), 1, 1, True),
        ("256->64 1x1 @56", (32, 256, 56, 56), (64, 256, 1, 1), 1, 0, True),
        ("512->512 3x3 @7", (32, 512, 7, 7), (512, 512, 3, 3), 1, 1, True),
    ]
    for name, xs, ws, stride, pad, input_grad in convs:
        x = torch.randn(xs, device=dev, requires_grad=input_grad)
        w = (0.02 * torch.randn(ws, device=dev)).requires_grad_()
        g = torch.randn(F.conv2d(x, w, stride=stride, padding=pad).shape, device=dev)

        def step():
            F.conv2d(x, w, stride=stride, padding=pad).backward(g)

        print(f"conv {name} fwd+bwd: {timed(step):.3f} ms")

    x = torch.randn(32, 64, 112, 112, device=dev, requires_grad=True)
    weight = torch.rand(64, device=dev, requires_grad=True)
    bias = torch.rand(64, device=dev, requires_grad=True)
    rm = torch.zeros(64, device=dev)
    rv = torch.ones(64, device=dev)
    g = torch.randn_like(x)

    def bn():
        F.batch_norm(x, rm, rv, weight, bias, training=True, momentum=0.1, eps=1e-5).backward(g)

    print(f"batch norm [32, 64, 112, 112] fwd+bwd: {timed(bn):.3f} ms")
    gp = torch.randn(32, 64, 56, 56, device=dev)

    def pool():
        F.max_pool2d(x, 3, 2, 1).backward(gp)

    print(f"max pool 3x3 s2 [32, 64, 112, 112] fwd+bwd: {timed(pool):.3f} ms")


if __name__ == "__main__":
    main()
