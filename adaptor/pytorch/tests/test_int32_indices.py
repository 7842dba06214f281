"""An nn.Embedding model fed int32 token ids, captured, lowered and trained through a CPU tandemd.

PyTorch's embedding takes int32 ids as well as int64 ones, and so does Tandem: the IR keeps the int32 feed
(nothing casts it to int64), embedding and embedding_dense_backward read it as it is, and ten momentum-SGD
steps give PyTorch's eager float32 losses and weights. A bad int32 id fails its step with the node and the
value named, and changes no weight. The class labels stay int64: torch 1.13's CPU nll_loss refuses int32
labels (Tandem's nll_loss takes them; kernels/cpu/index_dtype_test.cc covers that).
"""

import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, RTOL, assert_losses_close, eager_losses, relative_error, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop

VOCAB, WIDTH, CLASSES, BATCH, LENGTH = 50, 16, 5, 8, 12


class BagOfTokens(nn.Module):
    """Token ids [B, L] -> embeddings, averaged over L -> class logits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH, padding_idx=0)
        self.fc = nn.Linear(WIDTH, CLASSES)

    def forward(self, ids):
        return self.fc(torch.tanh(self.embed(ids).mean(dim=1)))


def _model():
    torch.manual_seed(0)
    return BagOfTokens()


def _batches(steps):
    g = torch.Generator().manual_seed(1)
    # Few distinct ids per batch: rows repeat, so the gradient sums over repeated ids; id 0 is padding.
    return [(torch.randint(0, VOCAB, (BATCH, LENGTH), generator=g, dtype=torch.int32),
             torch.randint(0, CLASSES, (BATCH,), generator=g)) for _ in range(steps)]


def _optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)


class Int32IndicesTest(unittest.TestCase):
    def test_lowered_graph_keeps_the_int32_ids(self):
        model = _model()
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, _optimizer(model), _batches(1)[0])
        feeds = {f["name"]: f["dtype"] for f in lowered.graph["feeds"]}
        self.assertEqual(feeds["batch/0"], "INT32")
        self.assertEqual(feeds["batch/1"], "INT64")
        readers = {n["op"] for n in lowered.graph["nodes"] if "batch/0" in n.get("inputs", [])}
        self.assertEqual(readers, {"embedding", "embedding_dense_backward"})
        self.assertNotIn("_to_copy", {n["op"] for n in lowered.graph["nodes"]})

    def test_embedding_model_trains_like_pytorch(self):
        steps = 10
        model, reference = _model(), _model()
        batches = _batches(steps)
        job = tandem.torch.train(model, F.cross_entropy, _optimizer(model), batches[0], endpoint=_daemon.endpoint,
                                 name="bag-of-tokens-int32")
        with job:
            losses = [float(job.step(x, y)) for x, y in batches]
            trained = job.state_dict()
        ref_losses = eager_losses(reference, F.cross_entropy, _optimizer(reference), batches)
        self.assertEqual(len(losses), steps)
        assert_losses_close(self, losses, ref_losses, RTOL)
        expected = reference.state_dict()
        self.assertEqual(sorted(trained), sorted(expected))
        for key, value in expected.items():
            err = relative_error(trained[key], value)
            self.assertLessEqual(err, RTOL, f"{key}: relative error {err:.3g} after {steps} steps")
        # The embedding moved (so the comparison above is not of two untouched tables), except its padding row.
        initial = _model().embed.weight.detach()
        self.assertGreater((trained["embed.weight"] - initial).abs().max().item(), 1e-3)
        self.assertTrue(torch.equal(trained["embed.weight"][0], initial[0]))

    def test_bad_int32_id_fails_the_step_and_changes_no_weight(self):
        model = _model()
        x, y = _batches(1)[0]
        job = tandem.torch.train(model, F.cross_entropy, _optimizer(model), (x, y), endpoint=_daemon.endpoint,
                                 name="bag-of-tokens-bad-id")
        with job:
            before = job.read("embed.weight")
            bad = x.clone()
            bad[2, 5] = VOCAB + 7
            with self.assertRaises(tandem.IterationError) as ctx:
                job.step(bad, y)
            self.assertEqual(ctx.exception.code, tandem.errors.INVALID_ARGUMENT)
            message = str(ctx.exception)
            self.assertIn("embedding", message)
            self.assertIn(str(VOCAB + 7), message)
            self.assertTrue(torch.equal(job.read("embed.weight"), before))
            # The job goes on with good ids.
            self.assertGreater(float(job.step(x, y)), 0)


if __name__ == "__main__":
    unittest.main()
