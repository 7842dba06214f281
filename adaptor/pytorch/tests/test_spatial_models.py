"""Small models of the spatial ops, captured, lowered and trained through a CPU tandemd against eager PyTorch.

- A decoder in the style of a diffusion UNet and of segmentation heads: group norm, nearest upsampling by a scale
  factor and to a size, reflection padding, bilinear upsampling with and without align_corners (by a scale factor
  and to a size), constant padding that pads one dim and crops another.
- A video classifier in the style of R3D-18: 3-D convolutions (a (2+1)-D factorized pair among them), batch norm
  over volumes in training mode, 3-D max and average pooling, replication padding, adaptive average pooling.

Each trains a few SGD-momentum steps in float32 on one batch; Tandem's losses and trained tensors must be PyTorch's
within float32 rounding (1e-4 relative). The index formulas matter: a nearest or bilinear source one position off,
a misrouted gradient or a wrong window moves them by far more. The captured graphs must also hold the ops named
(so that nothing was decomposed away before it reached the daemon).
"""

import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, assert_trains_like_eager, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop

RTOL = 1e-4
STEPS = 4


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.norm1 = nn.GroupNorm(4, 8)
        self.conv2 = nn.Conv2d(8, 8, 3)
        self.norm2 = nn.GroupNorm(2, 8, affine=False)
        self.conv3 = nn.Conv2d(8, 4, 3, padding=1)
        self.head = nn.Linear(4 * 7 * 12, 5)

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(x)))                        # [N, 8, 6, 5]
        y = F.interpolate(y, scale_factor=2.0, mode="nearest")      # [N, 8, 12, 10]
        y = F.pad(y, (1, 1, 1, 1), mode="reflect")                   # [N, 8, 14, 12]
        y = F.relu(self.norm2(self.conv2(y)))                        # [N, 8, 12, 10]
        y = F.interpolate(y, size=(9, 13), mode="nearest")          # [N, 8, 9, 13]
        y = F.interpolate(y, scale_factor=1.5, mode="bilinear", align_corners=False)  # [N, 8, 13, 19]
        y = F.interpolate(y, size=(7, 11), mode="bilinear", align_corners=True)      # [N, 8, 7, 11]
        y = self.conv3(y)
        y = F.pad(y, (2, -1, 0, 0), value=0.5)                       # [N, 4, 7, 12]
        return self.head(y.flatten(1))


class _VideoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv3d(3, 8, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2), bias=False)
        self.bn1 = nn.BatchNorm3d(8)
        self.spatial = nn.Conv3d(8, 12, (1, 3, 3), padding=(0, 1, 1), bias=False)
        self.bn2 = nn.BatchNorm3d(12)
        self.temporal = nn.Conv3d(12, 8, (3, 1, 1), padding=(1, 0, 0))
        self.pad = nn.ReplicationPad3d((1, 0, 1, 1, 0, 1))
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn1(self.stem(x)))                                  # [N, 8, 4, 8, 8]
        y = F.max_pool3d(y, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))  # [N, 8, 4, 4, 4]
        y = F.relu(self.bn2(self.spatial(y)))
        y = self.temporal(y)
        y = self.pad(y)                                                     # [N, 8, 5, 6, 5]
        y = F.avg_pool3d(y, 2, stride=(1, 2, 2), ceil_mode=True, count_include_pad=False)
        y = F.adaptive_avg_pool3d(y, (2, 2, 2))
        y = F.adaptive_avg_pool3d(y, 1).flatten(1)
        return self.head(y)


def _optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.05, momentum=0.9)


class SpatialModelsTest(unittest.TestCase):
    def _check(self, build, x, expected_ops, name):
        y = torch.randint(0, 5, (x.shape[0],), generator=torch.Generator().manual_seed(2))
        torch.manual_seed(0)
        model = build()
        _, lowered = tandem.torch.capture_training_job(model, F.cross_entropy, _optimizer(model.parameters()), (x, y))
        ops = {n["op"] for n in lowered.graph["nodes"]}
        self.assertTrue(expected_ops <= ops, f"{sorted(expected_ops - ops)} missing from {sorted(ops)}")
        losses = assert_trains_like_eager(self, build, _optimizer, x, y, _daemon.endpoint, name, STEPS, RTOL)
        self.assertLess(losses[-1], losses[0])

    def test_decoder_with_group_norm_upsampling_and_padding(self):
        x = torch.randn(3, 3, 6, 5, generator=torch.Generator().manual_seed(1))
        self._check(_Decoder, x, {"native_group_norm", "upsample_nearest2d.vec", "upsample_bilinear2d.vec",
                                  "reflection_pad2d", "reflection_pad2d_backward", "constant_pad_nd"}, "decoder")

    def test_video_net_with_3d_convolutions_and_pooling(self):
        x = torch.randn(2, 3, 4, 16, 16, generator=torch.Generator().manual_seed(1))
        self._check(_VideoNet, x, {"convolution", "convolution_backward", "_native_batch_norm_legit_functional",
                                   "native_batch_norm_backward", "max_pool3d_with_indices",
                                   "max_pool3d_with_indices_backward", "avg_pool3d", "avg_pool3d_backward",
                                   "replication_pad3d", "replication_pad3d_backward", "_adaptive_avg_pool3d",
                                   "_adaptive_avg_pool3d_backward"}, "video")


if __name__ == "__main__":
    unittest.main()
