"""Decompositions of Tandem's own, for ops that PyTorch's tables leave whole and the daemon does not run:
torch 1.13 has none for baddbmm (the batched attention scores of its nn.MultiheadAttention), and clamp.Tensor
(clamp with tensor bounds) is in the Core ATen opset but is maximum and minimum of its bounds, and the per-pixel
classification loss (nll_loss2d, from cross_entropy on (N, C, H, W) logits: segmentation models) is nll_loss over
the pixels laid out as rows; fill with a tensor value is that value expanded; and the primitives sum and
broadcast_in_dim that torch 1.13's references (F.normalize) leave in a trace are their ATen ops.
compat.decompositions adds these to PyTorch's table where the table has no entry for the op."""

import torch

aten = torch.ops.aten


def _baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    product = aten.bmm.default(batch1, batch2)
    if alpha != 1:
        product = aten.mul.Scalar(product, alpha)
    if beta == 0:
        return product
    return aten.add.Tensor(product, self if beta == 1 else aten.mul.Scalar(self, beta))


def _clamp_tensor(self, min=None, max=None):
    out = self
    if min is not None:
        out = aten.maximum.default(out, min)
    if max is not None:
        out = aten.minimum.default(out, max)
    return out


def _class_last(x):
    """(N, C, *spatial) -> the permutation that moves C last, and its inverse."""
    order = [0] + list(range(2, x.dim())) + [1]
    inverse = [order.index(d) for d in range(x.dim())]
    return order, inverse


def _as_rows(x):
    """(N, C, *spatial) -> (N * prod(spatial), C): one row of class scores per pixel."""
    order, _ = _class_last(x)
    return aten.reshape.default(aten.permute.default(x, order), [-1, x.shape[1]])


def _nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    output, total_weight = aten.nll_loss_forward.default(_as_rows(self), aten.reshape.default(target, [-1]), weight,
                                                         reduction, ignore_index)
    if reduction == 0:  # Reduction::None: one loss per pixel, of target's shape
        output = aten.reshape.default(output, list(target.shape))
    return output, total_weight


def _nll_loss2d_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    if reduction == 0:
        grad_output = aten.reshape.default(grad_output, [-1])
    rows = aten.nll_loss_backward.default(grad_output, _as_rows(self), aten.reshape.default(target, [-1]), weight,
                                          reduction, ignore_index, total_weight)
    order, inverse = _class_last(self)
    channels_last = aten.reshape.default(rows, [self.shape[d] for d in order])
    return aten.permute.default(channels_last, inverse)


def _fill_tensor(self, value):
    # fill_ with a 0-dim tensor (swin's attention mask, `mask[...] = t`): the value, in self's dtype, everywhere.
    value = aten._to_copy.default(value, dtype=self.dtype)
    return aten.clone.default(aten.expand.default(value, list(self.shape)))


def _prims_sum(inp, dims, *, output_dtype=None):
    # torch 1.13's references (F.normalize's norm) leave prims.sum in a trace: sum over `dims`, not kept.
    out = aten.sum.dim_IntList(inp, list(dims))
    return out if output_dtype is None else aten._to_copy.default(out, dtype=output_dtype)


def _prims_broadcast_in_dim(a, shape, broadcast_dimensions):
    # a's dim i becomes dim broadcast_dimensions[i] of `shape`; the others are new, of size 1, then expanded.
    kept = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        kept[d] = a.shape[i]
    return aten.expand.default(aten.reshape.default(a, kept), list(shape))


def _prims_table():
    prims = getattr(torch.ops, "prims", None)
    if prims is None or not hasattr(prims, "sum"):
        return {}
    return {prims.sum.default: _prims_sum, prims.broadcast_in_dim.default: _prims_broadcast_in_dim}


def table():
    """{OpOverload: function} for the ops above."""
    return {**_prims_table(), aten.baddbmm.default: _baddbmm, aten.clamp.Tensor: _clamp_tensor,
            aten.nll_loss2d_forward.default: _nll_loss2d_forward,
            aten.nll_loss2d_backward.default: _nll_loss2d_backward, aten.fill.Tensor: _fill_tensor}
