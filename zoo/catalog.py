"""The model zoo: every model the tests and benchmarks train through tandemd.

    from zoo import catalog
    for entry in catalog.ENTRIES:
        model, loss_fn, make_batch = entry.build("small")

Each entry builds (model, loss_fn, make_batch) at a size: "small" (CPU
tests in CI: small images and batches, few classes) or "full" (the GPU
benchmark: ImageNet-size images, the batch people train with).
make_batch(generator) returns (inputs..., targets); loss_fn(output,
*targets) a scalar. Families:

- every classification model of the installed torchvision
  (torchvision.models.list_models());
- torchvision's segmentation models FCN, DeepLabV3, LR-ASPP and video
  models R3D-18, MC3-18, R(2+1)D-18;
- the hand-written families of zoo/families.py: decoder-only transformers
  (learned and rotary positions, a causal-mask buffer, tied embeddings),
  an encoder-decoder transformer, bidirectional GRU and LSTM classifiers, a
  diffusion UNet, an MLP-Mixer.

Nothing here needs a GPU or the network (no pretrained weights).
"""

import dataclasses
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo import families


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    family: str
    builder: object  # size -> (model, loss_fn, make_batch)

    def build(self, size="small"):
        model, loss_fn, make_batch = self.builder(size)
        if size == "small":
            _without_randomness(model)
        return model, loss_fn, make_batch


def _without_randomness(model):
    """Dropout and stochastic depth at p = 0, so that a test compares Tandem with PyTorch step for step (the
    full size keeps them: a benchmark trains as people do)."""
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0


# ---- torchvision ----

# Constructor arguments that a model needs besides num_classes (no auxiliary heads: the loss is one cross
# entropy; no weight init that needs scipy).
_TV_KWARGS = {
    "googlenet": {"aux_logits": False, "init_weights": False},
    "inception_v3": {"aux_logits": False, "init_weights": False},
}
# Images of the "small" size: 64 x 64 (most models downsample 32-fold, so their last batch norms see 2 x 2 x
# batch values per channel, enough for float32 statistics to agree with PyTorch's to 1e-4; at 32 x 32 they
# see one value per image and differ by 1e-3 however exact the kernels), larger where a model's strides,
# windows or fixed patch grids need it.
_TV_SMALL_IMAGE = {"inception_v3": 96, "maxvit_t": 224}
# Full-size batches of the heavier models (the rest: 32).
_TV_FULL_BATCH = {"vit_h_14": 8, "vit_l_16": 16, "vit_l_32": 16, "regnet_y_128gf": 8, "efficientnet_b7": 8,
                  "efficientnet_b6": 8, "efficientnet_v2_l": 8, "convnext_large": 16, "swin_v2_b": 16}


def _torchvision():
    import torchvision
    return torchvision


def _classification(name, size):
    models = _torchvision().models
    small = size == "small"
    classes = 10 if small else 1000
    kwargs = dict(_TV_KWARGS.get(name, {}))
    image = _TV_SMALL_IMAGE.get(name, 64) if small else (299 if name == "inception_v3" else 224)
    if name.startswith("vit_"):
        patch = 14 if name == "vit_h_14" else int(name.split("_")[-1])
        if small:
            image = 2 * patch
        kwargs["image_size"] = image
    model = models.get_model(name, weights=None, num_classes=classes, **kwargs)
    batch = 4 if small else _TV_FULL_BATCH.get(name, 32)

    def make_batch(g):
        return (torch.randn(batch, 3, image, image, generator=g),
                torch.randint(0, classes, (batch,), generator=g))

    return model, F.cross_entropy, make_batch


class _SegmentationOutput(nn.Module):
    """A torchvision segmentation model with its "out" map as the output (no auxiliary head)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def _segmentation(name, size):
    seg = _torchvision().models.segmentation
    small = size == "small"
    classes = 4 if small else 21
    image = 64 if small else 320
    batch = 4 if small else 8
    kwargs = {"weights": None, "weights_backbone": None, "num_classes": classes}
    if not name.startswith("lraspp"):
        kwargs["aux_loss"] = False
    model = _SegmentationOutput(getattr(seg, name)(**kwargs))

    def make_batch(g):
        return (torch.randn(batch, 3, image, image, generator=g),
                torch.randint(0, classes, (batch, image, image), generator=g))

    return model, F.cross_entropy, make_batch


def _video(name, size):
    video = _torchvision().models.video
    small = size == "small"
    classes = 10 if small else 400
    frames, image, batch = (8, 32, 4) if small else (16, 112, 8)
    model = getattr(video, name)(weights=None, num_classes=classes)

    def make_batch(g):
        return (torch.randn(batch, 3, frames, image, image, generator=g),
                torch.randint(0, classes, (batch,), generator=g))

    return model, F.cross_entropy, make_batch


def _torchvision_entries():
    try:
        tv = _torchvision()
    except ImportError:
        return []
    entries = [Entry(n, "torchvision", functools.partial(_classification, n))
               for n in tv.models.list_models(module=tv.models)]
    entries += [Entry(n, "torchvision-segmentation", functools.partial(_segmentation, n))
                for n in ("fcn_resnet50", "deeplabv3_resnet50", "deeplabv3_mobilenet_v3_large",
                          "lraspp_mobilenet_v3_large")]
    entries += [Entry(n, "torchvision-video", functools.partial(_video, n))
                for n in ("r3d_18", "mc3_18", "r2plus1d_18")]
    return entries


# ---- hand-written families ----

def _sized(small, full):
    return lambda size: small() if size == "small" else full()


_FAMILY_ENTRIES = [
    Entry("decoder_lm", "transformer", _sized(
        lambda: families.decoder_lm(vocab=64, d_model=32, heads=4, ff=64, layers=2, seq=16, batch=2),
        lambda: families.decoder_lm())),
    Entry("decoder_lm_rotary", "transformer", _sized(
        lambda: families.decoder_lm(vocab=64, d_model=32, heads=4, ff=64, layers=2, seq=16, batch=2,
                                    positions="rotary"),
        lambda: families.decoder_lm(positions="rotary"))),
    Entry("decoder_lm_mask_buffer", "transformer", _sized(
        lambda: families.decoder_lm(vocab=64, d_model=32, heads=4, ff=64, layers=2, seq=16, batch=2,
                                    mask_buffer=True),
        lambda: families.decoder_lm(mask_buffer=True))),
    Entry("seq2seq", "transformer", _sized(
        lambda: families.seq2seq(vocab=64, d_model=32, heads=4, ff=64, layers=2, seq=12, batch=2),
        lambda: families.seq2seq())),
    Entry("bigru", "rnn", _sized(
        lambda: families.rnn_classifier("gru", vocab=64, embed=16, hidden=16, layers=2, classes=5, seq=8, batch=3),
        lambda: families.rnn_classifier("gru"))),
    Entry("bilstm", "rnn", _sized(
        lambda: families.rnn_classifier("lstm", vocab=64, embed=16, hidden=16, layers=2, classes=5, seq=8, batch=3),
        lambda: families.rnn_classifier("lstm"))),
    Entry("diffusion_unet", "diffusion", _sized(
        lambda: families.diffusion_unet(channels=(16, 32), groups=4, image=16, batch=2),
        lambda: families.diffusion_unet())),
    Entry("mlp_mixer", "mixer", _sized(
        lambda: families.mlp_mixer(image=32, patch=8, channels=32, depth=2, token_hidden=16, channel_hidden=64,
                                   classes=10, batch=2),
        lambda: families.mlp_mixer())),
]


def _entries():
    return _FAMILY_ENTRIES + _torchvision_entries()


ENTRIES = _entries()
BY_NAME = {e.name: e for e in ENTRIES}

# The share of the zoo that CI trains on its 2 cores (the whole zoo at small size takes about an hour there):
# every hand-written family, and the smallest model of every torchvision family but three whose ops the others
# cover and whose weights made them the slowest to register and check (VGG-11-BN and AlexNet, 130M and 60M
# parameters in their classifiers; R(2+1)D-18 beside R3D-18): 29 models, about 4 minutes per shard.
CI_NAMES = (
    "decoder_lm", "decoder_lm_rotary", "decoder_lm_mask_buffer", "seq2seq", "bigru", "bilstm", "diffusion_unet",
    "mlp_mixer", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet",
    "inception_v3", "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_small", "regnet_x_400mf", "regnet_y_400mf",
    "resnet18", "resnext50_32x4d", "shufflenet_v2_x0_5", "squeezenet1_1", "swin_t", "swin_v2_t",
    "vit_b_32", "lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large", "r3d_18",
)


def entry(name):
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no zoo model {name!r}; the zoo has {', '.join(sorted(BY_NAME))}") from None
