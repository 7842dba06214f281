"""A bfloat16 transformer encoder (the reference model of examples/pytorch/models.py, small) captured, lowered
and trained through a CPU tandemd, against PyTorch's bfloat16 eager steps.

The lowered step keeps bfloat16 everywhere except layer norm's mean and rstd, which are float32 in the IR (PyTorch's
CPU kernel, which the trace runs, rounds them to bfloat16; the registry keeps them in float32 as PyTorch's CUDA
kernel does). Attention traces to bmm and softmax (torch 1.13, and torch 2.x's math path, which the capture forces).
Ten SGD steps on one batch give PyTorch's bfloat16 eager losses within bfloat16 tolerance: both round every op's
float32 result to bfloat16 (unit roundoff u = 2^-8), but their float32 sums run in different orders and the IR's
update rounds twice where eager PyTorch fuses it, so each loss gets 5u relative (as test_half_precision.py) and the
trained weights 4 times that, normwise.

From torch 2.5 on, a bfloat16 `_safe_softmax` over masked scores (a row of all -inf gives zeros) trains the same way.
"""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, assert_losses_close, eager_losses, models, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop

RTOL_BF16 = 5 * 2.0 ** -8
STEPS = 10


def _encoder():
    """(bfloat16 model, loss_fn, batch): a 2-layer encoder LM, d_model 32, 4 heads, sequence 12, batch 4."""
    torch.manual_seed(0)
    model, loss_fn, make_batch = models.transformer(vocab=40, d_model=32, heads=4, ff=64, layers=2, dropout=0.0,
                                                    seq=12, batch=4)
    return model.to(torch.bfloat16), loss_fn, make_batch(torch.Generator().manual_seed(1))


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


class HalfTransformerTest(unittest.TestCase):
    def assert_trains_like_pytorch(self, model, loss_fn, batch, name):
        """Trains `model` STEPS steps on `batch` through tandemd and a copy in eager PyTorch; compares."""
        reference = copy.deepcopy(model)
        opt, ref_opt = _sgd(model.parameters()), _sgd(reference.parameters())
        job = tandem.torch.train(model, loss_fn, opt, batch, endpoint=_daemon.endpoint, name=name)
        with job:
            losses = [float(job.step(*batch)) for _ in range(STEPS)]
            trained = job.state_dict()
        ref_losses = eager_losses(reference, loss_fn, ref_opt, [batch] * STEPS)
        assert_losses_close(self, losses, ref_losses, RTOL_BF16)
        # Training moved the loss, in both (so the comparison above is not of two constants).
        self.assertLess(ref_losses[-1], ref_losses[0])
        self.assertLess(losses[-1], losses[0])
        parameters = dict(reference.named_parameters())
        for key, value in reference.state_dict().items():
            self.assertEqual(trained[key].dtype, torch.bfloat16, key)
            if key not in parameters:  # a buffer (a mask of -inf) stays as it was
                self.assertTrue(torch.equal(trained[key], value), key)
                continue
            diff = (trained[key].float() - value.float()).norm().item()
            self.assertLessEqual(diff, 4 * RTOL_BF16 * value.float().norm().item(), key)

    def test_lowered_encoder_keeps_bfloat16_with_float32_layer_norm_statistics(self):
        model, loss_fn, batch = _encoder()
        _, lowered = tandem.torch.capture_training_job(model, loss_fn, _sgd(model.parameters()), batch,
                                                       record_values=True)
        ops = {n["op"] for n in lowered.graph["nodes"]}
        self.assertTrue({"bmm", "native_layer_norm", "native_layer_norm_backward", "embedding_dense_backward"} <= ops,
                        ops)
        self.assertTrue({"_softmax", "_safe_softmax"} & ops, ops)
        for name, value in lowered.persistent:
            self.assertEqual(value.dtype, torch.bfloat16, name)
        norms = [n for n in lowered.graph["nodes"] if n["op"] == "native_layer_norm"]
        self.assertEqual(len(norms), 5)  # two per layer and the final one
        for node in norms:
            declared = [d["dtype"] for d in node["declared_outputs"]]
            self.assertEqual(declared, ["BFLOAT16", "FLOAT32", "FLOAT32"], node.get("label"))
            for out in node["outputs"][1:]:
                if out in lowered.values:
                    self.assertEqual(lowered.values[out].dtype, torch.float32, out)

    def test_encoder_sgd_matches_pytorch_bfloat16(self):
        model, loss_fn, batch = _encoder()
        self.assert_trains_like_pytorch(model, loss_fn, batch, "encoder-bf16")

    @unittest.skipUnless(hasattr(torch.ops.aten, "_safe_softmax"), "aten::_safe_softmax is new in torch 2.5")
    def test_safe_softmax_of_masked_scores_matches_pytorch_bfloat16(self):
        class MaskedScores(nn.Module):
            """Scores of 6 keys, a mask (a buffer: row 3 hides every key, row 5 the last two), _safe_softmax and a
            classifier. The fully masked row's probabilities are zeros, not NaN (softmax's), so its loss and
            gradients stay finite."""

            def __init__(self):
                super().__init__()
                self.score = nn.Linear(8, 6)
                self.out = nn.Linear(6, 5)
                mask = torch.zeros(8, 6)
                mask[3, :] = float("-inf")
                mask[5, 4:] = float("-inf")
                self.register_buffer("mask", mask)

            def forward(self, x):
                return self.out(torch.ops.aten._safe_softmax(self.score(x) + self.mask, -1))

        torch.manual_seed(0)
        model = MaskedScores().to(torch.bfloat16)
        g = torch.Generator().manual_seed(1)
        batch = (torch.randn(8, 8, generator=g).to(torch.bfloat16), torch.randint(0, 5, (8,), generator=g))
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, _sgd(model.parameters()), batch)
        safe = [n for n in lowered.graph["nodes"] if n["op"] == "_safe_softmax"]
        self.assertEqual(len(safe), 1)
        self.assertEqual(safe[0]["declared_outputs"][0]["dtype"], "BFLOAT16")
        self.assert_trains_like_pytorch(model, F.cross_entropy, batch, "safe-softmax-bf16")


if __name__ == "__main__":
    unittest.main()
