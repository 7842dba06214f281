"""One fused op per direction of every nn.LSTM and nn.GRU layer in a captured step (PyTorch >= 2.4).

Traced as it is, a recurrent layer becomes a handful of ATen ops per time step (a matrix product, the gate
activations, the state update), forward and backward: thousands of small kernels per step for a language
model, and seconds of capture. This module defines four custom ops, tandem::lstm, tandem::lstm_backward,
tandem::gru and tandem::gru_backward (one layer, one direction, time-major; their math and outputs are
rnn_reference.py's), which the daemon runs as one kernel sequence each. fused_rnns(model) makes every
nn.LSTM and nn.GRU it can handle run through them while a step is traced: the graph holds one forward and one
backward node per layer and direction. A bidirectional layer's reverse direction is the same op over the
sequence flipped in time (aten.flip before and after it), so both directions share one kernel.

The ops' CPU implementations are rnn_reference.py's step-by-step torch math: they run for real while a step is
traced (under fake tensors only their shape functions run).

available() says whether the fusion is used: it needs torch.library.custom_op and register_autograd
(PyTorch >= 2.4), and TANDEM_FUSED_RNN=0 turns it off. Under older versions the layers are traced to their
per-step ATen ops, as PyTorch decomposes them. Importing this module registers the ops where the API exists;
that and fused_rnns() change process-wide state and are not thread-safe.
"""

import contextlib
import os
import typing

import torch
import torch.nn.functional as F

from tandem.torch.rnn_reference import (gru_backward_reference, gru_forward_reference, lstm_backward_reference,
                                        lstm_forward_reference)


def _has_api():
    """torch.library's custom-op API (2.4) and the single-level autograd function that _apply uses."""
    if not all(hasattr(torch.library, name) for name in ("custom_op", "register_fake", "register_autograd")):
        return False
    try:
        from torch._functorch.utils import enable_single_level_autograd_function  # noqa: F401
        from torch.autograd.function import _SingleLevelFunction  # noqa: F401
    except ImportError:
        return False
    return True


_API = _has_api()
_registered = False

Tensor = torch.Tensor


# ---- the gradient formulas: forward inputs/outputs -> backward op -> gradients of the forward's inputs ----

def _lstm_setup_context(ctx, inputs, output):
    x, h0, c0, w_ih, w_hh, _, _ = inputs
    y, _, _, saved = output
    ctx.save_for_backward(x, h0, c0, w_ih, w_hh, y, saved)


def _lstm_backward(ctx, grad_y, grad_h_n, grad_c_n, grad_saved):
    """The gradients of tandem::lstm's seven inputs. `saved` is an internal output: its gradient is ignored."""
    x, h0, c0, w_ih, w_hh, y, saved = ctx.saved_tensors
    grad_y = torch.zeros_like(y) if grad_y is None else grad_y
    grad_h_n = torch.zeros_like(h0) if grad_h_n is None else grad_h_n
    grad_c_n = torch.zeros_like(c0) if grad_c_n is None else grad_c_n
    grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b, _ = torch.ops.tandem.lstm_backward(
        grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved)
    return grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b, grad_b


def _gru_setup_context(ctx, inputs, output):
    x, h0, w_ih, w_hh, _, _ = inputs
    y, _, saved = output
    ctx.save_for_backward(x, h0, w_ih, w_hh, y, saved)


def _gru_backward(ctx, grad_y, grad_h_n, grad_saved):
    """The gradients of tandem::gru's six inputs. `saved` is an internal output: its gradient is ignored."""
    x, h0, w_ih, w_hh, y, saved = ctx.saved_tensors
    grad_y = torch.zeros_like(y) if grad_y is None else grad_y
    grad_h_n = torch.zeros_like(h0) if grad_h_n is None else grad_h_n
    grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, _, _ = torch.ops.tandem.gru_backward(
        grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved)
    return grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh


# ---- the custom ops (PyTorch >= 2.4) ----

def _lstm(x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor,
          b_hh: Tensor) -> typing.Tuple[Tensor, Tensor, Tensor, Tensor]:
    return lstm_forward_reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh)


def _lstm_fake(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
    return (x.new_empty((steps, batch, hidden)), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
            x.new_empty((steps, batch, 5 * hidden)))


def _lstm_bwd(grad_y: Tensor, grad_h_n: Tensor, grad_c_n: Tensor, x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor,
              w_hh: Tensor, y: Tensor,
              saved: Tensor) -> typing.Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return lstm_backward_reference(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved)


def _lstm_bwd_fake(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved):
    steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
    return (x.new_empty(x.shape), h0.new_empty(h0.shape), c0.new_empty(c0.shape), w_ih.new_empty(w_ih.shape),
            w_hh.new_empty(w_hh.shape), w_ih.new_empty((4 * hidden,)), x.new_empty((steps, batch, 4 * hidden)))


def _gru(x: Tensor, h0: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor,
         b_hh: Tensor) -> typing.Tuple[Tensor, Tensor, Tensor]:
    return gru_forward_reference(x, h0, w_ih, w_hh, b_ih, b_hh)


def _gru_fake(x, h0, w_ih, w_hh, b_ih, b_hh):
    steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
    return x.new_empty((steps, batch, hidden)), h0.new_empty(h0.shape), x.new_empty((steps, batch, 4 * hidden))


def _gru_bwd(grad_y: Tensor, grad_h_n: Tensor, x: Tensor, h0: Tensor, w_ih: Tensor, w_hh: Tensor, y: Tensor,
             saved: Tensor) -> typing.Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    return gru_backward_reference(grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved)


def _gru_bwd_fake(grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved):
    steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
    gates = (steps, batch, 3 * hidden)
    return (x.new_empty(x.shape), h0.new_empty(h0.shape), w_ih.new_empty(w_ih.shape), w_hh.new_empty(w_hh.shape),
            w_ih.new_empty((3 * hidden,)), w_ih.new_empty((3 * hidden,)), x.new_empty(gates), x.new_empty(gates))


# name -> (CPU implementation, fake implementation, (setup_context, backward) or None)
_OPS = {
    "lstm": (_lstm, _lstm_fake, (_lstm_setup_context, _lstm_backward)),
    "lstm_backward": (_lstm_bwd, _lstm_bwd_fake, None),
    "gru": (_gru, _gru_fake, (_gru_setup_context, _gru_backward)),
    "gru_backward": (_gru_bwd, _gru_bwd_fake, None),
}


def _op_defined(name):
    try:
        getattr(torch.ops.tandem, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def _register_ops():
    """Defines the tandem:: ops of _OPS: CPU kernels, fake kernels and the forward ops' autograd formulas."""
    global _registered
    if _registered or not _API:
        return
    for name, (implementation, fake, gradient) in _OPS.items():
        # An op survives a reload of this module (the dispatcher is process-wide); define each once.
        if _op_defined(name):
            continue
        op = torch.library.custom_op(f"tandem::{name}", implementation, mutates_args=(), device_types="cpu")
        op.register_fake(fake)
        if gradient:
            torch.library.register_autograd(f"tandem::{name}", gradient[1], setup_context=gradient[0])
    _registered = True


def available():
    """Whether fused_rnns() fuses: PyTorch has torch.library.custom_op and register_autograd (>= 2.4; and
    functorch's single-level autograd function, there since 2.0) and TANDEM_FUSED_RNN is not 0."""
    return _API and os.environ.get("TANDEM_FUSED_RNN", "1").strip() != "0"


def _single_level_function(name):
    """An autograd function that applies tandem::<name> with its registered formula inside torch.func.grad.

    The capture differentiates with torch.func.grad, and up to at least PyTorch 2.11 the autograd.Function
    that register_autograd generates for a custom op is refused by functorch's transforms ("it must override
    the setup_context staticmethod"). A single-level autograd function applied under
    enable_single_level_autograd_function is how functorch itself records an autograd.Function inside one
    grad level; it records the same setup_context and backward, and the op's own autograd stays out of the
    way because a function's forward runs with gradients off. The backward calls the backward op with
    gradients off too: Tandem's steps are first-order, and torch.func.grad differentiates with
    create_graph=True, which would otherwise enter the backward op's (refused) autograd wrapper.
    """
    from torch.autograd.function import _SingleLevelFunction

    op = getattr(torch.ops.tandem, name)
    setup_context, backward = _OPS[name][2]

    class Fused(_SingleLevelFunction):
        @staticmethod
        def forward(*inputs):
            return op(*inputs)

        @staticmethod
        def setup_context(ctx, inputs, output):
            setup_context(ctx, inputs, output)

        @staticmethod
        def backward(ctx, *grads):
            with torch.no_grad():
                return backward(ctx, *grads)

    Fused.__name__ = f"Fused{name.capitalize()}"
    return Fused


_functions = {}


def _apply(name, *inputs):
    """tandem::<name> (lstm or gru) with its gradient, also under torch.func transforms: its outputs but
    `saved`."""
    from torch._functorch.utils import enable_single_level_autograd_function
    if name not in _functions:
        _functions[name] = _single_level_function(name)
    with enable_single_level_autograd_function():
        outputs = _functions[name].apply(*inputs)
    return outputs[:-1]


# ---- nn.LSTM and nn.GRU through the fused ops ----

def _kind(m):
    """'lstm' or 'gru' for a module fusion handles (a plain nn.LSTM or nn.GRU with its own forward, with biases,
    no LSTM projection; uni- or bidirectional), else None."""
    for cls, kind in ((torch.nn.LSTM, "lstm"), (torch.nn.GRU, "gru")):
        if (isinstance(m, cls) and type(m).forward is cls.forward and m.mode == kind.upper() and m.bias
                and getattr(m, "proj_size", 0) == 0):
            return kind
    return None


def _layer_weights(m, layer, direction):
    # Read through the attributes on every call: functional_call swaps tensors in there.
    suffix = "_reverse" if direction else ""
    return [getattr(m, f"{kind}_l{layer}{suffix}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


# The dtypes the fused ops take (every input of one of them; their outputs, saved included, in that dtype, as
# PyTorch's cuDNN RNNs keep outputs and states in the input's dtype).
FUSABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _directions(m):
    return 2 if m.bidirectional else 1


def _states(kind, hx):
    """The initial states nn.LSTM / nn.GRU take as hx: (h0, c0) or h0."""
    if kind == "lstm":
        return list(hx) if isinstance(hx, (tuple, list)) and len(hx) == 2 else None
    return [hx] if isinstance(hx, torch.Tensor) else None


def _fusable_call(m, kind, input, hx):
    """The call-level conditions: a batched tensor of a FUSABLE_DTYPES dtype with no empty dim, the layers'
    weights of that dtype, and the initial states absent or of that dtype and the module's batched shape
    [num_layers * directions, B, H]."""
    if not isinstance(input, torch.Tensor) or input.dim() != 3 or input.dtype not in FUSABLE_DTYPES:
        return False
    if input.numel() == 0:
        return False
    dtype = input.dtype
    weights = [w for layer in range(m.num_layers) for d in range(_directions(m)) for w in _layer_weights(m, layer, d)]
    if not all(isinstance(w, torch.Tensor) and w.dtype == dtype for w in weights):
        return False
    if hx is None:
        return True
    states = _states(kind, hx)
    batch = input.shape[0] if m.batch_first else input.shape[1]
    expected = (m.num_layers * _directions(m), batch, m.hidden_size)
    return states is not None and all(isinstance(s, torch.Tensor) and tuple(s.shape) == expected and s.dtype == dtype
                                      for s in states)


def _direction(kind, x, states, weights, reverse):
    """One layer in one direction over time-major x: (y, final states). The reverse direction runs the same op
    over the sequence flipped in time and flips its output back."""
    if reverse:
        x = x.flip(0)
    y, *final = _apply(kind, x, *states, *weights)
    return (y.flip(0) if reverse else y), final


def _fused_forward(m, kind, original):
    """A forward for `m` that runs its layers through the fused op of `kind`, or `original` where it cannot."""

    def forward(input, hx=None):
        if not _fusable_call(m, kind, input, hx):
            return original(input, hx)
        x = input.transpose(0, 1) if m.batch_first else input
        directions = _directions(m)
        if hx is None:
            zeros = torch.zeros(m.num_layers * directions, x.shape[1], m.hidden_size, dtype=x.dtype,
                                device=x.device)
            states = [zeros] * (2 if kind == "lstm" else 1)
        else:
            states = _states(kind, hx)
        finals = [[] for _ in states]  # per state kind, per layer and direction, in nn.LSTM/GRU's order
        for layer in range(m.num_layers):
            outputs = []
            for d in range(directions):
                k = layer * directions + d
                y, final = _direction(kind, x, [s[k] for s in states], _layer_weights(m, layer, d), reverse=d == 1)
                outputs.append(y)
                for collected, state in zip(finals, final):
                    collected.append(state)
            x = outputs[0] if directions == 1 else torch.cat(outputs, dim=2)
            if m.training and m.dropout > 0 and layer < m.num_layers - 1:
                x = F.dropout(x, p=m.dropout, training=True)
        output = x.transpose(0, 1) if m.batch_first else x
        final_states = [torch.stack(collected) for collected in finals]
        return output, (tuple(final_states) if kind == "lstm" else final_states[0])

    return forward


@contextlib.contextmanager
def fused_rnns(module):
    """While inside, every nn.LSTM and nn.GRU in `module` that fusion handles (bias=True, no proj_size, uni- or
    bidirectional; at call time a batched float32, bfloat16 or float16 input, with weights and states of its
    dtype) runs its layers through tandem::lstm / tandem::gru, with the module's inputs and outputs
    (batch_first, initial states or zeros, dropout between layers in training mode). Others keep their own
    forward. Does nothing unless available()."""
    replaced = []
    if available():
        _register_ops()
        for m in module.modules():
            kind = _kind(m)
            if kind:
                had_own = "forward" in m.__dict__
                previous = m.__dict__.get("forward")
                m.forward = _fused_forward(m, kind, m.forward)
                replaced.append((m, had_own, previous))
    try:
        yield
    finally:
        for m, had_own, previous in replaced:
            if had_own:
                m.forward = previous
            else:
                del m.forward


if _API:
    _register_ops()

__all__ = ["FUSABLE_DTYPES", "available", "fused_rnns"]
