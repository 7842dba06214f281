"""Decompositions of Tandem's own, for ops that PyTorch's tables leave whole and the daemon does not run:
torch 1.13 has none for baddbmm (the batched attention scores of its nn.MultiheadAttention), and clamp.Tensor
(clamp with tensor bounds) is in the Core ATen opset but is maximum and minimum of its bounds. compat.decompositions
adds these to PyTorch's table where the table has no entry for the op."""

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


def table():
    """{OpOverload: function} for the ops above."""
    return {aten.baddbmm.default: _baddbmm, aten.clamp.Tensor: _clamp_tensor}
