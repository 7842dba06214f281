"""One fused op per nn.LSTM layer in a captured step (PyTorch >= 2.4).

Traced as it is, an nn.LSTM becomes a handful of ATen ops per time step (a
matrix product, the gate activations, the cell update), forward and
backward: thousands of small kernels per step for a language model. This
module defines two custom ops,

    tandem::lstm(x [T,B,I], h0 [B,H], c0 [B,H], w_ih [4H,I], w_hh [4H,H], b_ih [4H], b_hh [4H])
        -> (y [T,B,H], h_n [B,H], c_n [B,H], saved [T,B,5H])
    tandem::lstm_backward(grad_y [T,B,H], grad_h_n [B,H], grad_c_n [B,H], x, h0, c0, w_ih, w_hh, y, saved)
        -> (grad_x [T,B,I], grad_h0 [B,H], grad_c0 [B,H], grad_w_ih [4H,I], grad_w_hh [4H,H], grad_b [4H],
            grad_gates [T,B,4H])

(one layer, unidirectional, time-major; gate order i, f, g, o as in
PyTorch; saved[t] = cat(i, f, g, o activated, c_t); grad_b is the gradient
of both biases; grad_gates, the gradient of the gate pre-activations, is
scratch; every tensor float32, bfloat16 or float16, all of one dtype),
which the daemon runs as one kernel sequence each. fused_lstm(model)
makes every nn.LSTM it can handle run its layers through tandem::lstm while
a step is traced, so the graph holds one lstm and one lstm_backward node per
layer.

The ops' CPU implementations (lstm_forward_reference, lstm_backward_reference)
are plain step-by-step torch math: they run for real while a step is traced.
They are plain functions too, usable and tested under any PyTorch version.

available() says whether the fusion is used: it needs torch.library.custom_op
and register_autograd (PyTorch >= 2.4), and TANDEM_FUSED_LSTM=0 turns it off.
Under older versions the LSTM is traced to its per-step ATen ops, as before.
Importing this module registers the two ops where the API exists; that and
fused_lstm() change process-wide state and are not thread-safe.
"""

import contextlib
import os
import typing

import torch
import torch.nn.functional as F

# ---- the math (any PyTorch version) ----


def lstm_forward_reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """One LSTM layer over the whole sequence, one time step after the other. Returns (y, h_n, c_n, saved)
    as tandem::lstm defines them. Every output is a new tensor (none aliases an input or another output)."""
    steps, batch = x.shape[0], x.shape[1]
    hidden = h0.shape[-1]
    y = x.new_empty((steps, batch, hidden))
    saved = x.new_empty((steps, batch, 5 * hidden))
    # The input projection of all steps at once; only the recurrent part is sequential.
    x_gates = torch.matmul(x, w_ih.t()) + (b_ih + b_hh)
    h, c = h0, c0
    for t in range(steps):
        gates = x_gates[t] + torch.matmul(h, w_hh.t())
        a_i, a_f, a_g, a_o = gates.chunk(4, dim=1)
        i, f, g, o = torch.sigmoid(a_i), torch.sigmoid(a_f), torch.tanh(a_g), torch.sigmoid(a_o)
        c = f * c + i * g
        h = o * torch.tanh(c)
        y[t] = h
        saved[t] = torch.cat((i, f, g, o, c), dim=1)
    # clone(): with no step h and c would be the inputs themselves.
    return y, h.clone(), c.clone(), saved


def lstm_backward_reference(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved):
    """The gradients of one LSTM layer, from lstm_forward_reference's y and saved. Returns (grad_x, grad_h0,
    grad_c0, grad_w_ih, grad_w_hh, grad_b, grad_gates) as tandem::lstm_backward defines them."""
    steps, batch = x.shape[0], x.shape[1]
    hidden = h0.shape[-1]
    grad_gates = x.new_empty((steps, batch, 4 * hidden))
    dh, dc = grad_h_n, grad_c_n
    for t in reversed(range(steps)):
        i, f, g, o, c = saved[t].chunk(5, dim=1)
        c_prev = saved[t - 1, :, 4 * hidden:] if t > 0 else c0
        dh = dh + grad_y[t]
        tanh_c = torch.tanh(c)
        dc = dc + dh * o * (1 - tanh_c * tanh_c)
        d_i = dc * g * i * (1 - i)
        d_f = dc * c_prev * f * (1 - f)
        d_g = dc * i * (1 - g * g)
        d_o = dh * tanh_c * o * (1 - o)
        d_gates = torch.cat((d_i, d_f, d_g, d_o), dim=1)
        grad_gates[t] = d_gates
        dh = torch.matmul(d_gates, w_hh)
        dc = dc * f
    grad_x = torch.matmul(grad_gates, w_ih)
    flat_gates = grad_gates.reshape(steps * batch, 4 * hidden)
    grad_w_ih = torch.matmul(flat_gates.t(), x.reshape(steps * batch, -1))
    h_prev = torch.cat((h0.unsqueeze(0), y), dim=0)[:steps].reshape(steps * batch, hidden)
    grad_w_hh = torch.matmul(flat_gates.t(), h_prev)
    grad_b = flat_gates.sum(dim=0)
    # clone(): with no step dh and dc would be the inputs themselves.
    return grad_x, dh.clone(), dc.clone(), grad_w_ih, grad_w_hh, grad_b, grad_gates


# ---- the custom ops (PyTorch >= 2.4) ----


def _has_api():
    """torch.library's custom-op API (2.4) and the single-level autograd function that _apply_lstm uses."""
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


def _setup_context(ctx, inputs, output):
    x, h0, c0, w_ih, w_hh, _, _ = inputs
    y, _, _, saved = output
    ctx.save_for_backward(x, h0, c0, w_ih, w_hh, y, saved)


def _backward(ctx, grad_y, grad_h_n, grad_c_n, grad_saved):
    """The gradients of tandem::lstm's seven inputs. `saved` is an internal output: its gradient is ignored."""
    x, h0, c0, w_ih, w_hh, y, saved = ctx.saved_tensors
    grad_y = torch.zeros_like(y) if grad_y is None else grad_y
    grad_h_n = torch.zeros_like(h0) if grad_h_n is None else grad_h_n
    grad_c_n = torch.zeros_like(c0) if grad_c_n is None else grad_c_n
    grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b, _ = torch.ops.tandem.lstm_backward(
        grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved)
    return grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b, grad_b


def _register_ops():
    """Defines tandem::lstm and tandem::lstm_backward: CPU kernels, fake kernels and the autograd formula."""
    global _registered
    if _registered or not _API:
        return
    # An op survives a reload of this module (the dispatcher is process-wide); define each once.
    if not _op_defined("lstm"):
        def lstm(x: Tensor, h0: Tensor, c0: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor,
                 b_hh: Tensor) -> typing.Tuple[Tensor, Tensor, Tensor, Tensor]:
            return lstm_forward_reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh)

        op = torch.library.custom_op("tandem::lstm", lstm, mutates_args=(), device_types="cpu")

        def lstm_fake(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
            steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
            return (x.new_empty((steps, batch, hidden)), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
                    x.new_empty((steps, batch, 5 * hidden)))

        op.register_fake(lstm_fake)
        torch.library.register_autograd("tandem::lstm", _backward, setup_context=_setup_context)
    if not _op_defined("lstm_backward"):
        def lstm_backward(grad_y: Tensor, grad_h_n: Tensor, grad_c_n: Tensor, x: Tensor, h0: Tensor, c0: Tensor,
                          w_ih: Tensor, w_hh: Tensor, y: Tensor,
                          saved: Tensor) -> typing.Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
            return lstm_backward_reference(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved)

        op = torch.library.custom_op("tandem::lstm_backward", lstm_backward, mutates_args=(), device_types="cpu")

        def lstm_backward_fake(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved):
            steps, batch, hidden = x.shape[0], x.shape[1], h0.shape[-1]
            return (x.new_empty(x.shape), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
                    w_ih.new_empty(w_ih.shape), w_hh.new_empty(w_hh.shape), w_ih.new_empty((4 * hidden,)),
                    x.new_empty((steps, batch, 4 * hidden)))

        op.register_fake(lstm_backward_fake)
    _registered = True


def _op_defined(name):
    try:
        getattr(torch.ops.tandem, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def available():
    """Whether fused_lstm() fuses: PyTorch has torch.library.custom_op and register_autograd (>= 2.4; and
    functorch's single-level autograd function, there since 2.0) and TANDEM_FUSED_LSTM is not 0."""
    return _API and os.environ.get("TANDEM_FUSED_LSTM", "1").strip() != "0"


def _single_level_function():
    """An autograd function that applies tandem::lstm with its registered formula inside torch.func.grad.

    The capture differentiates with torch.func.grad, and up to at least PyTorch 2.11 the autograd.Function
    that register_autograd generates for a custom op is refused by functorch's transforms ("it must override
    the setup_context staticmethod"). A single-level autograd function applied under
    enable_single_level_autograd_function is how functorch itself records an autograd.Function inside one
    grad level; it records the same setup_context and backward, and the op's own autograd stays out of the
    way because a function's forward runs with gradients off. The backward calls tandem::lstm_backward with
    gradients off too: Tandem's steps are first-order, and torch.func.grad differentiates with
    create_graph=True, which would otherwise enter lstm_backward's (refused) autograd wrapper.
    """
    from torch.autograd.function import _SingleLevelFunction

    class FusedLstm(_SingleLevelFunction):
        @staticmethod
        def forward(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
            return torch.ops.tandem.lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh)

        @staticmethod
        def setup_context(ctx, inputs, output):
            _setup_context(ctx, inputs, output)

        @staticmethod
        def backward(ctx, grad_y, grad_h_n, grad_c_n, grad_saved):
            with torch.no_grad():
                return _backward(ctx, grad_y, grad_h_n, grad_c_n, grad_saved)

    return FusedLstm


_fused_function = None


def _apply_lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """tandem::lstm with its gradient, also under torch.func transforms. Returns (y, h_n, c_n)."""
    global _fused_function
    from torch._functorch.utils import enable_single_level_autograd_function
    if _fused_function is None:
        _fused_function = _single_level_function()
    with enable_single_level_autograd_function():
        y, h_n, c_n, _ = _fused_function.apply(x, h0, c0, w_ih, w_hh, b_ih, b_hh)
    return y, h_n, c_n


# ---- nn.LSTM through the fused op ----


def _fusable_module(m):
    """The module-level conditions: a plain nn.LSTM (its own forward), unidirectional, with biases, no
    projection."""
    return (isinstance(m, torch.nn.LSTM) and type(m).forward is torch.nn.LSTM.forward and m.mode == "LSTM"
            and not m.bidirectional and m.bias and getattr(m, "proj_size", 0) == 0)


def _layer_weights(m, layer):
    # Read through the attributes on every call: functional_call swaps tensors in there.
    return [getattr(m, f"{kind}_l{layer}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


# The dtypes tandem::lstm takes (every input of one of them; its outputs, saved included, in that dtype, as
# PyTorch's cuDNN LSTM keeps its outputs and states in the input's dtype).
FUSABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _fusable_call(m, input, hx):
    """The call-level conditions: a batched tensor of a FUSABLE_DTYPES dtype with no empty dim, the layers'
    weights of that dtype, and (h0, c0) absent or of that dtype and nn.LSTM's batched shape [num_layers, B, H]."""
    if not isinstance(input, torch.Tensor) or input.dim() != 3 or input.dtype not in FUSABLE_DTYPES:
        return False
    if input.numel() == 0:
        return False
    dtype = input.dtype
    weights = [w for layer in range(m.num_layers) for w in _layer_weights(m, layer)]
    if not all(isinstance(w, torch.Tensor) and w.dtype == dtype for w in weights):
        return False
    if hx is None:
        return True
    batch = input.shape[0] if m.batch_first else input.shape[1]
    expected = (m.num_layers, batch, m.hidden_size)
    return (isinstance(hx, (tuple, list)) and len(hx) == 2
            and all(isinstance(s, torch.Tensor) and tuple(s.shape) == expected and s.dtype == dtype for s in hx))


def _fused_forward(m, original):
    """A forward for `m` that runs its layers through tandem::lstm, or `original` where it cannot."""

    def forward(input, hx=None):
        if not _fusable_call(m, input, hx):
            return original(input, hx)
        x = input.transpose(0, 1) if m.batch_first else input
        if hx is None:
            zeros = torch.zeros(m.num_layers, x.shape[1], m.hidden_size, dtype=x.dtype, device=x.device)
            h0, c0 = zeros, zeros
        else:
            h0, c0 = hx
        h_n, c_n = [], []
        for layer in range(m.num_layers):
            w_ih, w_hh, b_ih, b_hh = _layer_weights(m, layer)
            x, h, c = _apply_lstm(x, h0[layer], c0[layer], w_ih, w_hh, b_ih, b_hh)
            h_n.append(h)
            c_n.append(c)
            if m.training and m.dropout > 0 and layer < m.num_layers - 1:
                x = F.dropout(x, p=m.dropout, training=True)
        output = x.transpose(0, 1) if m.batch_first else x
        return output, (torch.stack(h_n), torch.stack(c_n))

    return forward


@contextlib.contextmanager
def fused_lstm(module):
    """While inside, every nn.LSTM in `module` that fusion handles (mode LSTM, unidirectional, bias=True,
    proj_size=0; at call time a batched float32, bfloat16 or float16 input, with weights and state of its
    dtype) runs its layers through tandem::lstm, with nn.LSTM's
    inputs and outputs (batch_first, (h0, c0) or zeros, dropout between layers in training mode). Others keep
    their own forward. Does nothing unless available()."""
    replaced = []
    if available():
        _register_ops()
        for m in module.modules():
            if _fusable_module(m):
                had_own = "forward" in m.__dict__
                previous = m.__dict__.get("forward")
                m.forward = _fused_forward(m, m.forward)
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

__all__ = ["available", "fused_lstm", "lstm_backward_reference", "lstm_forward_reference"]
