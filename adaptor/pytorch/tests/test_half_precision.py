"""A bfloat16 model (`model.to(torch.bfloat16)`) captured, lowered and trained through a CPU tandemd.

The IR keeps PyTorch's 16-bit dtypes (feeds, parameters, every intermediate), and ten SGD steps of a small
bfloat16 MLP give PyTorch's bfloat16 eager losses within bfloat16 tolerance. Not bit for bit: both round
every op's float32 result to bfloat16 (unit roundoff u = 2^-8 = 3.9e-3), but their float32 sums run in
different orders, and the IR's SGD update is a multiply then a subtract (two roundings) where eager
PyTorch fuses them (`add_(grad, alpha=-lr)`, one rounding), so weights drift apart by an ulp here and there.
A 5u relative bound on each loss (2e-2) allows for that drift over ten steps.
"""

import unittest

import common  # noqa: F401  (paths)
from common import tandem, torch
from daemon import Daemon

import torch.nn as nn
import torch.nn.functional as F

_daemon = None
RTOL_BF16 = 5 * 2.0 ** -8


def setUpModule():
    global _daemon
    _daemon = Daemon().start()


def tearDownModule():
    _daemon.stop()


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
        ref_losses = []
        for x, y in batches:
            ref_opt.zero_grad()
            loss = F.cross_entropy(reference(x), y)
            loss.backward()
            ref_opt.step()
            ref_losses.append(loss.item())
        self.assertEqual(len(losses), steps)
        for i, (a, e) in enumerate(zip(losses, ref_losses)):
            a = float(a)
            self.assertLessEqual(abs(a - e), RTOL_BF16 * abs(e), f"step {i}: loss {a} through tandemd, {e} in PyTorch")
        # Training moved the loss, in both (so the comparison above is not of two constants).
        self.assertLess(ref_losses[-1], ref_losses[0])
        self.assertLess(float(losses[-1]), float(losses[0]))
        for key, value in reference.state_dict().items():
            self.assertEqual(trained[key].dtype, torch.bfloat16, key)
            diff = (trained[key].float() - value.float()).norm().item()
            self.assertLessEqual(diff, 4 * RTOL_BF16 * value.float().norm().item(), key)


if __name__ == "__main__":
    unittest.main()
