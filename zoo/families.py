"""Hand-written model families that people train every day, at any size.

Each builder returns (model, loss_fn, make_batch) as examples/pytorch/models.py
does: loss_fn(output, *targets) gives a scalar loss, make_batch(generator) the
(inputs..., targets) of the shapes the model was built for. Dropout is off
(p=0), so that a test can compare Tandem with PyTorch step for step.
"""

import inspect
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v, causal=False):
    """Scaled dot-product attention: PyTorch's fused op where the version has it (2.x), else the same math
    (1.13)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _sequence_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


# ---- decoder-only transformer: causal attention, tied embeddings, learned or rotary positions ----

class _Rotary(nn.Module):
    """Rotary position embedding: cos/sin tables as buffers (not trained, saved with the model)."""

    def __init__(self, head_dim, seq):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], dim=-1))
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], dim=-1))

    def forward(self, x):  # [B, H, T, D]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        t = x.shape[-2]
        return x * self.cos[:t] + rotated * self.sin[:t]


class _DecoderBlock(nn.Module):
    def __init__(self, d_model, heads, ff, seq, rotary, mask_buffer):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ff)
        self.fc2 = nn.Linear(ff, d_model)
        self.rotary = _Rotary(d_model // heads, seq) if rotary else None
        # The causal mask as a buffer (as GPT-2's original code has it), or SDPA's is_causal.
        if mask_buffer:
            self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))
        else:
            self.mask = None

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        if self.mask is not None:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
            y = scores.softmax(dim=-1) @ v
        else:
            y = attention(q, k, v, causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class DecoderLM(nn.Module):
    def __init__(self, vocab, d_model, heads, ff, layers, seq, positions="learned", mask_buffer=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model) if positions == "learned" else None
        self.blocks = nn.ModuleList(
            _DecoderBlock(d_model, heads, ff, seq, positions == "rotary", mask_buffer) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, ids):
        x = self.tok(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def decoder_lm(vocab=32000, d_model=768, heads=12, ff=3072, layers=12, seq=256, batch=8, positions="learned",
               mask_buffer=False):
    model = DecoderLM(vocab, d_model, heads, ff, layers, seq, positions, mask_buffer)

    def make_batch(g):
        ids = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    return model, _sequence_loss, make_batch


# ---- encoder-decoder transformer (nn.Transformer) ----

_TRANSFORMER_TAKES_IS_CAUSAL = "tgt_is_causal" in inspect.signature(nn.Transformer.forward).parameters


class Seq2Seq(nn.Module):
    def __init__(self, vocab, d_model, heads, ff, layers, seq):
        super().__init__()
        self.src_tok = nn.Embedding(vocab, d_model)
        self.tgt_tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq, d_model) * 0.02)
        self.transformer = nn.Transformer(d_model, heads, layers, layers, ff, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("causal", torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1))

    def forward(self, src, tgt):
        s = self.src_tok(src) + self.pos[:src.shape[1]]
        t = self.tgt_tok(tgt) + self.pos[:tgt.shape[1]]
        n = tgt.shape[1]
        # Saying the mask is causal spares torch >= 2.0 from reading it to find out (a data-dependent branch
        # that a trace under fake tensors cannot take); 1.13 has no such argument.
        causal = {"tgt_is_causal": True} if _TRANSFORMER_TAKES_IS_CAUSAL else {}
        return self.head(self.transformer(s, t, tgt_mask=self.causal[:n, :n], **causal))


def seq2seq(vocab=32000, d_model=512, heads=8, ff=2048, layers=6, seq=64, batch=16):
    model = Seq2Seq(vocab, d_model, heads, ff, layers, seq)

    def make_batch(g):
        src = torch.randint(0, vocab, (batch, seq), generator=g)
        tgt = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return src, tgt[:, :-1].contiguous(), tgt[:, 1:].contiguous()

    return model, _sequence_loss, make_batch


# ---- bidirectional multi-layer RNN classifiers ----

class RnnClassifier(nn.Module):
    def __init__(self, kind, vocab, embed, hidden, layers, classes):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        rnn = nn.GRU if kind == "gru" else nn.LSTM
        self.rnn = rnn(embed, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out.mean(dim=1))


def rnn_classifier(kind="gru", vocab=20000, embed=256, hidden=512, layers=2, classes=10, seq=64, batch=32):
    model = RnnClassifier(kind, vocab, embed, hidden, layers, classes)

    def make_batch(g):
        return (torch.randint(0, vocab, (batch, seq), generator=g),
                torch.randint(0, classes, (batch,), generator=g))

    return model, F.cross_entropy, make_batch


# ---- diffusion UNet: GroupNorm, SiLU, a time embedding, attention, upsampling ----

def _timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = t.float()[:, None] * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class _ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + self.skip(x)


class _Attention(nn.Module):
    def __init__(self, channels, groups, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(groups, channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).unbind(1)
        y = attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
        return x + self.out(y.transpose(-1, -2).reshape(b, c, h, w))


class DiffusionUNet(nn.Module):
    def __init__(self, channels=(64, 128, 256), groups=8, image_channels=3):
        super().__init__()
        tdim = channels[0] * 4
        self.tdim = channels[0]
        self.time_mlp = nn.Sequential(nn.Linear(channels[0], tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(image_channels, channels[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        cin = channels[0]
        for i, c in enumerate(channels):
            self.down.append(_ResBlock(cin, c, tdim, groups))
            self.downsample.append(nn.Conv2d(c, c, 3, stride=2, padding=1) if i + 1 < len(channels) else nn.Identity())
            cin = c
        self.mid = _ResBlock(cin, cin, tdim, groups)
        self.mid_attn = _Attention(cin, groups)
        self.up = nn.ModuleList()
        for i, c in reversed(list(enumerate(channels))):
            self.up.append(_ResBlock(cin + c, c, tdim, groups))
            cin = c
        self.norm = nn.GroupNorm(groups, cin)
        self.outp = nn.Conv2d(cin, image_channels, 3, padding=1)

    def forward(self, x, t):
        temb = self.time_mlp(_timestep_embedding(t, self.tdim))
        h = self.inp(x)
        skips = []
        for block, down in zip(self.down, self.downsample):
            h = block(h, temb)
            skips.append(h)
            h = down(h)
        h = self.mid_attn(self.mid(h, temb))
        for block in self.up:
            skip = skips.pop()
            if h.shape[-1] != skip.shape[-1]:
                h = F.interpolate(h, scale_factor=2, mode="nearest")
            h = block(torch.cat([h, skip], dim=1), temb)
        return self.outp(F.silu(self.norm(h)))


def diffusion_unet(channels=(64, 128, 256), groups=8, image=32, batch=16, steps=1000):
    model = DiffusionUNet(channels, groups)

    def make_batch(g):
        x = torch.randn(batch, 3, image, image, generator=g)
        t = torch.randint(0, steps, (batch,), generator=g)
        noise = torch.randn(batch, 3, image, image, generator=g)
        return x, t, noise

    return model, F.mse_loss, make_batch


# ---- MLP-Mixer ----

class _MixerBlock(nn.Module):
    def __init__(self, tokens, channels, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(channels)
        self.channel_mlp = nn.Sequential(nn.Linear(channels, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, channels))

    def forward(self, x):  # [B, tokens, channels]
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class MlpMixer(nn.Module):
    def __init__(self, image, patch, channels, depth, token_hidden, channel_hidden, classes):
        super().__init__()
        tokens = (image // patch) ** 2
        self.stem = nn.Conv2d(3, channels, patch, stride=patch)
        self.blocks = nn.Sequential(*[_MixerBlock(tokens, channels, token_hidden, channel_hidden)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(dim=1))


def mlp_mixer(image=224, patch=16, channels=512, depth=8, token_hidden=256, channel_hidden=2048, classes=1000,
              batch=32):
    model = MlpMixer(image, patch, channels, depth, token_hidden, channel_hidden, classes)

    def make_batch(g):
        return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, classes, (batch,), generator=g)

    return model, F.cross_entropy, make_batch
