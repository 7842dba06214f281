"""Advanced indexing, the scatters and the strided views through tandemd: small models whose training steps lower
to index.Tensor (with a None entry: indexed_dims), index_put, slice assignment (in-place writes through views),
select_scatter, flip, repeat, scatter_add, gather, scatter_reduce.two (mean), diagonal and diagonal_scatter
register with a CPU tandemd, and their first steps give PyTorch's losses (float32, relative 1e-4), SGD with
momentum."""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, assert_losses_close, missing_op_message, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

STEPS = 3
RTOL = 1e-4

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


class IndexNet(nn.Module):
    """A learned table read at fixed rows (as Swin's relative position bias), columns picked with a None first,
    a select_scatter, a flip and a repeat."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(20, 6))
        self.register_buffer("rows", torch.randint(0, 20, (12,)))
        self.register_buffer("cols", torch.tensor([5, 0, 3, -1]))
        self.linear = nn.Linear(6, 6)
        self.head = nn.Linear(12 * 4 * 2, 3)

    def forward(self, x):  # [B, 12, 6]
        h = self.linear(x) + self.table[self.rows]
        h = h[:, :, self.cols]  # [B, 12, 4]
        h = torch.select_scatter(h, h[:, 7] * 3, 1, 7)
        h = torch.flip(h, [1]) + h
        return self.head(h.repeat(1, 1, 2).flatten(1))


class SliceAssignNet(nn.Module):
    """In-place writes through views: a slice of a cloned parameter zeroed (as Swin V2 zeroes the middle third
    of its qkv bias) and a slice of an activation assigned from another slice. Their backward goes through
    autograd's CopySlices, which torch 1.13's functorch traces without the view's storage offset
    (compat.engine_grad)."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(12))
        self.linear = nn.Linear(6, 12)
        self.head = nn.Linear(12 * 12, 3)

    def forward(self, x):  # [B, 12, 6]
        b = self.bias.clone()
        b[4:8].zero_()
        h = self.linear(x) * b
        h[:, :, 1:3] = h[:, :, 5:7] * 2
        return self.head(h.flatten(1))


class ScatterNet(nn.Module):
    """Features summed into segments (scatter_add; its backward gathers) and a diagonal (its backward is
    diagonal_scatter)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.register_buffer("segments", torch.randint(0, 5, (4, 12, 6)))
        self.head = nn.Linear(5 * 6 + 6, 3)

    def forward(self, x):  # [4, 12, 6]
        h = self.linear(x)
        pooled = torch.zeros(x.shape[0], 5, 6).scatter_add(1, self.segments, h)
        diagonal = torch.diagonal(h[:, :6, :], dim1=1, dim2=2)
        return self.head(torch.cat([pooled.flatten(1), diagonal], 1))


class ScatterMeanNet(nn.Module):
    """Rows averaged into segments (scatter_reduce.two with its scratch output, the mean's counts), self left
    out."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.register_buffer("segments", torch.randint(0, 3, (4, 12, 6)))
        self.head = nn.Linear(3 * 6, 3)

    def forward(self, x):  # [4, 12, 6]
        h = self.linear(x)
        pooled = torch.zeros(x.shape[0], 3, 6).scatter_reduce(1, self.segments, h, "mean", include_self=False)
        return self.head(pooled.flatten(1))


class IndexOpsTrainingTest(unittest.TestCase):
    def train_both(self, model_class):
        torch.manual_seed(0)
        model = model_class()
        reference = copy.deepcopy(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randn(4, 12, 6, generator=g), torch.randint(0, 3, (4,), generator=g))
                   for _ in range(STEPS)]
        try:
            job = tandem.torch.train(model, F.cross_entropy, optimizer, batches[0], endpoint=_daemon.endpoint,
                                     name=model_class.__name__)
        except tandem.UnsupportedOpError as e:
            self.fail(missing_op_message(e))
        with job:
            losses = [job.step(*batch) for batch in batches]
        ref_losses = []
        for x, y in batches:
            ref_optimizer.zero_grad()
            loss = F.cross_entropy(reference(x), y)
            loss.backward()
            ref_optimizer.step()
            ref_losses.append(loss.item())
        assert_losses_close(self, losses, ref_losses, RTOL)

    def test_indexing_select_scatter_flip_repeat(self):
        self.train_both(IndexNet)

    def test_slice_assignment(self):
        self.train_both(SliceAssignNet)

    def test_scatter_add_and_diagonal(self):
        self.train_both(ScatterNet)

    def test_scatter_reduce_mean(self):
        self.train_both(ScatterMeanNet)


if __name__ == "__main__":
    unittest.main()
