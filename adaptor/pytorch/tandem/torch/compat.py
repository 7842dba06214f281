"""What differs between the PyTorch versions the adaptor supports (1.13 and 2.x).

functionalize, grad and functional_call live in torch.func from 2.0 on and in
functorch / torch.nn.utils.stateless in 1.13 (whose functional_call does not
follow tied parameters: functional_call here gives every name of a tied
parameter its tensor). decompositions() takes a trace to PyTorch's Core ATen
opset on both. tracing_context() switches off,
for the duration of a capture, the fused CPU paths whose ops Tandem does not
have (oneDNN's RNN layer, the fused attention kernels), so that LSTMs and
attention trace to their plain ATen ops as they do in 1.13.
"""

import contextlib
import threading

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


def tied_names(module):
    """{name: [other names of the same tensor]} for the module's parameters and buffers that are shared
    (`head.weight = tok.weight`), by every path that reaches them."""
    by_tensor = {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        for name, t in list(m._parameters.items()) + list(m._buffers.items()):
            if t is not None:
                by_tensor.setdefault(id(t), []).append(f"{prefix}.{name}" if prefix else name)
    ties = {}
    for names in by_tensor.values():
        unique = list(dict.fromkeys(names))
        if len(unique) > 1:
            for n in unique:
                ties[n] = [o for o in unique if o != n]
    return ties


def functional_call(module, tensors, args, kwargs=None):
    if TORCH_VERSION < (2, 0):
        # 1.13 swaps in only the names it is given: a tied parameter's other names would keep reading the
        # module's own tensor (a constant of the trace, never trained).
        tensors = dict(tensors)
        for name, others in tied_names(module).items():
            if name in tensors:
                for other in others:
                    tensors.setdefault(other, tensors[name])
    return _functional_call(module, tensors, tuple(args), kwargs or None)


def functionalize(fn):
    return _functionalize(fn, remove="mutations_and_views")


_grad_state = threading.local()


def grad(fn, has_aux=False):
    """The gradient of `fn` with respect to its first argument (a list of tensors): functorch's grad transform,
    or, inside engine_grad(), torch.autograd.grad on leaves made from that argument."""
    if getattr(_grad_state, "engine", False):
        return _engine_grad(fn, has_aux)
    return _grad(fn, has_aux=has_aux)


def _engine_grad(fn, has_aux):
    def wrapped(primals, *rest):
        with torch.enable_grad():
            leaves = [p.detach().requires_grad_(True) for p in primals]
            out = fn(leaves, *rest)
            loss, aux = out if has_aux else (out, None)
            grads = torch.autograd.grad(loss, leaves, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(primals, grads)]
        return (grads, aux) if has_aux else grads

    return wrapped


@contextlib.contextmanager
def engine_grad():
    """grad() differentiates with PyTorch's autograd engine (traced by make_fx as the ops it runs) instead of
    functorch's transform. For torch 1.13 only: there, the transform gives the backward of an in-place op on a
    view (`c[4:8].zero_()`, `h[:, 2:5] = ...`) an as_strided of the view without the view's storage offset,
    because its wrapper tensors have no storage; the engine's trace of the same step has the right offset."""
    before = getattr(_grad_state, "engine", False)
    _grad_state.engine = True
    try:
        yield
    finally:
        _grad_state.engine = before


# Ops Tandem runs whole, with kernels of its own, though the core decomposition
# tables would take them apart: losses (whose kernels name a bad label),
# backward ops, optimizer arithmetic, dropout and attention.
KEEP_WHOLE = frozenset([
    "nll_loss_forward", "nll_loss_backward", "_log_softmax_backward_data", "_softmax_backward_data",
    "gelu_backward", "sigmoid_backward", "tanh_backward", "threshold_backward", "native_batch_norm",
    "native_batch_norm_backward",
    "native_layer_norm_backward", "embedding_dense_backward", "select_backward", "slice_backward",
    "hardtanh_backward", "leaky_relu_backward", "elu_backward",
    "native_dropout", "native_dropout_backward", "addcmul", "addcdiv", "lerp.Scalar", "lerp.Tensor",
    "masked_fill.Scalar", "masked_fill.Tensor", "stack", "_safe_softmax",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
])


def tracing_mode():
    """How make_fx traces: "fake" (shapes and dtypes only, nothing of the model runs) from torch 2.0 on;
    "real" under 1.13, whose fake tensors cannot trace functionalize over grad (its FakeTensorMode asserts on
    the meta tensors functionalization makes for batch norm), so the step runs once there."""
    return "fake" if TORCH_VERSION >= (2, 0) else "real"


def _op_name(op):
    schema = getattr(op, "_schema", None)
    if schema is None:
        return ""
    base = schema.name.split("::", 1)[-1]
    return base if schema.overload_name in ("", "default") else f"{base}.{schema.overload_name}"


def decompositions():
    """The table the capture traces with: it takes every op down to PyTorch's Core ATen opset (torch >= 2.1:
    torch._decomp.core_aten_decompositions(); 1.13, which has no core tag: every decomposition of its table for
    an op outside the opset, as core_aten.py lists it), plus Tandem's own (decompositions.py) for ops neither
    takes apart, except the ops Tandem keeps whole (KEEP_WHOLE)."""
    import torch._decomp
    if hasattr(torch._decomp, "core_aten_decompositions"):
        table = dict(torch._decomp.core_aten_decompositions())
    else:
        from tandem.torch import core_aten
        table = {op: fn for op, fn in torch._decomp.decomposition_table.items()
                 if _op_name(op) and _op_name(op) not in core_aten.NAMES}
    from tandem.torch import decompositions as own
    for op, fn in own.table().items():
        table.setdefault(op, fn)
    return {op: fn for op, fn in table.items() if _op_name(op) not in KEEP_WHOLE}


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


__all__ = ["KEEP_WHOLE", "TORCH_VERSION", "decompositions", "engine_grad", "functional_call", "functionalize", "grad",
           "make_fx", "tied_names", "tracing_context", "tracing_mode"]
