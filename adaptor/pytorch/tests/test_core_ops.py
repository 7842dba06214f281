"""Core ATen ops end to end: small modules that each lean on a group of ops (forward and backward) train through a
CPU tandemd and give PyTorch's losses and weights after three SGD steps (float32, relative 1e-5).

Each module is what a user writes (torch functions, nn activations), so the capture's decompositions, the
lowering's attribute names and the daemon's kernels are all exercised; a missing op fails with a "MISSING OP"
message naming it.
"""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, assert_losses_close, missing_op_message, relative_error, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

STEPS = 3
RTOL = 1e-5

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


class Pointwise(nn.Module):
    """y = f(w * x + b) for a pointwise f."""

    def __init__(self, f, features=6):
        super().__init__()
        self.f = f
        self.w = nn.Parameter(torch.linspace(0.3, 0.9, features))
        self.b = nn.Parameter(torch.linspace(-0.2, 0.2, features))

    def forward(self, x):
        return self.f(self.w * x + self.b)


class Masks(nn.Module):
    """Boolean and integer arithmetic deciding which values pass: bitwise and logical ops on masks, integer
    remainder and floor division for index arithmetic (as roll and window partitioning do)."""

    def __init__(self, features=8):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, features))

    def forward(self, x):
        y = self.w * x
        band = (y > -0.5) & (y < 0.8)
        keep = torch.logical_or(band, torch.logical_not(y > 1.5)) ^ (y < -1.2)
        y = torch.where(~keep, torch.zeros_like(y), y)
        n = y.shape[-1]
        shifted = torch.remainder(torch.arange(n) + 3, n)
        halves = torch.div(torch.arange(n), 2, rounding_mode="floor")
        return y[:, shifted] + y[:, halves] * torch.fmod(torch.arange(n), 3).to(y.dtype)


class Binary(nn.Module):
    """atan2, pow of two tensors, clamp between tensor bounds, a rounding division."""

    def __init__(self, features=5):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.4, 1.2, features))
        self.v = nn.Parameter(torch.linspace(0.8, 1.6, features))

    def forward(self, x):
        a = torch.atan2(self.w * x, self.v)
        p = torch.pow(self.v, self.w * x.abs() + 0.5)
        c = torch.clamp(x * self.v, min=-self.w, max=self.w)
        return a + p + c + torch.div(x, 0.3, rounding_mode="trunc") * 0.01


class BatchedScores(nn.Module):
    """beta * bias + alpha * (q @ k^T), as nn.MultiheadAttention computes its scores under torch 1.13."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)
        self.bias = nn.Parameter(torch.linspace(-0.1, 0.1, 3 * 3).reshape(1, 3, 3))

    def forward(self, x):
        q = self.q(x)
        return torch.baddbmm(self.bias, q, x.transpose(1, 2), beta=0.5, alpha=0.25)


class Counts(nn.Module):
    """A linear map scaled by counts of positive inputs: sums, a cumulative sum and a product of a bool or int32
    mask, which PyTorch computes in int64 (a segmentation loss counts the pixels it keeps so)."""

    def __init__(self, features=8):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x):
        keep = x > 0
        count = (keep.sum(dim=1, keepdim=True) + keep.sum() + torch.cumsum(keep, dim=1)
                 + keep.int().prod(dim=1, keepdim=True))
        return self.lin(x) * count


CASES = {
    "trigonometric": (lambda: Pointwise(lambda t: torch.sin(t) * torch.cos(t) + torch.tan(0.5 * t) + torch.atan(t)
                                        + torch.asin(0.5 * torch.tanh(t)) + torch.acos(0.4 * torch.tanh(t))),
                      (4, 6)),
    "hyperbolic": (lambda: Pointwise(lambda t: torch.sinh(t) + torch.cosh(0.5 * t) + torch.asinh(t)
                                     + torch.atanh(0.5 * torch.tanh(t)) + torch.acosh(1.5 + t * t)), (4, 6)),
    "exponential": (lambda: Pointwise(lambda t: torch.erf(t) + torch.expm1(0.3 * t) + torch.log1p(t * t)
                                      + torch.log2(1 + t * t) + torch.log10(2 + t) + torch.reciprocal(2 + t)),
                    (4, 6)),
    "rounding": (lambda: Pointwise(lambda t: t * (torch.floor(3 * t) + torch.ceil(2 * t) + torch.round(t)
                                                  + torch.trunc(4 * t) + torch.sign(t)) + torch.abs(t)), (4, 6)),
    "activations": (lambda: Pointwise(lambda t: F.hardtanh(t, -0.4, 0.6) + F.leaky_relu(t, 0.1) + F.elu(t, 1.3)
                                      + F.relu6(3 * t) + F.hardswish(t) + F.silu(t) + F.mish(t) + F.softplus(t)
                                      + F.hardsigmoid(t) + F.gelu(t, approximate="tanh") + F.selu(t)
                                      + F.celu(t, 0.7) + F.logsigmoid(t)), (4, 6)),
    "inplace_activations": (lambda: Pointwise(nn.Sequential(nn.Linear(6, 6), nn.ELU(inplace=True),
                                                            nn.Linear(6, 6), nn.Hardtanh(inplace=True),
                                                            nn.Linear(6, 6), nn.LeakyReLU(0.2, inplace=True))),
                            (4, 6)),
    "masks": (lambda: Masks(), (4, 8)),
    "binary": (lambda: Binary(), (4, 5)),
    "baddbmm": (lambda: BatchedScores(), (2, 3, 4)),
    "integer_counts": (lambda: Counts(), (4, 8)),
}


class CoreOpsTest(unittest.TestCase):
    def train_both(self, make_model, shape):
        torch.manual_seed(0)
        model = make_model()
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)) for _ in range(STEPS)]
        # Outputs shaped like the input, so one loss serves every case.
        batches = [(x, torch.randn(model(x).shape, generator=g)) for x, _ in batches]

        def loss_fn(out, target):
            return F.mse_loss(out, target)

        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        try:
            job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint)
        except tandem.UnsupportedOpError as e:
            self.fail(missing_op_message(e))
        with job:
            losses = [job.step(*b) for b in batches]
            weights = job.state_dict()
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
        ref_losses = []
        for x, y in batches:
            ref_optimizer.zero_grad()
            loss = loss_fn(reference(x), y)
            loss.backward()
            ref_optimizer.step()
            ref_losses.append(loss.item())
        assert_losses_close(self, losses, ref_losses, RTOL)
        for name, value in reference.state_dict().items():
            self.assertLessEqual(relative_error(weights[name], value), 1e-5, name)


class ServingTest(unittest.TestCase):
    def test_eval_mode_batch_norm_serves_as_pytorch(self):
        # Eval-mode batch norm traces to native_batch_norm (torch 1.13) or its Core ATen spelling
        # _native_batch_norm_legit_no_training (torch 2.x); both run as native_batch_norm in the daemon.
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.BatchNorm2d(4))
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
        model.eval()
        x = torch.randn(2, 3, 10, 10)
        with tandem.torch.serve(model, x, endpoint=_daemon.endpoint) as served:
            out = served(x)
        self.assertLessEqual(relative_error(out, model(x).detach()), 1e-5)


class RandomOpsTest(unittest.TestCase):
    def test_dropout_draws_fresh_masks_every_iteration(self):
        # lr = 0: the weights stay put, so the loss changes from step to step only through the masks.
        model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5), nn.Linear(64, 64), nn.Dropout(0.5))
        x, y = torch.randn(32, 64), torch.randn(32, 64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        torch.manual_seed(3)
        job = tandem.torch.train(model, F.mse_loss, optimizer, (x, y), endpoint=_daemon.endpoint)
        # Dropout is native_dropout, or bernoulli.p times the input where a decomposition takes it apart.
        seeds = [n["attrs"]["seed"]["i"] for n in job.graph["nodes"] if n["op"] in ("native_dropout", "bernoulli.p")]
        self.assertEqual(len(seeds), 2)
        self.assertNotEqual(seeds[0], seeds[1], "two dropouts of one shape draw different masks")
        with job:
            losses = [job.step(x, y) for _ in range(4)]
        self.assertEqual(len(set(losses)), 4, f"every iteration draws a new mask: {losses}")
        # Made again under the same torch seed, the job draws the same masks (runs are repeatable).
        torch.manual_seed(3)
        again = tandem.torch.train(model, F.mse_loss, optimizer, (x, y), endpoint=_daemon.endpoint)
        with again:
            self.assertEqual([again.step(x, y) for _ in range(4)], losses)


def _test(name):
    make_model, shape = CASES[name]

    def test(self):
        self.train_both(make_model, shape)
    return test


for _name in CASES:
    setattr(CoreOpsTest, f"test_{_name}", _test(_name))


if __name__ == "__main__":
    unittest.main()
