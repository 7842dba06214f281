"""What differs between the PyTorch versions the adaptor supports (1.13 and 2.x).

functionalize, grad and functional_call live in torch.func from 2.0 on and in
functorch / torch.nn.utils.stateless in 1.13. tracing_context() switches off,
for the duration of a capture, the fused CPU paths whose ops Tandem does not
have (oneDNN's RNN layer, the fused attention kernels), so that LSTMs and
attention trace to their plain ATen ops as they do in 1.13.
"""

import contextlib

import torch

try:  # torch >= 2.0
    from torch.func import functional_call as _functional_call
    from torch.func import functionalize as _functionalize
    from torch.func import grad as _grad
except ImportError:  # torch 1.13
    import functorch
    from torch.nn.utils.stateless import functional_call as _functional_call
    _functionalize = functorch.functionalize
    _grad = functorch.grad

from torch.fx.experimental.proxy_tensor import make_fx

TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2] if p.isdigit())


def functional_call(module, tensors, args):
    return _functional_call(module, tensors, tuple(args))


def functionalize(fn):
    return _functionalize(fn, remove="mutations_and_views")


def grad(fn, has_aux=False):
    return _grad(fn, has_aux=has_aux)


@contextlib.contextmanager
def tracing_context():
    with contextlib.ExitStack() as stack:
        mkldnn = getattr(torch.backends, "mkldnn", None)
        if mkldnn is not None and hasattr(mkldnn, "flags"):
            stack.enter_context(mkldnn.flags(enabled=False))
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
        except ImportError:
            pass
        yield


__all__ = ["TORCH_VERSION", "functional_call", "functionalize", "grad", "make_fx", "tracing_context"]
