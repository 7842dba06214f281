"""The small inference models of the hosting benchmark, and which model each hosted slot gets.

Kinds (full size / --small):
  mlp       784-1024-1024-10 MLP (1.8 M parameters) / 64-128-10
  cnn       three 3x3 convolutions (32, 64, 128 channels, ReLU, 2x2 max pools), global average pool and a
            linear layer, on 32x32 RGB (0.1 M parameters) / two convolutions of 8 and 16 channels on 16x16
  resnet18  torchvision's ResNet-18 (100 classes) on 64x64 RGB, with every batch norm folded into the
            convolution before it, as inference deployments do (11 M parameters) / not shrunk: slow on a CPU

Slot i hosts kind kinds[i % len(kinds)] with a batch drawn from `batches` by a generator seeded with i, so a
count of N models is the same mix in every mode and every probe. Weights are seeded by the slot too.

Pure functions; nothing is shared between calls.
"""

import random

import torch
import torch.nn as nn

KINDS = ("mlp", "cnn", "resnet18")


def _mlp(small):
    widths = (64, 128, 10) if small else (784, 1024, 1024, 10)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers), (widths[0],)


def _cnn(small):
    channels = (8, 16) if small else (32, 64, 128)
    image = 16 if small else 32
    layers, inputs = [], 3
    for i, c in enumerate(channels):
        layers += [nn.Conv2d(inputs, c, 3, padding=1), nn.ReLU()]
        if i < len(channels) - 1:
            layers.append(nn.MaxPool2d(2))
        inputs = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, 10)]
    return nn.Sequential(*layers), (3, image, image)


def _fold(parent, conv_name, bn_name):
    """Replaces parent.<conv> by the convolution with parent.<bn> folded in, and the batch norm by Identity."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    setattr(parent, conv_name, fuse_conv_bn_eval(getattr(parent, conv_name), getattr(parent, bn_name)))
    setattr(parent, bn_name, nn.Identity())


def _resnet18():
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).eval()
    _fold(model, "conv1", "bn1")
    for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in layer:
            _fold(block, "conv1", "bn1")
            _fold(block, "conv2", "bn2")
            if block.downsample is not None:
                _fold(block.downsample, "0", "1")
    return model, (3, 64, 64)


def build(kind, batch, small, seed):
    """(model in eval mode on the CPU, example input [batch, ...] on the CPU), weights and input seeded."""
    torch.manual_seed(seed)
    if kind == "mlp":
        model, shape = _mlp(small)
    elif kind == "cnn":
        model, shape = _cnn(small)
    elif kind == "resnet18":
        model, shape = _resnet18()
    else:
        raise ValueError(f"unknown model kind {kind!r}; one of {', '.join(KINDS)}")
    x = torch.randn((batch,) + shape, generator=torch.Generator().manual_seed(seed))
    return model.eval(), x


def slot_specs(count, kinds, batches, seed=0):
    """[{id, kind, batch}] for slots 0..count-1 (see the module's docstring)."""
    specs = []
    for i in range(count):
        rng = random.Random(seed * 7919 + i)
        specs.append({"id": i, "kind": kinds[i % len(kinds)], "batch": rng.choice(batches)})
    return specs


def describe(kind, small):
    if kind == "mlp":
        return "MLP 64-128-10" if small else "MLP 784-1024-1024-10"
    if kind == "cnn":
        return "CNN 8,16 ch, 16x16" if small else "CNN 32,64,128 ch, 32x32"
    return "ResNet-18 (BN folded), 64x64, 100 classes"
