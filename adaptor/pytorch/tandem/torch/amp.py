"""Automatic mixed precision inside the traced step: CUDA autocast's casts and GradScaler's loss scaling.

    job = tandem.torch.train(model, loss_fn, opt, batch, autocast=torch.float16,
                             grad_scaler=torch.cuda.amp.GradScaler())

is the PyTorch loop

    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)          # unscale, skip the step if a gradient is inf or NaN
    scaler.update()

captured whole: forward and loss under autocast, the backward of the scaled loss, the unscaling and the
inf/NaN check, the optimizer's update (left undone when the check fails: parameters, optimizer state and step
counts keep their values) and the scale's update, all inside the one graph the daemon runs, with nothing read
on the host between steps.

Autocast. The capture runs on the CPU, where PyTorch's CUDA autocast does not act, so Autocast (a torch
function mode) applies CUDA autocast's policy itself, op by op, as PyTorch's dispatcher would on CUDA tensors:
the ops of its lower-precision list (convolutions, matrix products, linear, attention, RNN cells) run in the
16-bit dtype, those of its float32 list (pointwise exp/log/pow..., softmax, log_softmax, norms, layer and group
norm, losses, sums, upsampling) in float32, the ops of its promote list in the widest of their inputs' dtypes,
and everything else in its inputs' dtypes (batch norm takes 16-bit activations beside float32 parameters).
The lists are PyTorch's (aten/src/ATen/autocast_mode.h); a GPU test compares the traced dtypes with PyTorch's
own autocast op for op. Model code that casts for itself (`x.float()`, `.type_as()`) keeps its casts.

Loss scaling. GradScaling holds GradScaler's settings and state; the scale and the growth tracker become
persistent tensors of the job ("amp/scale", "amp/growth_tracker"), updated by the step as
torch._amp_update_scale_ does. job.grad_scaler_state_dict() gives them back in GradScaler's format.
"""

import contextlib
import math
import types

import torch
from torch.overrides import TorchFunctionMode

from tandem.errors import CaptureError

# CUDA autocast's policies, by the name of the op (PyTorch's lists in aten/src/ATen/autocast_mode.h).
LOWER_PRECISION = frozenset([
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    # Reached through Python operators and whole-layer RNNs: `a @ b` is matmul, and a CUDA nn.LSTM/GRU/RNN
    # runs cuDNN's RNN, which autocast casts to the 16-bit dtype (AutocastRNN.cpp).
    "__matmul__", "__rmatmul__", "lstm", "gru", "rnn_tanh", "rnn_relu",
])
FLOAT32 = frozenset([
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "native_layer_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    # norm computes in float32 (autocast appends dtype=float32).
    "norm",
])
# float32 by the op's own dtype argument, when the first argument is eligible and no dtype was given.
FLOAT32_BY_DTYPE = frozenset([
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum",
])
PROMOTE = frozenset([
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "grid_sample", "index_put",
    "tensordot", "scatter_add",
])
BANNED = frozenset(["binary_cross_entropy"])
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # ATen's reduction enum

DTYPES = (torch.float16, torch.bfloat16)


def _eligible(t):
    """What autocast casts: floating-point tensors other than float64."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cast(value, dtype):
    if _eligible(value):
        return value if value.dtype == dtype else value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _first_tensor(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        for t in _tensors(v):
            return t
    return None


def _cross_entropy(func, input, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    """ATen's cross_entropy_loss as CUDA autocast runs it: composed in C++ of log_softmax with the input's own
    dtype as its dtype argument (so it stays 16-bit: autocast sets only a missing dtype) and nll_loss (a float32
    op). For class indices without label smoothing that is what runs here; probabilities as targets and label
    smoothing, whose C++ composition adds sums, run in float32."""
    if label_smoothing == 0 and _eligible(input) and not target.is_floating_point():
        log_probs = torch.log_softmax(input, 1 if input.dim() > 1 else 0, dtype=input.dtype)
        return torch.nn.functional.nll_loss(log_probs.float(), target, None if weight is None else weight.float(),
                                            ignore_index=ignore_index, reduction=_REDUCTIONS[int(reduction)])
    return func(*_cast((input, target, weight), torch.float32), reduction, ignore_index, label_smoothing)


_BODY_CACHE = {}
_DISPATCH_CHECKS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


def _never(*args, **kwargs):
    return False


def _body(fn):
    """`fn` (a torch function written in Python, e.g. F.multi_head_attention_forward) without its opening
    check for torch function overrides, so that it can run with the mode active and the mode sees the ops it
    calls, as autocast sees every op a Python function dispatches."""
    body = _BODY_CACHE.get(fn)
    if body is None:
        scope = dict(fn.__globals__)
        for name in _DISPATCH_CHECKS:
            if name in scope:
                scope[name] = _never
        body = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        body.__kwdefaults__ = fn.__kwdefaults__
        _BODY_CACHE[fn] = body
    return body


class Autocast(TorchFunctionMode):
    """CUDA autocast's policy for `dtype` (torch.float16 or torch.bfloat16) on the tensors of a trace."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype
        self._inside = set()  # Python functions whose bodies are running with the mode active

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "").split(".")[0]
        if name in LOWER_PRECISION:
            return func(*_cast(args, self.dtype), **{k: _cast(v, self.dtype) for k, v in kwargs.items()})
        if name in FLOAT32:
            return func(*_cast(args, torch.float32), **{k: _cast(v, torch.float32) for k, v in kwargs.items()})
        if name in FLOAT32_BY_DTYPE:
            first = _first_tensor(args, kwargs)
            dtype_given = kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args)
            if _eligible(first) and not dtype_given:
                kwargs = dict(kwargs, dtype=torch.float32)
            return func(*args, **kwargs)
        if name in PROMOTE:
            floats = [t for v in list(args) + list(kwargs.values()) for t in _tensors(v) if _eligible(t)]
            wide = torch.float32 if any(t.dtype == torch.float32 for t in floats) else self.dtype
            return func(*_cast(args, wide), **{k: _cast(v, wide) for k, v in kwargs.items()})
        if name == "cross_entropy_loss":
            return _cross_entropy(func, *args, **kwargs)
        if name in BANNED:
            raise CaptureError(
                f"torch.nn.functional.{name} is unsafe under autocast (PyTorch refuses it too): combine the "
                "sigmoid before it with the loss, as binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss do")
        if isinstance(func, types.FunctionType) and func not in self._inside:
            # A wrapper that hands over to another Python function (F.max_pool2d's boolean dispatch) has that
            # function's check dispatch here for the wrapper again: then the wrapper runs as it is.
            self._inside.add(func)
            try:
                with self:
                    return _body(func)(*args, **kwargs)
            finally:
                self._inside.discard(func)
        return func(*args, **kwargs)


def _enclosing_cuda_autocast():
    """The dtype of an enabled torch.autocast("cuda") around the caller, or None."""
    if not torch.is_autocast_enabled():
        return None
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4 (get_autocast_gpu_dtype is deprecated there)
        return torch.get_autocast_dtype("cuda")
    return torch.get_autocast_gpu_dtype()


def autocast_dtype(autocast):
    """The 16-bit dtype of train(autocast=...): torch.float16, torch.bfloat16, or None (off; also False). True
    or absent inside an enabled torch.autocast("cuda") context take that context's dtype."""
    if autocast is None or autocast is False:
        return _enclosing_cuda_autocast() if autocast is None else None
    if autocast is True:
        return _enclosing_cuda_autocast() or torch.float16
    if autocast not in DTYPES:
        raise CaptureError(f"autocast must be torch.float16 or torch.bfloat16 (or None), got {autocast!r}")
    return autocast


@contextlib.contextmanager
def autocast_region(dtype):
    """Autocast(dtype) for the duration, or nothing when dtype is None."""
    if dtype is None:
        yield
        return
    with Autocast(dtype):
        yield


class GradScaling:
    """torch.cuda.amp.GradScaler's loss scaling inside the step.

    From train(grad_scaler=...): a torch GradScaler (its settings and current scale and growth tracker are
    read; a disabled one, as PyTorch makes it where CUDA is missing, scales nothing), True (GradScaler's
    defaults), a dict of init_scale, growth_factor, backoff_factor, growth_interval, or a GradScaler.state_dict()
    (a checkpoint's "scaler", to resume)."""

    DEFAULTS = {"init_scale": 2.0 ** 16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}

    def __init__(self, scale, growth_factor, backoff_factor, growth_interval, growth_tracker=0):
        if not (scale > 0 and math.isfinite(scale)):
            raise CaptureError(f"the gradient scale must be a positive finite number, got {scale}")
        if not growth_factor > 1.0:
            raise CaptureError(f"growth_factor must be > 1.0, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise CaptureError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if int(growth_interval) != growth_interval or growth_interval < 1:
            raise CaptureError(f"growth_interval must be a positive int, got {growth_interval}")
        self.scale = float(scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.growth_tracker = int(growth_tracker)

    @classmethod
    def of(cls, grad_scaler):
        """The GradScaling of train(grad_scaler=...), or None."""
        if grad_scaler is None or grad_scaler is False:
            return None
        if grad_scaler is True:
            grad_scaler = {}
        if isinstance(grad_scaler, dict):
            if "scale" in grad_scaler:  # GradScaler.state_dict(), e.g. a checkpoint's "scaler"
                s = grad_scaler
                return cls(s["scale"], s["growth_factor"], s["backoff_factor"], s["growth_interval"],
                           s.get("_growth_tracker", 0))
            unknown = set(grad_scaler) - set(cls.DEFAULTS)
            if unknown:
                raise CaptureError(f"grad_scaler: unknown settings {sorted(unknown)}; known: {sorted(cls.DEFAULTS)} "
                                   "(or a GradScaler.state_dict())")
            s = dict(cls.DEFAULTS, **grad_scaler)
            return cls(s["init_scale"], s["growth_factor"], s["backoff_factor"], s["growth_interval"])
        if hasattr(grad_scaler, "is_enabled") and hasattr(grad_scaler, "state_dict"):
            if not grad_scaler.is_enabled():
                return None
            s = grad_scaler.state_dict()
            return cls(s["scale"], s["growth_factor"], s["backoff_factor"], s["growth_interval"],
                       s.get("_growth_tracker", 0))
        raise CaptureError("grad_scaler must be a torch GradScaler, True, or a dict of its settings; got "
                           f"{type(grad_scaler).__name__}")

    NAMES = ("amp/scale", "amp/growth_tracker")

    def initial_state(self):
        """The persistent tensors (NAMES order), shaped as GradScaler keeps them; the tracker int64 (GradScaler's is
        int32, which the daemon's arithmetic does not take: the values are the same)."""
        return [torch.full((1,), self.scale, dtype=torch.float32),
                torch.full((1,), self.growth_tracker, dtype=torch.int64)]

    def unscale(self, grads, scale):
        """(gradients / scale, found_inf): GradScaler.unscale_'s multiply by the float32 reciprocal (computed in
        double and rounded, as PyTorch does) and its check, as a rank-0 bool that any gradient holds an inf or a
        NaN. Runs under tracing."""
        inv_scale = scale.double().reciprocal().float()
        found = None
        unscaled = []
        for g in grads:
            bad = torch.logical_or(torch.isinf(g), torch.isnan(g)).any()
            found = bad if found is None else torch.logical_or(found, bad)
            unscaled.append((g.float() * inv_scale).to(g.dtype))
        if found is None:
            found = torch.zeros((), dtype=torch.bool)
        return unscaled, found.reshape(())

    def update(self, scale, tracker, found):
        """(new scale, new growth tracker), as torch._amp_update_scale_: after an inf/NaN the scale backs off and
        the tracker restarts; after growth_interval clean steps in a row the scale grows (if the grown scale is
        finite) and the tracker restarts. Runs under tracing."""
        counted = tracker + 1
        due = counted == self.growth_interval
        grown = scale * self.growth_factor
        grow = torch.logical_and(due, torch.logical_not(torch.isinf(grown)))
        new_scale = torch.where(found, scale * self.backoff_factor, torch.where(grow, grown, scale))
        new_tracker = torch.where(torch.logical_or(found, due), torch.zeros_like(tracker), counted)
        return new_scale, new_tracker

    def state_dict(self, scale, tracker):
        """GradScaler.state_dict()'s format for the given scale and tracker values."""
        return {"scale": float(scale), "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "_growth_tracker": int(tracker)}


class Amp:
    """train()'s mixed-precision settings: autocast's 16-bit dtype (or None) and a GradScaling (or None)."""

    def __init__(self, autocast=None, grad_scaler=None):
        self.dtype = autocast_dtype(autocast)
        self.scaling = GradScaling.of(grad_scaler)

    def __bool__(self):
        return self.dtype is not None or self.scaling is not None

    def region(self):
        return autocast_region(self.dtype)


__all__ = ["Amp", "Autocast", "GradScaling", "autocast_dtype", "autocast_region"]
