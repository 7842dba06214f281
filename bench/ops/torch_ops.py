#!/usr/bin/env python3
"""PyTorch's own ops at the rows of op_bench (bench/ops/op_rows.cc): the same
names, shapes, FLOP and byte counts, timed on the same GPU, so that
bench/ops/compare.py can put each Tandem row beside PyTorch's.

  python3 bench/ops/torch_ops.py --out /tmp/out/torch_ops.json     # on the GPU machine
  python3 bench/ops/torch_ops.py --device cpu --small              # smoke test, anywhere

Each row is timed twice on CUDA: eager (one call per iteration, as a PyTorch
program runs it) and as a replay of a CUDA graph captured around one call
(torch.cuda.graph: no launch overhead, like Tandem's replay). Times come from
CUDA events around batches of back-to-back iterations after a warm-up; a
row's time is the median over batches of the time per iteration. A few rows
also time the path PyTorch's own modules take when it differs from the ATen
op of the row (cuDNN batch norm, the optimizer's in-place SGD step) as `alt`.

float32; TF32 off in matrix products, and in convolutions unless
--allow-tf32 (to match op_bench --allow_tf32). Row list and sizes must change
together with op_rows.cc. Runs under torch 1.13 (CPU) and torch 2.x (CUDA).
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

aten = torch.ops.aten

FULL = dict(fcn_batch=256, fcn_inputs=784, fcn_hidden=4096, fcn_classes=10,
            cnn_batch=32, image=224, vgg_hidden=4096,
            xf_batch=32, xf_seq=128, xf_model=512, xf_heads=8, xf_ff=2048,
            lstm_batch=64, lstm_seq=35, lstm_hidden=1024, lstm_vocab=10000,
            copy_bytes=256 << 20)
SMALL = dict(fcn_batch=8, fcn_inputs=12, fcn_hidden=16, fcn_classes=5,
             cnn_batch=2, image=32, vgg_hidden=16,
             xf_batch=2, xf_seq=16, xf_model=64, xf_heads=4, xf_ff=128,
             lstm_batch=4, lstm_seq=5, lstm_hidden=64, lstm_vocab=100,
             copy_bytes=1 << 20)


def dims(shape):
    return "[" + ",".join(str(int(s)) for s in shape) + "]"


def nbytes(t):
    return t.numel() * t.element_size()


def flat(outputs):
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [t for t in outputs if isinstance(t, torch.Tensor)]


class Row:
    """One measured op: `build(dev)` makes the inputs and returns a Case."""

    def __init__(self, name, op, kind, shapes, flops, build):
        self.name, self.op, self.kind, self.shapes, self.flops, self.build = name, op, kind, shapes, flops, build


class Case:
    """`fn()` runs the op once. Bytes (memory rows): `bytes`, else the bytes of
    `reads` plus those of fn's outputs. `alt`: (label, fn) of another path.
    `calls`: how many calls (each with its own output) one timed run makes,
    times reported per call: op_bench's rows that run copies of their op
    per iteration (ops_per_run) get the same here, so that both sides write
    as many distinct bytes and neither keeps its output in L2 alone."""

    def __init__(self, fn, reads=(), bytes=None, alt=None, calls=1):
        self.fn, self.reads, self.bytes, self.alt, self.calls = fn, list(reads), bytes, alt, calls


class Maker:
    """Random tensors on one device (the fills of the GPU tests)."""

    def __init__(self, device, seed):
        self.device = device
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)

    def _u(self, shape):
        return torch.rand(tuple(shape), generator=self.gen, device=self.device) * 2 - 1

    def uniform(self, *shape):
        return self._u(shape)

    def positive(self, *shape):
        return 1.25 + 0.75 * self._u(shape)

    def small(self, *shape):
        return 0.02 * self._u(shape)

    def labels(self, upper, *shape):
        return torch.randint(0, upper, tuple(shape), generator=self.gen, device=self.device, dtype=torch.int64)


class CastMaker:
    """A Maker whose floating-point tensors come in `dtype` (the 16-bit rows)."""

    def __init__(self, mk, dtype):
        self.mk, self.dtype = mk, dtype

    def uniform(self, *shape):
        return self.mk.uniform(*shape).to(self.dtype)

    def positive(self, *shape):
        return self.mk.positive(*shape).to(self.dtype)

    def small(self, *shape):
        return self.mk.small(*shape).to(self.dtype)

    def labels(self, upper, *shape):
        return self.mk.labels(upper, *shape)


def in_dtype(row, dtype, prefix):
    """`row` with its floating-point inputs in `dtype`, named prefix + its name."""
    build = row.build
    return Row(prefix + row.name, row.op, row.kind, row.shapes, row.flops, lambda mk: build(CastMaker(mk, dtype)))


# ---- rows (the order and names of op_rows.cc) ----

# The rows op_rows.cc also builds in bfloat16, in its order.
BF16_ROWS = ("fcn5.fc.fwd", "fcn5.fc.grad_w", "lstm.decoder.fwd", "xf.qkv.fwd", "xf.attn.scores",
             "r50.layer1.conv2.fwd", "r50.layer1.conv2.bwd", "vgg.conv3_2.fwd", "vgg.conv3_2.bwd", "r50.relu.fwd",
             "r50.residual.add", "xf.ff.gelu", "xf.attn.softmax", "xf.ln.fwd")


def matmul(name, n, k, m, bias):
    def build(mk):
        a, b = mk.uniform(n, k), mk.small(k, m)
        if bias:
            c = mk.uniform(m)
            return Case(lambda: torch.addmm(c, a, b))
        return Case(lambda: torch.mm(a, b))
    shapes = f"{dims([n, k])}@{dims([k, m])}" + (f"+{dims([m])}" if bias else "")
    return Row(name, "addmm" if bias else "mm", "compute", shapes, 2.0 * n * k * m, build)


def bmm(name, batch, n, k, m):
    def build(mk):
        a, b = mk.uniform(batch, n, k), mk.uniform(batch, k, m)
        return Case(lambda: torch.bmm(a, b))
    return Row(name, "bmm", "compute", f"{dims([batch, n, k])}@{dims([batch, k, m])}", 2.0 * batch * n * k * m,
               build)


def conv_rows(name, x_shape, w_shape, stride, padding, bias, mask):
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    oh, ow = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    y_shape = [n, o, oh, ow]
    flops = 2.0 * n * o * oh * ow * c * kh * kw
    geometry = f"s{stride} p{padding}"

    def build_fwd(mk):
        x, wt = mk.uniform(*x_shape), mk.small(*w_shape)
        b = mk.uniform(o) if bias else None
        return Case(lambda: F.conv2d(x, wt, b, stride, padding))

    def build_bwd(mk):
        grad, x, wt = mk.uniform(*y_shape), mk.uniform(*x_shape), mk.small(*w_shape)
        bias_sizes = [o] if bias else None
        output_mask = [bool(v) for v in mask]
        return Case(lambda: aten.convolution_backward(grad, x, wt, bias_sizes, [stride, stride], [padding, padding],
                                                      [1, 1], False, [0, 0], 1, output_mask))

    fwd_shapes = f"x{dims(x_shape)} w{dims(w_shape)}" + (" +bias " if bias else " ") + geometry
    bwd_shapes = f"dy{dims(y_shape)} x{dims(x_shape)} w{dims(w_shape)} {geometry} mask{''.join(map(str, mask))}"
    return [Row(name + ".fwd", "convolution", "compute", fwd_shapes, flops, build_fwd),
            Row(name + ".bwd", "convolution_backward", "compute", bwd_shapes, flops * (mask[0] + mask[1]),
                build_bwd)]


def cudnn_batch_norm_alt(x, w, b, grad=None):
    """PyTorch's module path on CUDA (cudnn_batch_norm), forward or backward; None elsewhere."""
    if x.device.type != "cuda" or not hasattr(aten, "cudnn_batch_norm"):
        return None
    c = x.shape[1]
    rm, rv = torch.zeros(c, device=x.device), torch.ones(c, device=x.device)
    if grad is None:
        return ("cudnn_batch_norm", lambda: aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5))
    try:
        _, save_mean, save_var, reserve = aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
    except RuntimeError as e:  # the alternative is optional; the row stands without it
        print(f"torch_ops: no cudnn_batch_norm: {str(e).splitlines()[0]}")
        return None
    return ("cudnn_batch_norm_backward",
            lambda: aten.cudnn_batch_norm_backward(x, grad, w, rm, rv, save_mean, save_var, 1e-5, reserve))


def batch_norm_rows(name, shape, channels_last=False):
    """shape is [N, C, H, W]; channels_last: x and grad in torch.channels_last (the rows' shapes then read
    [N, H, W, C], as Tandem's)."""
    c = shape[1]
    layout = torch.channels_last if channels_last else torch.contiguous_format
    shown = [shape[0], shape[2], shape[3], shape[1]] if channels_last else shape

    def build_fwd(mk):
        x, w, b = mk.uniform(*shape).contiguous(memory_format=layout), mk.positive(c), mk.uniform(c)
        return Case(lambda: aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5), reads=[x, w, b],
                    alt=cudnn_batch_norm_alt(x, w, b))

    def build_bwd(mk):
        x, w, b = mk.uniform(*shape).contiguous(memory_format=layout), mk.positive(c), mk.uniform(c)
        _, mean, invstd = aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
        grad = mk.uniform(*shape).contiguous(memory_format=layout)
        return Case(lambda: aten.native_batch_norm_backward(grad, x, w, None, None, mean, invstd, True, 1e-5,
                                                            [True, True, True]),
                    reads=[grad, x, w, mean, invstd], alt=cudnn_batch_norm_alt(x, w, b, grad))

    return [Row(name + ".fwd", "native_batch_norm", "memory", f"x{dims(shown)} training", 0.0, build_fwd),
            Row(name + ".bwd", "native_batch_norm_backward", "memory", f"dy{dims(shown)} x{dims(shown)} training",
                0.0, build_bwd)]


def max_pool_rows(name, shape, kernel, stride, padding):
    n, c, h, w = shape
    y_shape = [n, c, (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1]
    args = ([kernel, kernel], [stride, stride], [padding, padding], [1, 1], False)
    geometry = f"k{kernel} s{stride} p{padding}"

    def build_fwd(mk):
        x = mk.uniform(*shape)
        return Case(lambda: aten.max_pool2d_with_indices(x, *args), reads=[x])

    def build_bwd(mk):
        x = mk.uniform(*shape)
        _, indices = aten.max_pool2d_with_indices(x, *args)
        grad = mk.uniform(*y_shape)
        # `self` gives only the result's shape and is not counted.
        return Case(lambda: aten.max_pool2d_with_indices_backward(grad, x, *args, indices), reads=[grad, indices])

    return [Row(name + ".fwd", "max_pool2d_with_indices", "memory", f"x{dims(shape)} {geometry}", 0.0, build_fwd),
            Row(name + ".bwd", "max_pool2d_with_indices_backward", "memory",
                f"dy{dims(y_shape)} x{dims(shape)} {geometry}", 0.0, build_bwd)]


def pointwise(name, op, shapes, fn):
    def build(mk):
        xs = [mk.uniform(*s) for s in shapes]
        return Case(lambda: fn(*xs), reads=xs)
    return Row(name, op, "memory", " ".join(f"x{dims(s)}" for s in shapes), 0.0, build)


def reduction(name, op, shape, dim, fn):
    row = pointwise(name, op, [shape], lambda x: fn(x, dim))
    row.shapes = f"x{dims(shape)} dim{dims(dim)}"
    return row


def softmax(name, op, shape, fn):
    row = pointwise(name, op, [shape], lambda x: fn(x, 1, False))
    row.shapes = f"x{dims(shape)} dim1"
    return row


def layer_norm_rows(name, shape):
    width = shape[-1]

    def build_fwd(mk):
        x, w, b = mk.uniform(*shape), mk.positive(width), mk.uniform(width)
        return Case(lambda: aten.native_layer_norm(x, [width], w, b, 1e-5), reads=[x, w, b])

    def build_bwd(mk):
        x, w, b = mk.uniform(*shape), mk.positive(width), mk.uniform(width)
        _, mean, rstd = aten.native_layer_norm(x, [width], w, b, 1e-5)
        grad = mk.uniform(*shape)
        # The bias is part of the signature only; the backward reads the other five.
        return Case(lambda: aten.native_layer_norm_backward(grad, x, [width], mean, rstd, w, b, [True, True, True]),
                    reads=[grad, x, mean, rstd, w])

    return [Row(name + ".fwd", "native_layer_norm", "memory", f"x{dims(shape)} normalized{dims([width])}", 0.0,
                build_fwd),
            Row(name + ".bwd", "native_layer_norm_backward", "memory",
                f"dy{dims(shape)} x{dims(shape)} normalized{dims([width])}", 0.0, build_bwd)]


# op_bench runs its embedding rows as 8 copies per iteration (op_rows.cc,
# kCopies: the error word's clear and read-back spread over them).
EMBEDDING_COPIES = 8


def embedding_rows(name, vocab, width, tokens):
    def build_fwd(mk):
        weight, indices = mk.uniform(vocab, width), mk.labels(vocab, *tokens)
        out_bytes = indices.numel() * width * weight.element_size()
        # Only the gathered rows are read: as many bytes as written.
        return Case(lambda: aten.embedding(weight, indices), bytes=nbytes(indices) + 2 * out_bytes,
                    calls=EMBEDDING_COPIES)

    def build_bwd(mk):
        grad, indices = mk.uniform(*tokens, width), mk.labels(vocab, *tokens)
        return Case(lambda: aten.embedding_dense_backward(grad, indices, vocab, -1, False), reads=[grad, indices],
                    calls=EMBEDDING_COPIES)

    return [Row(name + ".fwd", "embedding", "memory", f"weight{dims([vocab, width])} indices{dims(tokens)}", 0.0,
                build_fwd),
            Row(name + ".bwd", "embedding_dense_backward", "memory",
                f"dy{dims(list(tokens) + [width])} indices{dims(tokens)} num_weights {vocab}", 0.0, build_bwd)]


def sgd_momentum(name, shape):
    def build(mk):
        p, grad, buf, lr = mk.uniform(*shape), mk.uniform(*shape), mk.uniform(*shape), mk.small()

        def chain():  # as the PyTorch adaptor lowers SGD with momentum
            new_buf = torch.add(buf * 0.9, grad)
            return new_buf, p - lr * new_buf

        p2, buf2 = p.clone(), buf.clone()
        lr_value = float(lr)

        def in_place():  # torch.optim.SGD's single-tensor step
            buf2.mul_(0.9).add_(grad)
            p2.add_(buf2, alpha=-lr_value)

        return Case(chain, reads=[p, grad, buf, lr], alt=("in-place mul_+add_+add_", in_place))
    return Row(name, "sgd_momentum (4 ops)", "memory",
               f"p{dims(shape)}: mul.Scalar add.Tensor mul.Tensor sub.Tensor", 0.0, build)


def all_rows(d):
    rows = []
    fb, fi, fh, fc = d["fcn_batch"], d["fcn_inputs"], d["fcn_hidden"], d["fcn_classes"]
    rows += [matmul("fcn5.fc1.fwd", fb, fi, fh, True), matmul("fcn5.fc1.grad_w", fi, fb, fh, False),
             matmul("fcn5.fc.fwd", fb, fh, fh, True), matmul("fcn5.fc.grad_in", fb, fh, fh, False),
             matmul("fcn5.fc.grad_w", fh, fb, fh, False), matmul("fcn5.out.fwd", fb, fh, fc, True),
             matmul("fcn5.out.grad_in", fb, fc, fh, False), matmul("fcn5.out.grad_w", fh, fb, fc, False)]
    n, img = d["cnn_batch"], d["image"]
    vgg_flat = 512 * (img // 32) * (img // 32)
    rows += [matmul("vgg.fc6.fwd", n, vgg_flat, d["vgg_hidden"], True),
             matmul("vgg.fc6.grad_w", vgg_flat, n, d["vgg_hidden"], False)]
    lt, lh, lv = d["lstm_batch"] * d["lstm_seq"], d["lstm_hidden"], d["lstm_vocab"]
    rows += [matmul("lstm.gates_x.fwd", lt, lh, 4 * lh, True), matmul("lstm.gates_h.fwd", d["lstm_batch"], lh, 4 * lh,
                                                                      False),
             matmul("lstm.decoder.fwd", lt, lh, lv, True), matmul("lstm.decoder.grad_in", lt, lv, lh, False),
             matmul("lstm.decoder.grad_w", lh, lt, lv, False)]
    t, dm, ff = d["xf_batch"] * d["xf_seq"], d["xf_model"], d["xf_ff"]
    bh, s, hd = d["xf_batch"] * d["xf_heads"], d["xf_seq"], d["xf_model"] // d["xf_heads"]
    rows += [matmul("xf.qkv.fwd", t, dm, 3 * dm, True), matmul("xf.qkv.grad_in", t, 3 * dm, dm, False),
             matmul("xf.qkv.grad_w", dm, t, 3 * dm, False), matmul("xf.out_proj.fwd", t, dm, dm, True),
             matmul("xf.ff1.fwd", t, dm, ff, True), matmul("xf.ff1.grad_in", t, ff, dm, False),
             matmul("xf.ff1.grad_w", dm, t, ff, False), matmul("xf.ff2.fwd", t, ff, dm, True),
             matmul("xf.ff2.grad_in", t, dm, ff, False), matmul("xf.ff2.grad_w", ff, t, dm, False),
             bmm("xf.attn.scores", bh, s, hd, s), bmm("xf.attn.context", bh, s, s, hd)]

    s2, s4, s16, s32 = img // 2, img // 4, img // 16, img // 32
    every, weight_only, every_bias, weight_bias = (1, 1, 0), (0, 1, 0), (1, 1, 1), (0, 1, 1)
    convs = [("r50.conv1", [n, 3, img, img], [64, 3, 7, 7], 2, 3, False, weight_only),
             ("r50.layer1.conv1", [n, 256, s4, s4], [64, 256, 1, 1], 1, 0, False, every),
             ("r50.layer1.conv2", [n, 64, s4, s4], [64, 64, 3, 3], 1, 1, False, every),
             ("r50.layer1.conv3", [n, 64, s4, s4], [256, 64, 1, 1], 1, 0, False, every),
             ("r50.layer2.conv2", [n, 128, s4, s4], [128, 128, 3, 3], 2, 1, False, every),
             ("r50.layer2.downsample", [n, 256, s4, s4], [512, 256, 1, 1], 2, 0, False, every),
             ("r50.layer4.conv2", [n, 512, s32, s32], [512, 512, 3, 3], 1, 1, False, every),
             ("vgg.conv1_1", [n, 3, img, img], [64, 3, 3, 3], 1, 1, True, weight_bias),
             ("vgg.conv1_2", [n, 64, img, img], [64, 64, 3, 3], 1, 1, True, every_bias),
             ("vgg.conv3_2", [n, 256, s4, s4], [256, 256, 3, 3], 1, 1, True, every_bias),
             ("vgg.conv5_2", [n, 512, s16, s16], [512, 512, 3, 3], 1, 1, True, every_bias)]
    for spec in convs:
        rows += conv_rows(*spec)

    rows += batch_norm_rows("r50.bn1", [n, 64, s2, s2])
    rows += batch_norm_rows("r50.layer1.bn3", [n, 256, s4, s4])
    rows += batch_norm_rows("r50.bn1.nhwc", [n, 64, s2, s2], channels_last=True)
    rows += batch_norm_rows("r50.layer1.bn3.nhwc", [n, 256, s4, s4], channels_last=True)
    rows += batch_norm_rows("r50.layer4.bn3.nhwc", [n, 2048, s32, s32], channels_last=True)
    rows += max_pool_rows("r50.maxpool", [n, 64, s2, s2], 3, 2, 1)
    rows += max_pool_rows("vgg.pool1", [n, 64, img, img], 2, 2, 0)
    act = [n, 256, s4, s4]
    rows += [pointwise("r50.relu.fwd", "relu", [act], torch.relu),
             pointwise("r50.relu.bwd", "threshold_backward", [act, act], lambda g, x: aten.threshold_backward(g, x, 0)),
             pointwise("r50.residual.add", "add.Tensor", [act, act], torch.add),
             pointwise("r50.act.mul", "mul.Tensor", [act, act], torch.mul),
             pointwise("xf.ff.gelu", "gelu", [[t, ff]], F.gelu),
             reduction("fcn5.bias_grad.sum", "sum.dim_IntList", [fb, fh], [0], lambda x, dim: torch.sum(x, dim)),
             reduction("xf.ff1.bias_grad.sum", "sum.dim_IntList", [t, ff], [0], lambda x, dim: torch.sum(x, dim)),
             reduction("r50.channel.mean", "mean.dim", act, [0, 2, 3], lambda x, dim: torch.mean(x, dim)),
             softmax("xf.attn.softmax", "_softmax", [bh * s, s], aten._softmax),
             softmax("xf.attn.log_softmax", "_log_softmax", [bh * s, s], aten._log_softmax),
             softmax("lstm.decoder.log_softmax", "_log_softmax", [lt, lv], aten._log_softmax)]
    rows += layer_norm_rows("xf.ln", [t, dm])
    rows += embedding_rows("lstm.embedding", lv, lh, (d["lstm_batch"], d["lstm_seq"]))
    rows += [sgd_momentum("fcn5.sgd_momentum", [fh, fh]),
             pointwise("fcn5.fc.t", "t", [[fh, fh]], lambda x: x.t().contiguous())]
    # bfloat16 versions of some of the rows above, named "bf16." + the float32 row's name (op_rows.cc's order).
    by_name = {r.name: r for r in rows}
    rows += [in_dtype(by_name[name], torch.bfloat16, "bf16.") for name in BF16_ROWS]
    return rows


# ---- timing ----

class Timer:
    def __init__(self, device, args):
        self.device, self.args = device, args

    def _sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def batch(self, fn, n):
        """ms per call over one batch of n back-to-back calls."""
        if self.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / n
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) * 1e3 / n

    def time(self, fn, iterations=0):
        """(median ms, per-batch ms, iterations per batch), after a warm-up."""
        for _ in range(self.args.warmup):
            fn()
        self._sync()
        n = iterations or self.args.iterations
        if n <= 0:
            probe = self.batch(fn, 3)
            n = int(min(max(math.ceil(self.args.batch_ms / max(probe, 1e-4)), 3), 2000))
        per = [self.batch(fn, n) for _ in range(max(self.args.batches, 1))]
        return statistics.median(per), per, n

    def graph(self, fn):
        """A replay function of a CUDA graph captured around one call of fn."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g

    def measure(self, fn):
        """{eager_ms, eager_batch_ms, iterations[, graph_ms, graph_batch_ms | graph_error]}."""
        ms, per, n = self.time(fn)
        result = {"eager_ms": ms, "eager_batch_ms": per, "iterations": n}
        if self.device == "cuda" and not self.args.no_graphs:
            try:
                g = self.graph(fn)
                result["graph_ms"], result["graph_batch_ms"], _ = self.time(g.replay, n)
                del g
            except Exception as e:  # noqa: BLE001 - a capture PyTorch refuses is reported, not fatal
                torch.cuda.synchronize()
                result["graph_ms"] = None
                result["graph_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return result


def rate(row, nbytes_moved, ms):
    if not ms:
        return None
    return row.flops / (ms * 1e9) if row.kind == "compute" else nbytes_moved / (ms * 1e6)


def per_call(result, calls):
    """A measure() result of runs of `calls` calls, per call."""
    for key in ("eager_ms", "graph_ms"):
        if result.get(key):
            result[key] /= calls
    for key in ("eager_batch_ms", "graph_batch_ms"):
        if result.get(key):
            result[key] = [ms / calls for ms in result[key]]
    return result


def run_row(row, mk, timer):
    case = row.build(mk)
    out = {"name": row.name, "op": row.op, "kind": row.kind, "shapes": row.shapes, "flops": row.flops}
    if row.kind == "memory":
        if case.bytes is not None:
            out["bytes"] = float(case.bytes)
        else:
            outputs = flat(case.fn())
            out["bytes"] = float(sum(nbytes(t) for t in case.reads) + sum(nbytes(t) for t in outputs))
    else:
        out["bytes"] = 0.0
    if case.calls == 1:
        out.update(timer.measure(case.fn))
    else:
        out.update(per_call(timer.measure(lambda: [case.fn() for _ in range(case.calls)]), case.calls))
        out["calls_per_run"] = case.calls
    best = out.get("graph_ms") or out["eager_ms"]
    key = "tflops" if row.kind == "compute" else "gbs"
    out[key] = rate(row, out["bytes"], best)
    if case.alt is not None:
        label, fn = case.alt
        try:
            out["alt"] = {"op": label, **timer.measure(fn)}
        except Exception as e:  # noqa: BLE001 - the alternative path is optional
            out["alt"] = {"op": label, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    return out


def measure_copy(device, copy_bytes, timer):
    src = torch.full((copy_bytes // 4,), 1.5, device=device)
    dst = torch.empty_like(src)
    result = timer.measure(lambda: dst.copy_(src))
    result["bytes"] = 2.0 * copy_bytes  # read + written
    best = result.get("graph_ms") or result["eager_ms"]
    result["gbs"] = result["bytes"] / (best * 1e6)
    result["eager_gbs"] = result["bytes"] / (result["eager_ms"] * 1e6)
    return result


# ---- metadata and main ----

def git_commit():
    env = os.environ.get("TANDEM_GIT_COMMIT")
    if env:
        return env
    try:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001 - no git, no commit
        return None


def meta(args, device):
    info = {"tool": "torch_ops", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "torch": torch.__version__, "python": platform.python_version(), "device": device,
            "small": args.small, "allow_tf32": args.allow_tf32, "cudnn_benchmark": args.cudnn_benchmark,
            "iterations": args.iterations, "batches": args.batches, "batch_ms": args.batch_ms,
            "git_commit": git_commit(), "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    else:
        info["gpu"] = None
    return info


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="", help="write the results as JSON here")
    p.add_argument("--rows", default="", help="comma-separated substrings; only rows whose name contains one")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--small", action="store_true", help="tiny shapes (op_bench --small)")
    p.add_argument("--iterations", type=int, default=0, help="per timed batch (0: enough for --batch-ms)")
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--batch-ms", type=float, default=20.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--allow-tf32", action="store_true", help="TF32 in cuDNN convolutions (op_bench --allow_tf32)")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="let cuDNN try algorithms (torch.backends.cudnn.benchmark); default: its heuristics, as Tandem")
    p.add_argument("--no-graphs", action="store_true", help="eager times only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="print the selected rows and exit")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_ops: --device cuda but torch sees no GPU; use --device cpu --small for a smoke test")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = bool(args.allow_tf32)
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)

    filters = [f for f in args.rows.split(",") if f]
    rows = [r for r in all_rows(SMALL if args.small else FULL) if not filters or any(f in r.name for f in filters)]
    if args.list:
        for r in rows:
            print(f"{r.name:28s} {r.op:32s} {r.shapes}")
        return 0
    timer = Timer(device, args)
    mk = Maker(device, args.seed)
    d = SMALL if args.small else FULL
    result = {"meta": meta(args, device), "copy": measure_copy(device, d["copy_bytes"], timer), "rows": []}
    copy_gbs = result["copy"]["gbs"]
    print(f"torch {torch.__version__} on {result['meta']['gpu'] or 'cpu'}; copy {copy_gbs:.0f} GB/s (read + written)")
    print(f"{'row':28s} {'op':32s} {'eager ms':>9s} {'graph ms':>9s} {'rate':>14s} {'%copy':>6s}")

    def save():
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
                f.write("\n")

    failed = 0
    for row in rows:
        try:
            r = run_row(row, mk, timer)
        except Exception as e:  # noqa: BLE001 - one failing row must not lose the others
            failed += 1
            r = {"name": row.name, "op": row.op, "kind": row.kind, "shapes": row.shapes, "flops": row.flops,
                 "eager_ms": None, "graph_ms": None, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
            print(f"{row.name:28s} {row.op:32s} failed: {r['error']}")
        else:
            if row.kind == "compute":
                rate_text, frac = f"{r['tflops']:.3g} TFLOP/s", ""
            else:
                r["copy_fraction"] = r["gbs"] / copy_gbs if copy_gbs else None
                rate_text, frac = f"{r['gbs']:.0f} GB/s", f"{100 * r['copy_fraction']:.0f}%"
            graph = "-" if r.get("graph_ms") is None else f"{r['graph_ms']:.4f}"
            print(f"{row.name:28s} {row.op:32s} {r['eager_ms']:9.4f} {graph:>9s} {rate_text:>14s} {frac:>6s}")
        result["rows"].append(r)
        save()
        if device == "cuda":
            torch.cuda.empty_cache()
    save()
    print(f"torch_ops: {len(rows)} rows, {failed} failed" + (f"; wrote {args.out}" if args.out else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
