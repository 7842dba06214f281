"""The math of Tandem's fused recurrent layers, as plain step-by-step torch code (any PyTorch version).

    lstm(x [T,B,I], h0 [B,H], c0 [B,H], w_ih [4H,I], w_hh [4H,H], b_ih [4H], b_hh [4H])
        -> (y [T,B,H], h_n [B,H], c_n [B,H], saved [T,B,5H])
    lstm_backward(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved)
        -> (grad_x, grad_h0, grad_c0, grad_w_ih, grad_w_hh, grad_b [4H], grad_gates [T,B,4H])

    gru(x [T,B,I], h0 [B,H], w_ih [3H,I], w_hh [3H,H], b_ih [3H], b_hh [3H])
        -> (y [T,B,H], h_n [B,H], saved [T,B,4H])
    gru_backward(grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved)
        -> (grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih [3H], grad_b_hh [3H],
            grad_gates_x [T,B,3H], grad_gates_h [T,B,3H])

One layer, one direction, time-major, PyTorch's gate orders (LSTM i, f, g, o; GRU r, z, n). An LSTM step's
saved[t] is cat(i, f, g, o activated, c_t); lstm_backward's grad_b is the gradient of both biases. A GRU step's
saved[t] is cat(r, z, n, hn) with hn = h_{t-1} W_hn^T + b_hn, the hidden part of the new gate that r scales;
its backward's grad_gates_x and grad_gates_h are the gradients of the input and hidden projections (they differ
in the new gate: da_n against da_n * r). The grad_gates outputs are scratch that the daemon's ops own as
outputs. These functions are the CPU implementations of the tandem:: custom ops (fused_rnn.py), so they run
for real while a step is traced on the CPU under torch < 2.0; the daemon's kernels (kernels/cpu and
kernels/cuda recurrent kernels) compute the same. Every output is a new tensor: none aliases an input or
another output.
"""

import torch


def lstm_forward_reference(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """One LSTM layer over the whole sequence, one time step after the other."""
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


def _previous_states(h0, y):
    """h_{t-1} for every step t, [T*B, H]: h0, then y[0 .. T-2]."""
    steps, batch, hidden = y.shape
    return torch.cat((h0.unsqueeze(0), y), dim=0)[:steps].reshape(steps * batch, hidden)


def _weight_gradient(grad_gates, inputs):
    """sum_t grad_gates[t]^T inputs[t]: grad_gates [T, B, G], inputs [T*B, K] or [T, B, K] -> [G, K]."""
    flat = grad_gates.reshape(-1, grad_gates.shape[-1])
    return torch.matmul(flat.t(), inputs.reshape(flat.shape[0], -1))


def lstm_backward_reference(grad_y, grad_h_n, grad_c_n, x, h0, c0, w_ih, w_hh, y, saved):
    """The gradients of one LSTM layer, from lstm_forward_reference's y and saved."""
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
    grad_w_ih = _weight_gradient(grad_gates, x)
    grad_w_hh = _weight_gradient(grad_gates, _previous_states(h0, y))
    grad_b = grad_gates.reshape(steps * batch, 4 * hidden).sum(dim=0)
    # clone(): with no step dh and dc would be the inputs themselves.
    return grad_x, dh.clone(), dc.clone(), grad_w_ih, grad_w_hh, grad_b, grad_gates


def gru_forward_reference(x, h0, w_ih, w_hh, b_ih, b_hh):
    """One GRU layer over the whole sequence: r = sigmoid(x_r + h W_hr + b_hr), z likewise,
    n = tanh(x_n + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h, with x_g = x W_ig + b_ig."""
    steps, batch = x.shape[0], x.shape[1]
    hidden = h0.shape[-1]
    y = x.new_empty((steps, batch, hidden))
    saved = x.new_empty((steps, batch, 4 * hidden))
    x_gates = torch.matmul(x, w_ih.t()) + b_ih
    h = h0
    for t in range(steps):
        h_gates = torch.matmul(h, w_hh.t()) + b_hh
        x_r, x_z, x_n = x_gates[t].chunk(3, dim=1)
        h_r, h_z, hn = h_gates.chunk(3, dim=1)
        r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
        n = torch.tanh(x_n + r * hn)
        h = (1 - z) * n + z * h
        y[t] = h
        saved[t] = torch.cat((r, z, n, hn), dim=1)
    return y, h.clone(), saved


def gru_backward_reference(grad_y, grad_h_n, x, h0, w_ih, w_hh, y, saved):
    """The gradients of one GRU layer, from gru_forward_reference's y and saved."""
    steps, batch = x.shape[0], x.shape[1]
    hidden = h0.shape[-1]
    grad_gates_x = x.new_empty((steps, batch, 3 * hidden))
    grad_gates_h = x.new_empty((steps, batch, 3 * hidden))
    dh = grad_h_n
    for t in reversed(range(steps)):
        r, z, n, hn = saved[t].chunk(4, dim=1)
        h_prev = y[t - 1] if t > 0 else h0
        dh = dh + grad_y[t]
        d_an = dh * (1 - z) * (1 - n * n)
        d_ar = d_an * hn * r * (1 - r)
        d_az = dh * (h_prev - n) * z * (1 - z)
        grad_gates_x[t] = torch.cat((d_ar, d_az, d_an), dim=1)
        grad_gates_h[t] = torch.cat((d_ar, d_az, d_an * r), dim=1)
        dh = dh * z + torch.matmul(grad_gates_h[t], w_hh)
    grad_x = torch.matmul(grad_gates_x, w_ih)
    grad_w_ih = _weight_gradient(grad_gates_x, x)
    grad_w_hh = _weight_gradient(grad_gates_h, _previous_states(h0, y))
    grad_b_ih = grad_gates_x.reshape(steps * batch, 3 * hidden).sum(dim=0)
    grad_b_hh = grad_gates_h.reshape(steps * batch, 3 * hidden).sum(dim=0)
    return grad_x, dh.clone(), grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh, grad_gates_x, grad_gates_h


__all__ = ["gru_backward_reference", "gru_forward_reference", "lstm_backward_reference", "lstm_forward_reference"]
