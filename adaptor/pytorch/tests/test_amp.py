"""Mixed precision through tandemd: train(autocast=..., grad_scaler=...) against PyTorch's AMP loop.

On the CPU (torch 1.13 here) PyTorch's CUDA autocast does not act and its GradScaler disables itself, so the
reference loop is written out: forward and loss under the adaptor's Autocast mode (CUDA autocast's op lists,
tested op by op below and against PyTorch's own CUDA autocast by tests/gpu's test_amp_gpu.py), then
GradScaler's algorithm step by step (scale the loss, backward, unscale by the float32 reciprocal, check for inf
and NaN, step or skip, update the scale). bfloat16: PyTorch 1.13 has no float16 matrix product on the CPU.

- The policy: matrix products and convolutions run in the 16-bit dtype, softmax, norms, losses and sums in
  float32, batch norm keeps float32 parameters beside 16-bit activations, promote ops take the widest dtype,
  ops inside Python functions (nn.MultiheadAttention) are cast too, binary_cross_entropy is refused.
- A CNN (conv, batch norm, residual, linear) and a small transformer language model with gradient clipping
  train under bfloat16 autocast with losses within bfloat16 tolerance of the reference (5u, u = 2^-8: both
  round the same ops to bfloat16, Tandem's CPU kernels accumulating in double and PyTorch's in float32), and
  so do zoo models: ResNet-18 with loss scaling, MobileNetV3-Small accumulating 2 micro-batches, the decoder
  LM with clipping (ZooAmpTest says how later steps may drift).
- Loss scaling skips exactly the steps PyTorch skips: a scale that overflows the gradients, a batch holding
  a NaN: the parameters, Adam's moments and its step count stay as they were, the scale backs off, and grows
  after growth_interval clean steps. The skipped steps are decisive (an overflow by orders of magnitude, a
  NaN), so both sides must agree on them.
- A checkpoint with the scaler's state resumes bit for bit: 3 + 3 steps equal 6.
"""

import copy
import math
import unittest

import sys

import common  # noqa: F401  (paths)
from common import ModuleDaemon, assert_losses_close, models, tandem, torch

import torch.nn as nn
import torch.nn.functional as F
from tandem.torch.amp import Autocast, autocast_region

sys.path.insert(0, common.SOURCE_ROOT)
from zoo import catalog  # noqa: E402

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop

BF16 = torch.bfloat16
RTOL_BF16 = 5 * 2.0 ** -8
FLOAT32_MAX = torch.finfo(torch.float32).max


class _Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn(self.conv(x)))


def _cnn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), _Block(8),
                          nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 5))

    def make_batch(g):
        return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)

    return model, F.cross_entropy, make_batch


def _loud_loss(output, target):
    """64 times the cross-entropy: the last layer's bias gets a gradient above 1, which float32's largest value
    as the loss scale overflows."""
    return 64 * F.cross_entropy(output, target)


class _Scaler:
    """GradScaler's algorithm on float32 tensors, for the reference loop (PyTorch's own disables itself
    without CUDA)."""

    def __init__(self, init_scale, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale = torch.full((1,), init_scale, dtype=torch.float32)
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.tracker = 0

    def settings(self):
        return dict(init_scale=self.scale.item(), growth_factor=self.growth_factor,
                    backoff_factor=self.backoff_factor, growth_interval=self.growth_interval)

    def unscale(self, params):
        inv = self.scale.double().reciprocal().float()
        found = False
        for p in params:
            if p.grad is not None:
                found |= not bool(torch.isfinite(p.grad).all())
                p.grad.mul_(inv)
        return found

    def update(self, found):
        if found:
            self.scale = self.scale * self.backoff_factor
            self.tracker = 0
            return
        self.tracker += 1
        if self.tracker == self.growth_interval:
            grown = self.scale * self.growth_factor
            if torch.isfinite(grown).all():
                self.scale = grown
            self.tracker = 0


def eager_amp_step(model, loss_fn, optimizer, x, y, dtype, scaler=None, clip_grad_norm=None, accumulate=1):
    """PyTorch's AMP step (over `accumulate` micro-batches; dtype None: no autocast): returns (loss, whether the
    optimizer's step was skipped)."""
    optimizer.zero_grad()
    params = [p for p in model.parameters() if p.requires_grad]
    loss = 0.0
    for xi, yi in zip(x.chunk(accumulate), y.chunk(accumulate)):
        with autocast_region(dtype):
            part = loss_fn(model(xi), yi) / accumulate if accumulate > 1 else loss_fn(model(xi), yi)
        (part * scaler.scale).sum().backward() if scaler is not None else part.backward()
        loss += part.item()
    found = scaler.unscale(params) if scaler is not None else False
    if clip_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_grad_norm)
    if not found:
        optimizer.step()
    if scaler is not None:
        scaler.update(found)
    return loss, found


class AutocastPolicyTest(unittest.TestCase):
    """The mode's casts, op by op, as CUDA autocast's lists give them."""

    def test_lists(self):
        x = torch.randn(4, 6)
        lin = nn.Linear(6, 3)
        with Autocast(BF16):
            self.assertEqual(lin(x).dtype, BF16)  # linear: 16-bit
            self.assertEqual((x @ x.t()).dtype, BF16)  # matmul
            h = x.to(BF16)
            self.assertEqual(h.softmax(-1).dtype, torch.float32)  # softmax: float32 by its dtype argument
            self.assertEqual(F.log_softmax(h, -1).dtype, torch.float32)
            self.assertEqual(h.sum().dtype, torch.float32)
            self.assertEqual(F.layer_norm(h, (6,)).dtype, torch.float32)  # float32 list
            self.assertEqual(h.exp().dtype, torch.float32)
            self.assertEqual(F.mse_loss(h, h).dtype, torch.float32)
            self.assertEqual(F.cross_entropy(h, torch.zeros(4, dtype=torch.long)).dtype, torch.float32)
            self.assertEqual((h * 2).dtype, BF16)  # not listed: the input's dtype
            self.assertEqual(F.gelu(h).dtype, BF16)
            self.assertEqual(h.float().dtype, torch.float32)  # the model's own casts stay
            self.assertEqual(torch.addcmul(h, h, x).dtype, torch.float32)  # promote: the widest
            self.assertEqual(torch.addcmul(h, h, h).dtype, BF16)
            self.assertEqual(x.double().exp().dtype, torch.float64)  # float64 is never cast
            with self.assertRaisesRegex(tandem.CaptureError, "binary_cross_entropy_with_logits"):
                F.binary_cross_entropy(torch.sigmoid(x), torch.rand(4, 6))

    def test_python_functions_are_cast_inside(self):
        """nn.MultiheadAttention's Python forward calls linear, bmm and softmax: each is cast, as autocast sees
        every op it dispatches."""
        torch.manual_seed(0)
        mha = nn.MultiheadAttention(8, 2)
        x = torch.randn(3, 2, 8)
        seen = []

        class Spy(Autocast):
            def __torch_function__(self, func, types_, args=(), kwargs=None):
                out = super().__torch_function__(func, types_, args, kwargs)
                if getattr(func, "__name__", "") in ("linear", "bmm", "softmax") and isinstance(out, torch.Tensor):
                    seen.append((func.__name__, out.dtype))
                return out

        with Spy(BF16):
            out, _ = mha(x, x, x)
        self.assertEqual(out.dtype, BF16)
        self.assertIn(("linear", BF16), seen)
        self.assertIn(("bmm", BF16), seen)
        self.assertIn(("softmax", torch.float32), seen)

    def test_batch_norm_keeps_float32_parameters(self):
        model, _, make_batch = _cnn()
        x, _ = make_batch(torch.Generator().manual_seed(1))
        with Autocast(BF16):
            h = model[1](model[0](x))
        self.assertEqual(model[0](x).dtype, torch.float32)  # outside the region: float32
        self.assertEqual(h.dtype, BF16)
        self.assertEqual(model[1].weight.dtype, torch.float32)

    def test_bad_settings_are_refused(self):
        model, loss_fn, make_batch = _cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batch = make_batch(torch.Generator().manual_seed(1))
        with self.assertRaisesRegex(tandem.CaptureError, "autocast must be"):
            tandem.torch.capture_training_job(model, loss_fn, opt, batch, autocast=torch.float64)
        with self.assertRaisesRegex(tandem.CaptureError, "backoff_factor"):
            tandem.torch.capture_training_job(model, loss_fn, opt, batch, grad_scaler={"backoff_factor": 2.0})
        with self.assertRaisesRegex(tandem.CaptureError, "unknown settings"):
            tandem.torch.capture_training_job(model, loss_fn, opt, batch, grad_scaler={"init": 1.0})


class AmpTrainingTest(unittest.TestCase):
    def test_lowered_graph_mixes_precisions(self):
        model, loss_fn, make_batch = _cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        _, lowered = tandem.torch.capture_training_job(model, loss_fn, opt, make_batch(torch.Generator()),
                                                       autocast=BF16)
        for name, value in lowered.persistent:
            self.assertEqual(value.dtype, torch.int64 if "num_batches" in name else torch.float32, name)
        conv_dtypes = {n["declared_outputs"][0]["dtype"] for n in lowered.graph["nodes"] if n["op"] == "convolution"}
        self.assertEqual(conv_dtypes, {"BFLOAT16"})

    def run_both(self, build, make_optimizer, steps, scaler=None, batches=None, **options):
        """Trains through tandemd and in the reference loop; returns (losses, reference losses, skipped steps,
        job, reference model, reference optimizer). The job stays open (closed at the test's end)."""
        model, loss_fn, make_batch = build()
        reference = copy.deepcopy(model)
        optimizer, ref_optimizer = make_optimizer(model.parameters()), make_optimizer(reference.parameters())
        g = torch.Generator().manual_seed(1)
        batches = batches or [make_batch(g) for _ in range(steps)]
        job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint, autocast=BF16,
                                 grad_scaler=scaler.settings() if scaler else None, **options)
        self.addCleanup(job.close)
        losses = [job.step(*b) for b in batches]
        ref, skipped = [], []
        for i, (x, y) in enumerate(batches):
            loss, found = eager_amp_step(reference, loss_fn, ref_optimizer, x, y, BF16, scaler,
                                         options.get("clip_grad_norm"), options.get("accumulate", 1))
            ref.append(loss)
            if found:
                skipped.append(i)
        return losses, ref, skipped, job, reference, ref_optimizer

    def test_cnn_trains_under_bfloat16_autocast(self):
        losses, ref, _, job, reference, _ = self.run_both(
            _cnn, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), 6)
        assert_losses_close(self, losses, ref, RTOL_BF16)
        state = job.state_dict()
        for name, value in reference.state_dict().items():
            if value.is_floating_point():
                scale = value.abs().max().item() + 1e-3
                self.assertLessEqual((state[name] - value).abs().max().item(), 4 * RTOL_BF16 * scale, name)

    def test_transformer_trains_under_bfloat16_autocast_with_clipping(self):
        def build():
            torch.manual_seed(0)
            return models.tiny("transformer")

        losses, ref, _, _, _, _ = self.run_both(build, lambda p: torch.optim.AdamW(p, lr=1e-3), 5,
                                                clip_grad_norm=0.5)
        assert_losses_close(self, losses, ref, RTOL_BF16)

    def test_loss_scaling_skips_the_steps_pytorch_skips(self):
        """Step 0: float32's largest value as the scale overflows the gradients (the loss is 64 times the
        cross-entropy, so that the last layer's bias has a gradient above 1 before scaling); step 3: a NaN in the
        batch. Both are skipped by both loops; the scale backs off by 2^-100 after each and doubles after every
        2 clean steps."""
        model, _, make_batch = _cnn()
        loss_fn = _loud_loss
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(7)]
        batches[3] = (batches[3][0].clone(), batches[3][1])
        batches[3][0][0, 0, 0, 0] = float("nan")
        scaler = _Scaler(FLOAT32_MAX, backoff_factor=2.0 ** -100, growth_interval=2)
        losses, ref, skipped, job, reference, ref_optimizer = self.run_both(
            lambda: (model, loss_fn, make_batch), lambda p: torch.optim.Adam(p, lr=1e-2), 7, scaler, batches)
        self.assertEqual(skipped, [0, 3])
        self.assertTrue(math.isnan(float(losses[3])))
        finite = [i for i in range(7) if i != 3]
        assert_losses_close(self, [losses[i] for i in finite], [ref[i] for i in finite], RTOL_BF16)
        # Scaler state: 3e38 -> backoff -> 2 clean (grow) -> NaN backoff -> 3 clean (grow after 2, tracker 1).
        state = job.grad_scaler_state_dict()
        expected = torch.tensor([FLOAT32_MAX], dtype=torch.float32) * 2.0 ** -100 * 2 * 2.0 ** -100 * 2
        self.assertEqual(state["scale"], expected.item())
        self.assertEqual(state["scale"], scaler.scale.item())
        self.assertEqual(state["_growth_tracker"], 1)
        # Adam counted the 5 steps taken, not 7.
        steps = {s["step"] if not torch.is_tensor(s["step"]) else s["step"].item()
                 for s in job.optimizer_state_dict()["state"].values()}
        self.assertEqual(steps, {5})
        self.assertEqual({s["step"].item() if torch.is_tensor(s["step"]) else s["step"]
                          for s in ref_optimizer.state_dict()["state"].values()}, {5})
        self.assertIn("scaler", job.checkpoint())

    def test_a_skipped_first_step_changes_no_weight(self):
        model, _, make_batch = _cnn()
        loss_fn = _loud_loss
        initial = {k: v.clone() for k, v in model.named_parameters()}
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        job = tandem.torch.train(model, loss_fn, opt, make_batch(torch.Generator()), endpoint=_daemon.endpoint,
                                 autocast=BF16, grad_scaler={"init_scale": FLOAT32_MAX})
        self.addCleanup(job.close)
        job.step(*make_batch(torch.Generator().manual_seed(2)))
        state = job.state_dict()
        for name, value in initial.items():
            self.assertTrue(torch.equal(state[name], value), name)
        self.assertEqual(job.grad_scaler_state_dict()["scale"], torch.tensor(FLOAT32_MAX * 0.5).item())
        for s in job.optimizer_state_dict()["state"].values():
            self.assertTrue(torch.count_nonzero(s["exp_avg"]) == 0)

    def test_checkpoint_with_the_scaler_resumes_bit_for_bit(self):
        model, loss_fn, make_batch = _cnn()
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(6)]
        settings = {"init_scale": 2.0 ** 10, "growth_interval": 2}

        def start(m, opt, scaler):
            job = tandem.torch.train(m, loss_fn, opt, batches[0], endpoint=_daemon.endpoint, autocast=BF16,
                                     grad_scaler=scaler)
            self.addCleanup(job.close)
            return job

        straight_model = copy.deepcopy(model)
        straight = start(straight_model, torch.optim.Adam(straight_model.parameters(), lr=1e-2), settings)
        straight_losses = [straight.step(*b) for b in batches]

        first_model = copy.deepcopy(model)
        first = start(first_model, torch.optim.Adam(first_model.parameters(), lr=1e-2), settings)
        losses = [first.step(*b) for b in batches[:3]]
        saved = first.checkpoint()
        resumed_model = copy.deepcopy(model)
        resumed_model.load_state_dict(saved["model"])
        opt = torch.optim.Adam(resumed_model.parameters(), lr=1e-2)
        opt.load_state_dict(saved["optimizer"])
        second = start(resumed_model, opt, saved["scaler"])
        losses += [second.step(*b) for b in batches[3:]]
        self.assertEqual([float(v) for v in losses], [float(v) for v in straight_losses])
        self.assertEqual(second.grad_scaler_state_dict(), straight.grad_scaler_state_dict())
        self.assertEqual(straight.grad_scaler_state_dict()["scale"], 2.0 ** 13)


class ZooAmpTest(unittest.TestCase):
    """Zoo models at their small size (zoo/catalog.py) under bfloat16 autocast, with the other loop options:
    two CNNs (one with loss scaling, one accumulating 2 micro-batches) and the decoder-only transformer with
    gradient clipping; 3 steps each against the reference loop. The first step's loss must be within 5u of the
    reference's. Later ones may drift further, since small batch norms amplify rounding from step to step
    (test_zoo.py) and the two sides round the 16-bit products differently (Tandem's CPU kernels accumulate in
    double): they must be within 5u, or within twice the distance between the reference and the same loop in
    float32 (the two mixed-precision runs no further apart than mixed precision moves either)."""

    def run_zoo(self, name, **options):
        def build():
            torch.manual_seed(0)
            model, loss_fn, make_batch = catalog.entry(name).build("small")
            return model, loss_fn, lambda g: tuple(make_batch(g))

        def optimizer(params):
            return torch.optim.SGD(params, lr=0.01, momentum=0.9)

        losses, ref, skipped, _, _, _ = AmpTrainingTest.run_both(self, build, optimizer, 3, **options)
        self.assertEqual(skipped, [])
        assert_losses_close(self, losses[:1], ref[:1], RTOL_BF16)
        if all(abs(float(a) - e) <= RTOL_BF16 * abs(e) for a, e in zip(losses, ref)):
            return
        model, loss_fn, make_batch = build()
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(3)]
        opt = optimizer(model.parameters())
        full = [eager_amp_step(model, loss_fn, opt, x, y, None, None, options.get("clip_grad_norm"),
                               options.get("accumulate", 1))[0] for x, y in batches]
        for i, (a, e16, e32) in enumerate(zip(losses, ref, full)):
            bound = max(RTOL_BF16 * abs(e16), 2 * abs(e16 - e32))
            self.assertLessEqual(abs(float(a) - e16), bound,
                                 f"step {i}: loss {float(a)} through tandemd; the reference {e16} under autocast, "
                                 f"{e32} in float32")

    def test_resnet18_with_loss_scaling(self):
        self.run_zoo("resnet18", scaler=_Scaler(2.0 ** 16))

    def test_mobilenet_v3_small_accumulating(self):
        self.run_zoo("mobilenet_v3_small", accumulate=2)

    def test_decoder_lm_with_clipping(self):
        self.run_zoo("decoder_lm", clip_grad_norm=0.5)


if __name__ == "__main__":
    unittest.main()
