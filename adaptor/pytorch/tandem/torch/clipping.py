"""Gradient clipping inside the traced step, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_ do it.

train(clip_grad_norm=max_norm, clip_norm_type=2.0) or train(clip_grad_value=v)
clips the gradients of the parameters the optimizer trains after the backward
pass (after the last micro-batch's, with accumulation) and before the
optimizer's update, as a PyTorch loop that calls clip_grad_norm_(params, ...)
between backward() and optimizer.step() does. Everything is torch ops on the
traced gradients, so it runs in the daemon with the rest of the step; nothing
is read on the host, which is also why error_if_nonfinite=True has no
equivalent (a non-finite norm scales every gradient by NaN, as PyTorch does
with error_if_nonfinite=False).
"""

import math

import torch

from tandem.errors import CaptureError


class GradientClipping:
    """One clipping rule: by total norm (max_norm, norm_type 2 or inf) or by value (clip_value)."""

    def __init__(self, max_norm=None, norm_type=2.0, clip_value=None):
        if max_norm is not None and clip_value is not None:
            raise CaptureError("clip_grad_norm and clip_grad_value were both given; Tandem applies one clipping "
                               "rule per step: choose one")
        if max_norm is not None:
            max_norm = _positive_number("clip_grad_norm", max_norm)
            try:
                norm_type = float(norm_type)
            except (TypeError, ValueError):
                raise CaptureError(f"clip_norm_type must be 2.0 or float('inf'), got {norm_type!r}") from None
            if norm_type not in (2.0, math.inf):
                raise CaptureError(f"clip_norm_type={norm_type} is not supported: Tandem clips by the 2-norm or the "
                                   "inf-norm of the gradients (clip_norm_type=2.0 or float('inf'))")
        if clip_value is not None:
            clip_value = _positive_number("clip_grad_value", clip_value)
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.clip_value = clip_value

    def __bool__(self):
        return self.max_norm is not None or self.clip_value is not None

    def apply(self, grads):
        """The clipped gradients (a list aligned with `grads`). Runs under tracing."""
        if self.clip_value is not None:
            # clip_grad_value_: p.grad.clamp_(min=-clip_value, max=clip_value).
            return [g.clamp(-self.clip_value, self.clip_value) for g in grads]
        if self.max_norm is None or not grads:
            return list(grads)
        coef = clip_coefficient(total_norm(grads, self.norm_type), self.max_norm)
        return [g * coef for g in grads]


def total_norm(grads, norm_type):
    """clip_grad_norm_'s total norm: the norm of the per-gradient norms (inf: the largest |g|)."""
    if norm_type == math.inf:
        norms = [g.abs().amax() for g in grads]
        return norms[0] if len(norms) == 1 else torch.stack(norms).amax()
    return _two_norm(torch.stack([_two_norm(g) for g in grads]))


def _two_norm(t):
    """torch.linalg.vector_norm(t, 2) in ops the daemon runs: torch 1.13 decomposes vector_norm, and a sum over
    all dims, into primitives the lowering does not take, so the sum names its dims (sum.dim_IntList). A 16-bit
    tensor's norm is summed in float32 and rounded to its dtype, as PyTorch's is."""
    wide = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
    norm = torch.sum(wide * wide, dim=list(range(t.dim()))).sqrt()
    return norm.to(t.dtype)


def clip_coefficient(norm, max_norm):
    """clamp(max_norm / (norm + 1e-6), max=1.0), as clip_grad_norm_ computes it."""
    return torch.clamp(max_norm / (norm + 1e-6), max=1.0)


def _positive_number(what, value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise CaptureError(f"{what} must be a positive number, got {value!r}") from None
    if not value > 0 or math.isinf(value):
        raise CaptureError(f"{what} must be a positive finite number, got {value}")
    return value
