"""A bfloat16 model (`model.to(torch.bfloat16)`) captured, lowered and trained through a CPU tandemd.

The IR keeps PyTorch's 16-bit dtypes (feeds, parameters, every intermediate), and ten SGD steps of a small
bfloat16 MLP give PyTorch's bfloat16 eager losses within bfloat16 tolerance. Not bit for bit: both round
every op's float32 result to bfloat16 (unit roundoff u = 2^-8 = 3.9e-3), but their float32 sums run in
different orders, and the IR's SGD update is a multiply then a subtract (two roundings) where eager
PyTorch fuses them (`add_(grad, alpha=-lr)`, one rounding), so weights drift apart by an ulp here and there.
A 5u relative bound on each loss (2e-2) allows for that drift over ten steps.

The optimizer steps of a bfloat16 model (Adam with amsgrad, AdamW with weight decay, SGD with Nesterov momentum
and weight decay) lower to 16-bit elementwise ops with float32 rank-0 step sizes (sqrt, maximum, mul, div, ...);
tandemd fuses each parameter's update into one fused_elementwise node (compiler/fuse_elementwise.h), which must give
the unfused ops' bits exactly: a daemon with fusion and one without (`--fuse_elementwise=false`) give the same
losses and weights bit for bit, both within bfloat16 tolerance of PyTorch's bfloat16 eager step, and the fused
daemon's graph has at least (update ops - 1) nodes fewer per parameter (its `job registered` log line counts them).
"""

import re
import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, assert_losses_close, eager_losses, tandem, torch
from daemon import Daemon

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop

RTOL_BF16 = 5 * 2.0 ** -8


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 5)).to(torch.bfloat16)


def _batches(steps):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 12, generator=g).to(torch.bfloat16), torch.randint(0, 5, (16,), generator=g))
            for _ in range(steps)]


class HalfPrecisionTest(unittest.TestCase):
    def test_lowered_graph_keeps_bfloat16(self):
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, opt, _batches(1)[0])
        feeds = {f["name"]: f["dtype"] for f in lowered.graph["feeds"]}
        self.assertEqual(feeds["batch/0"], "BFLOAT16")
        self.assertEqual(feeds["batch/1"], "INT64")
        for name, value in lowered.persistent:
            self.assertEqual(value.dtype, torch.bfloat16, name)
        ops = {n["op"] for n in lowered.graph["nodes"]}
        self.assertTrue({"addmm", "relu", "_log_softmax", "nll_loss_forward"} <= ops, ops)

    def test_mlp_sgd_losses_match_pytorch_bfloat16(self):
        steps = 10
        model = _mlp()
        reference = _mlp()
        batches = _batches(1) * steps  # one batch again and again, so that the loss must fall
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
        job = tandem.torch.train(model, F.cross_entropy, opt, batches[0], endpoint=_daemon.endpoint,
                                 name="mlp-bf16")
        with job:
            losses = [job.step(x, y) for x, y in batches]
            trained = job.state_dict()
        ref_losses = eager_losses(reference, F.cross_entropy, ref_opt, batches)
        self.assertEqual(len(losses), steps)
        assert_losses_close(self, losses, ref_losses, RTOL_BF16)
        # Training moved the loss, in both (so the comparison above is not of two constants).
        self.assertLess(ref_losses[-1], ref_losses[0])
        self.assertLess(float(losses[-1]), float(losses[0]))
        for key, value in reference.state_dict().items():
            self.assertEqual(trained[key].dtype, torch.bfloat16, key)
            diff = (trained[key].float() - value.float()).norm().item()
            self.assertLessEqual(diff, 4 * RTOL_BF16 * value.float().norm().item(), key)


class HalfPrecisionOptimizerTest(unittest.TestCase):
    """Adam, AdamW and SGD steps of a bfloat16 MLP, fused and unfused, against PyTorch's bfloat16 eager."""

    STEPS = 10

    @classmethod
    def setUpClass(cls):
        cls.fused = Daemon("--log_level=info").start()
        cls.unfused = Daemon("--log_level=info", "--fuse_elementwise=false").start()

    @classmethod
    def tearDownClass(cls):
        cls.fused.stop()
        cls.unfused.stop()

    @staticmethod
    def _nodes(daemon, name):
        """The node count of job `name` as the daemon built it (after its graph passes), from its log."""
        counts = re.findall(r"job registered .*name=" + re.escape(name) + r" .*nodes=(\d+)", daemon.log())
        return int(counts[-1]) if counts else None

    def _train(self, daemon, name, make_optimizer, batches):
        model = _mlp()
        job = tandem.torch.train(model, F.cross_entropy, make_optimizer(model.parameters()), batches[0],
                                 endpoint=daemon.endpoint, name=name)
        with job:
            losses = [float(job.step(x, y)) for x, y in batches]
            state = job.state_dict()
        return losses, state, self._nodes(daemon, name)

    def _check(self, name, make_optimizer, update_ops, min_fused_away_per_parameter):
        batches = _batches(1) * self.STEPS
        model = _mlp()
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, make_optimizer(model.parameters()),
                                                       batches[0])
        ops = {n["op"] for n in lowered.graph["nodes"]}
        self.assertTrue(update_ops <= ops, f"{update_ops - ops} missing from the lowered step {sorted(ops)}")

        losses, state, nodes = self._train(self.fused, name, make_optimizer, batches)
        plain_losses, plain_state, plain_nodes = self._train(self.unfused, name, make_optimizer, batches)
        # Fusion changes no bit.
        self.assertEqual(losses, plain_losses)
        for key, value in plain_state.items():
            self.assertEqual(state[key].dtype, torch.bfloat16, key)
            self.assertTrue(torch.equal(state[key], value), f"{key} differs between fused and unfused")
        # ... and does fuse: each parameter's update became one node.
        self.assertIsNotNone(nodes, self.fused.log())
        self.assertIsNotNone(plain_nodes, self.unfused.log())
        parameters = len(list(model.parameters()))
        self.assertLessEqual(nodes, plain_nodes - min_fused_away_per_parameter * parameters,
                             f"{nodes} nodes fused, {plain_nodes} unfused")

        reference = _mlp()
        ref_losses = eager_losses(reference, F.cross_entropy, make_optimizer(reference.parameters()), batches)
        assert_losses_close(self, losses, ref_losses, RTOL_BF16)
        self.assertLess(ref_losses[-1], ref_losses[0])
        self.assertLess(losses[-1], losses[0])
        for key, value in reference.state_dict().items():
            diff = (state[key].float() - value.float()).norm().item()
            self.assertLessEqual(diff, 4 * RTOL_BF16 * value.float().norm().item(), key)
        return losses

    def test_adam_with_amsgrad(self):
        # exp_avg, exp_avg_sq, their maximum, sqrt, the bias corrections and the parameter: 13 ops, one node.
        self._check("adam-bf16", lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
                    {"sqrt", "maximum", "div.Tensor", "add.Scalar"}, 12)

    def test_adamw_with_weight_decay(self):
        losses = self._check("adamw-bf16", lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=1.0),
                             {"sqrt", "div.Tensor", "mul.Tensor"}, 12)
        # The decay is large enough to show in bfloat16 (a factor 0.99 per step): Adam's losses differ.
        adam_losses, _, _ = self._train(self.fused, "adam-bf16-plain", lambda p: torch.optim.Adam(p, lr=1e-2),
                                        _batches(1) * self.STEPS)
        self.assertNotEqual(losses, adam_losses)

    def test_sgd_with_nesterov_momentum_and_weight_decay(self):
        self._check("sgd-bf16", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
                    {"mul.Scalar", "add.Tensor", "mul.Tensor", "sub.Tensor"}, 5)


if __name__ == "__main__":
    unittest.main()
