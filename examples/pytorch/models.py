"""The five reference models, at full size or tiny (for tests and quick runs).

Each builder returns (model, loss_fn, make_batch): loss_fn(output, target)
gives a scalar loss, make_batch(generator) a (input, target) pair of the
shapes the model was built for. Dropout is a parameter so that tests can
turn it off and compare with plain PyTorch step for step.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- 5-layer MLP ----

def mlp(inputs=784, hidden=1024, classes=10, batch=64):
    widths = [inputs] + [hidden] * 4 + [classes]
    layers = []
    for i in range(5):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < 4:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)

    def make_batch(g):
        return torch.randn(batch, inputs, generator=g), torch.randint(0, classes, (batch,), generator=g)

    return model, F.cross_entropy, make_batch


# ---- ResNet-50 (bottleneck blocks) ----

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + identity)


class ResNet(nn.Module):
    def __init__(self, blocks=(3, 4, 6, 3), width=64, classes=1000, zero_init_residual=False):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        layers = []
        inplanes = width
        for i, n in enumerate(blocks):
            planes = width * (2 ** i)
            for b in range(n):
                layers.append(Bottleneck(inplanes, planes, stride=2 if (b == 0 and i > 0) else 1))
                inplanes = planes * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inplanes, classes)
        if zero_init_residual:
            # Each block starts as the identity (as torchvision's option): smoother early training.
            for block in layers:
                nn.init.zeros_(block.bn3.weight)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(x.mean((2, 3)))


def resnet50(width=64, blocks=(3, 4, 6, 3), classes=1000, image=224, batch=32, zero_init_residual=False):
    model = ResNet(blocks, width, classes, zero_init_residual)

    def make_batch(g):
        return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, classes, (batch,), generator=g)

    return model, F.cross_entropy, make_batch


# ---- VGG-19 ----

VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


class VGG(nn.Module):
    def __init__(self, scale=1, classes=1000, image=224, hidden=4096, dropout=0.5):
        super().__init__()
        layers, channels = [], 3
        for v in VGG19:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                out = max(v // scale, 1)
                layers += [nn.Conv2d(channels, out, 3, padding=1), nn.ReLU()]
                channels = out
        self.features = nn.Sequential(*layers)
        side = image // 32
        self.classifier = nn.Sequential(
            nn.Linear(channels * side * side, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def vgg19(scale=1, classes=1000, image=224, hidden=4096, dropout=0.5, batch=32):
    model = VGG(scale, classes, image, hidden, dropout)

    def make_batch(g):
        return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, classes, (batch,), generator=g)

    return model, F.cross_entropy, make_batch


# ---- 2-layer LSTM language model ----

class LstmLM(nn.Module):
    def __init__(self, vocab=10000, embed=650, hidden=650, layers=2, dropout=0.5):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, dropout=dropout if layers > 1 else 0.0, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        out, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(out))


def _sequence_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def lstm_lm(vocab=10000, embed=650, hidden=650, layers=2, dropout=0.5, seq=35, batch=20):
    model = LstmLM(vocab, embed, hidden, layers, dropout)

    def make_batch(g):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return model, _sequence_loss, make_batch


# ---- transformer encoder (language model head) ----

class TransformerLM(nn.Module):
    def __init__(self, vocab=32000, d_model=512, heads=8, ff=2048, layers=6, seq=128, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.decoder = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position
        return self.decoder(self.norm(self.encoder(x)))


def transformer(vocab=32000, d_model=512, heads=8, ff=2048, layers=6, dropout=0.1, seq=128, batch=16):
    model = TransformerLM(vocab, d_model, heads, ff, layers, seq, dropout)

    def make_batch(g):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return model, _sequence_loss, make_batch


def tiny(name):
    """The small version of a model, for tests: (model, loss_fn, make_batch), no dropout."""
    if name == "mlp":
        return mlp(inputs=12, hidden=16, classes=5, batch=6)
    if name == "resnet50":
        # 32x32 images and 8 per batch keep every batch norm over enough values (the last stage is 1x1) for
        # float32 training to be well-conditioned; zero-initialized residual branches keep it smooth.
        return resnet50(width=4, blocks=(1, 1, 1, 1), classes=5, image=32, batch=8, zero_init_residual=True)
    if name == "vgg19":
        return vgg19(scale=32, classes=5, image=32, hidden=16, dropout=0.0, batch=3)
    if name == "lstm":
        return lstm_lm(vocab=20, embed=8, hidden=8, layers=2, dropout=0.0, seq=4, batch=3)
    if name == "transformer":
        return transformer(vocab=20, d_model=8, heads=2, ff=16, layers=2, dropout=0.0, seq=5, batch=3)
    raise ValueError(f"unknown model {name!r}; one of mlp, resnet50, vgg19, lstm, transformer")


MODELS = ("mlp", "resnet50", "vgg19", "lstm", "transformer")
