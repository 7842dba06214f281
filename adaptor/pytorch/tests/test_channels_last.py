"""Convolution networks trained with the channels-last layout pass on (compiler/channels_last.h), through a CPU
tandemd started with --channels_last=true, against eager PyTorch.

The daemon runs the pass for GPUs by default; on the CPU, `true` runs it too, each channels-last node through its
channels-first kernel on permuted copies, so what this checks is the pass itself on real captured steps: every
relayout it inserts, the dims it remaps (cat and slice along channels in a dense block, the mean over H and W, the
expanded pooled gradient), the batch norms' channel dim, grouped and depthwise convolutions, and the weights'
gradients permuted back for the optimizer. A wrong permutation or dim mixes channels with pixels and moves the
losses by far more than float32 rounding (1e-4 relative). The daemon's log must also say that the job's graph ran
channels-last, so that the test cannot pass with the pass skipped, and (ResNet-18) that every residual add folded
into a batch norm.
"""

import re
import unittest

import common  # noqa: F401  (paths)
from common import assert_trains_like_eager, torch

import torch.nn as nn
import torch.nn.functional as F

RTOL = 1e-4
STEPS = 3


class _DenseBlockNet(nn.Module):
    """A dense block (each layer's output concatenated to its input), a transition with average pooling, a grouped
    and a depthwise convolution with ReLU6, and a pooled linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.layers = nn.ModuleList([nn.Sequential(nn.BatchNorm2d(8 + 4 * i), nn.ReLU(),
                                                   nn.Conv2d(8 + 4 * i, 4, 3, padding=1, bias=False))
                                     for i in range(3)])
        self.transition = nn.Sequential(nn.BatchNorm2d(20), nn.ReLU(), nn.Conv2d(20, 12, 1), nn.AvgPool2d(2))
        self.grouped = nn.Conv2d(12, 12, 3, padding=1, groups=3)
        self.depthwise = nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False)
        self.bn = nn.BatchNorm2d(12)
        self.head = nn.Linear(12, 5)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        x = self.transition(x)
        x = F.relu6(self.bn(self.depthwise(self.grouped(x))))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _resnet18():
    import torchvision

    return torchvision.models.resnet18(num_classes=5)


class ChannelsLastTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from daemon import Daemon  # tests/daemon.py

        cls.daemon = Daemon("--channels_last=true", "--log_level=info").start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def _check(self, build, x, name):
        y = torch.randint(0, 5, (x.shape[0],), generator=torch.Generator().manual_seed(2))
        assert_trains_like_eager(self, build, lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9), x, y,
                                 self.daemon.endpoint, name, STEPS, RTOL)
        with open(self.daemon.log_path, encoding="utf-8", errors="replace") as f:
            log = f.read()
        nodes = [int(n) for n in re.findall(r"channels-last layout .*?nodes=(\d+)", log)]
        self.assertTrue(nodes and nodes[-1] > 0, f"the daemon did not log a channels-last graph: {log[-2000:]}")

    def test_resnet18(self):
        x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
        self._check(_resnet18, x, "resnet18")
        # Every block's last batch norm takes its residual add and the ReLU after it (compiler/fold_activations.h;
        # a downsampling block's into the shortcut's batch norm), the other batch norms their ReLU: 8 residual
        # folds, 17 with a ReLU, on channels-last values; the 9 ReLUs whose gradient only their batch norm reads
        # fold into its backward.
        with open(self.daemon.log_path, encoding="utf-8", errors="replace") as f:
            folds = re.findall(r"batch norms folded .*?relu=(\d+) residual=(\d+) masked_backward=(\d+)", f.read())
        self.assertTrue(folds, "the daemon did not log its batch-norm folds")
        self.assertEqual(folds[-1], ("17", "8", "9"))

    def test_dense_block_with_grouped_and_depthwise_convolutions(self):
        x = torch.randn(3, 3, 8, 10, generator=torch.Generator().manual_seed(1))
        self._check(_DenseBlockNet, x, "dense")


if __name__ == "__main__":
    unittest.main()
