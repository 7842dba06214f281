"""One job, several graphs over one set of weights (train(other_shapes=..., evaluate=...)): the short last batch
of an epoch trains in the same job, and an eval-mode forward pass reads the live weights, both without a copy;
a batch of a shape the job has no graph for is a BatchError that names the shapes it has."""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import RTOL, ModuleDaemon, assert_losses_close, relative_error, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


def _cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Dropout(0.0), nn.Linear(4, 5))


def _batch(g, n):
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g)


class GraphVariantsTest(unittest.TestCase):
    def test_short_batches_and_evaluation_share_the_weights(self):
        torch.manual_seed(0)
        model = _cnn()
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(3)
        # An epoch of 8, 8, then a short batch of 3; twice.
        batches = [_batch(g, n) for n in (8, 8, 3, 8, 8, 3)]
        probe, _ = _batch(g, 5)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
        with tandem.torch.train(model, F.cross_entropy, opt, batches[0], endpoint=_daemon.endpoint,
                                other_shapes=[batches[2]], evaluate=probe) as job:
            losses, expected = [], []
            for i, (x, y) in enumerate(batches):
                ref_opt.zero_grad()
                loss = F.cross_entropy(reference(x), y)
                loss.backward()
                ref_opt.step()
                expected.append(loss.item())
                losses.append(job.step(x, y))
                if i == 2:
                    # Mid-training, the evaluation sees the weights (and batch norm's running statistics) as
                    # they are now.
                    reference.eval()
                    with torch.no_grad():
                        want = reference(probe)
                    reference.train()
                    self.assertLessEqual(relative_error(job.evaluate(probe), want), RTOL * 10)
            assert_losses_close(self, losses, expected, RTOL)
            for key, value in reference.state_dict().items():
                self.assertLessEqual(relative_error(job.read(key), value), RTOL * 10, key)
            # The evaluation changes nothing.
            before = job.read("1.running_mean")
            job.evaluate(probe)
            self.assertTrue(torch.equal(job.read("1.running_mean"), before))

    def test_a_shape_without_a_graph_is_a_batch_error_naming_the_shapes(self):
        torch.manual_seed(0)
        model = _cnn()
        g = torch.Generator().manual_seed(4)
        x, y = _batch(g, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with tandem.torch.train(model, F.cross_entropy, opt, (x, y), endpoint=_daemon.endpoint,
                                other_shapes=[_batch(g, 3)]) as job:
            with self.assertRaises(tandem.BatchError) as ctx:
                job.step(*_batch(g, 5))
            self.assertIn("[8, 3, 8, 8], [8]", str(ctx.exception))
            self.assertIn("[3, 3, 8, 8], [3]", str(ctx.exception))
            self.assertIn("other_shapes", str(ctx.exception))
            with self.assertRaisesRegex(tandem.TandemError, "evaluate="):
                job.evaluate(x)
            self.assertGreater(job.step(x, y), 0)

    def test_the_arena_is_planned_for_the_largest_graph(self):
        torch.manual_seed(0)
        model = _cnn()
        g = torch.Generator().manual_seed(5)
        small, large = _batch(g, 2), _batch(g, 64)
        other = copy.deepcopy(model)
        alone = tandem.torch.train(other, F.cross_entropy, torch.optim.SGD(other.parameters(), lr=0.05), small,
                                   endpoint=_daemon.endpoint)
        with alone:
            small_peak = int(alone.registration["ephemeral_peak_bytes"])
        both = tandem.torch.train(model, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.05), small,
                                  endpoint=_daemon.endpoint, other_shapes=[large])
        with both:
            self.assertGreater(int(both.registration["ephemeral_peak_bytes"]), 8 * small_peak)
            self.assertGreater(both.step(*large), 0)
            self.assertGreater(both.step(*small), 0)


if __name__ == "__main__":
    unittest.main()
