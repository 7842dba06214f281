"""train()'s training-loop options through tandemd equal the same loop in PyTorch: the RMSprop and Adagrad
optimizers, gradient clipping by norm (2 and inf) and by value, and gradient accumulation over micro-batches.

Each test trains a tiny model (an MLP, and a small CNN with batch norm) for a few steps in Tandem and in eager
PyTorch from the same initial weights and batches, and compares every step's loss, the final parameters and
buffers, and the optimizer's state (float32; relative 1e-4, the state 1e-3, as test_training_equivalence). The
clipping tests also check that the clipping did something: the eager loop's unclipped norm (or largest gradient)
exceeds the limit at every step. One CPU tandemd serves the whole module.
"""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import (RTOL, ModuleDaemon, assert_losses_close, missing_op_message, models, relative_error, tandem,
                    torch)

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop

STEPS = 8


def tiny_cnn():
    """(model, loss_fn, make_batch): conv (no bias: batch norm follows, and a bias's gradient there is rounding
    noise that RMSprop and Adagrad would scale up to full steps), batch norm, ReLU, max pooling, a linear head;
    3x8x8 images, 4 per batch, 5 classes."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))

    def make_batch(g):
        return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)

    return model, F.cross_entropy, make_batch


def tiny(name):
    return tiny_cnn() if name == "cnn" else models.tiny(name)


def eager_step(model, loss_fn, optimizer, x, y, options):
    """One optimizer step of the PyTorch loop that train(**options) reproduces: k micro-batches, each
    (loss_fn(model(x_i), y_i) / k).backward(), then clipping, then optimizer.step(). Returns (the sum of the
    scaled losses, the unclipped total norm or largest |gradient|, None without clipping)."""
    k = options.get("accumulate", 1)
    optimizer.zero_grad()
    loss_sum = 0.0
    for xi, yi in zip(x.chunk(k), y.chunk(k)):
        loss = loss_fn(model(xi), yi)
        if k > 1:
            loss = loss / k
        loss.backward()
        loss_sum += loss.item()
    before = None
    params = [p for p in model.parameters() if p.grad is not None]
    if "clip_grad_norm" in options:
        before = torch.nn.utils.clip_grad_norm_(params, options["clip_grad_norm"],
                                                options.get("clip_norm_type", 2.0)).item()
    elif "clip_grad_value" in options:
        before = max(p.grad.abs().max().item() for p in params)
        torch.nn.utils.clip_grad_value_(params, options["clip_grad_value"])
    optimizer.step()
    return loss_sum, before


class TrainingOptionsTest(unittest.TestCase):
    def run_both(self, model_name, make_optimizer, steps=STEPS, scheduler=None, **options):
        """Trains `model_name` `steps` steps through tandemd with train(**options) and in PyTorch's loop; asserts
        that losses, final weights and optimizer state agree. Returns the eager loop's unclipped norms."""
        torch.manual_seed(0)
        model, loss_fn, make_batch = tiny(model_name)
        reference = copy.deepcopy(model)
        optimizer = make_optimizer(model.parameters())
        ref_optimizer = make_optimizer(reference.parameters())
        sched = scheduler(optimizer) if scheduler else None
        ref_sched = scheduler(ref_optimizer) if scheduler else None
        g = torch.Generator().manual_seed(1)
        k = options.get("accumulate", 1)
        batches = []
        for _ in range(steps):  # k micro-batches along dim 0
            parts = [make_batch(g) for _ in range(k)]
            batches.append(tuple(torch.cat(t) for t in zip(*parts)))
        try:
            job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint,
                                     name=model_name, **options)
        except tandem.UnsupportedOpError as e:
            self.fail(missing_op_message(e))
        with job:
            losses = []
            for x, y in batches:
                losses.append(job.step(x, y))
                if sched:
                    sched.step()
            trained = job.state_dict()
            states = {(name, s): job.read(f"optim/{name}/{s}")
                      for name, _ in model.named_parameters() for s in job._plan.state_names}

        ref_losses, unclipped = [], []
        for x, y in batches:
            loss, before = eager_step(reference, loss_fn, ref_optimizer, x, y, options)
            ref_losses.append(loss)
            unclipped.append(before)
            if ref_sched:
                ref_sched.step()

        assert_losses_close(self, losses, ref_losses, RTOL)
        expected = reference.state_dict()
        self.assertEqual(sorted(trained), sorted(expected))
        for key, value in expected.items():
            err = relative_error(trained[key], value)
            self.assertLessEqual(err, RTOL, f"{key}: relative error {err:.3g} after {steps} steps")
        ref_params = dict(reference.named_parameters())
        self.assertTrue(states or not job._plan.state_names)
        for (name, s), value in states.items():
            err = relative_error(value, ref_optimizer.state[ref_params[name]][s])
            self.assertLessEqual(err, RTOL * 10, f"optimizer state {name}/{s}: relative error {err:.3g}")
        return unclipped

    # ---- optimizers ----

    def test_rmsprop(self):
        self.run_both("mlp", lambda p: torch.optim.RMSprop(p, lr=1e-3))

    def test_rmsprop_momentum_centered_weight_decay_with_schedule(self):
        opt = lambda p: torch.optim.RMSprop(p, lr=2e-3, alpha=0.9, momentum=0.9, centered=True,  # noqa: E731
                                            weight_decay=0.01)
        sched = lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)  # noqa: E731
        self.run_both("mlp", opt, scheduler=sched)
        self.run_both("cnn", lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.5, centered=True))

    def test_adagrad(self):
        self.run_both("mlp", lambda p: torch.optim.Adagrad(p, lr=0.05))
        self.run_both("cnn", lambda p: torch.optim.Adagrad(p, lr=0.05, lr_decay=0.1, weight_decay=0.01,
                                                           initial_accumulator_value=0.5, eps=1e-6))

    # ---- gradient clipping ----

    def test_clip_grad_norm(self):
        sgd = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
        norms = self.run_both("mlp", sgd, clip_grad_norm=0.05)
        self.assertTrue(all(n > 0.05 for n in norms), f"the unclipped norms {norms} should all exceed 0.05")
        norms = self.run_both("cnn", lambda p: torch.optim.Adam(p, lr=1e-2), clip_grad_norm=0.3)
        self.assertTrue(all(n > 0.3 for n in norms), f"the unclipped norms {norms} should all exceed 0.3")
        # A max_norm above every norm leaves the gradients as they are (the coefficient is clamped to 1).
        norms = self.run_both("mlp", sgd, clip_grad_norm=50.0)
        self.assertTrue(all(n < 50.0 for n in norms), f"the norms {norms} should all stay below 50")

    def test_clip_grad_norm_inf(self):
        sgd = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
        norms = self.run_both("mlp", sgd, clip_grad_norm=0.02, clip_norm_type=float("inf"))
        self.assertTrue(all(n > 0.02 for n in norms), f"the largest gradients {norms} should all exceed 0.02")

    def test_clip_grad_value(self):
        sgd = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
        largest = self.run_both("mlp", sgd, clip_grad_value=0.01)
        self.assertTrue(all(v > 0.01 for v in largest), f"the largest gradients {largest} should all exceed 0.01")

    # ---- gradient accumulation ----

    def test_accumulate_two_micro_batches_through_batch_norm(self):
        # Batch norm's running statistics are updated once per micro-batch, as in PyTorch's loop.
        self.run_both("cnn", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), accumulate=2)

    def test_accumulate_four_with_clipping_and_adam(self):
        # Summed over micro-batches, some of the first layer's gradients nearly cancel; Adam with a tiny eps
        # scales their rounding noise up to full steps (eager float32 then differs from float64 by 1e-4, more
        # than Tandem does), so a larger eps keeps the comparison about Tandem, as in test_training_equivalence.
        adam = lambda p: torch.optim.Adam(p, lr=1e-2, eps=1e-3)  # noqa: E731
        norms = self.run_both("mlp", adam, accumulate=4, clip_grad_norm=0.1)
        self.assertTrue(all(n > 0.1 for n in norms), f"the unclipped norms {norms} should all exceed 0.1")

    def test_batch_norm_called_twice_updates_its_statistics_twice(self):
        class TwiceNormalized(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b, self.head = nn.Linear(12, 8), nn.Linear(8, 8), nn.Linear(8, 5)
                self.norm = nn.BatchNorm1d(8)

            def forward(self, x):
                return self.head(self.norm(self.b(torch.relu(self.norm(self.a(x))))))

        torch.manual_seed(0)
        model = TwiceNormalized()
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randn(6, 12, generator=g), torch.randint(0, 5, (6,), generator=g)) for _ in range(3)]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        with tandem.torch.train(model, F.cross_entropy, optimizer, batches[0], endpoint=_daemon.endpoint) as job:
            for x, y in batches:
                job.step(x, y)
            trained = job.state_dict()
        for x, y in batches:
            eager_step(reference, F.cross_entropy, ref_optimizer, x, y, {})
        for key, value in reference.state_dict().items():
            self.assertLessEqual(relative_error(trained[key], value), RTOL, key)


class TrainingOptionsValidationTest(unittest.TestCase):
    """Arguments Tandem refuses before anything is traced or sent."""

    def capture(self, batch=None, **options):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        return tandem.torch.capture_training_job(model, loss_fn, optimizer,
                                                 batch or make_batch(torch.Generator()), **options)

    def test_refused_options(self):
        with self.assertRaisesRegex(tandem.CaptureError, "choose one"):
            self.capture(clip_grad_norm=1.0, clip_grad_value=0.5)
        with self.assertRaisesRegex(tandem.CaptureError, "clip_norm_type"):
            self.capture(clip_grad_norm=1.0, clip_norm_type=1)
        with self.assertRaisesRegex(tandem.CaptureError, "clip_grad_norm"):
            self.capture(clip_grad_norm=-1.0)
        with self.assertRaisesRegex(tandem.CaptureError, "accumulate"):
            self.capture(accumulate=0)
        with self.assertRaisesRegex(tandem.BatchError, "divisible by 4"):
            self.capture(accumulate=4)  # the example batch holds 6

    def test_accumulated_step_graph(self):
        x, y = models.tiny("mlp")[2](torch.Generator())
        _, single = self.capture((x[:3], y[:3]))
        _, lowered = self.capture((x, y), accumulate=2, clip_grad_norm=1.0)
        ops = [n["op"] for n in lowered.graph["nodes"]]
        # Two forward and backward passes over slices of the one batch feed.
        self.assertEqual(ops.count("slice_copy.Tensor"), 4)
        self.assertEqual(ops.count("addmm"), 2 * [n["op"] for n in single.graph["nodes"]].count("addmm"))
        self.assertEqual([f["name"] for f in lowered.graph["feeds"]], ["optim/group0/lr", "batch/0", "batch/1"])
        labels = {n.get("label") for n in lowered.graph["nodes"]}
        self.assertIn("gradient clipping", labels)

    def test_optimizer_state_names(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        batch = make_batch(torch.Generator())
        cases = [(torch.optim.RMSprop(model.parameters()), ["square_avg"]),
                 (torch.optim.RMSprop(model.parameters(), momentum=0.9, centered=True),
                  ["square_avg", "momentum_buffer", "grad_avg"]),
                 (torch.optim.Adagrad(model.parameters(), lr_decay=0.1), ["sum"])]
        for optimizer, names in cases:
            _, lowered = tandem.torch.capture_training_job(model, loss_fn, optimizer, batch)
            updated = {u["persistent"] for u in lowered.graph["updates"]}
            self.assertEqual({u for u in updated if u.startswith("optim/0.weight/")},
                             {f"optim/0.weight/{n}" for n in names})
        feeds = [f["name"] for f in lowered.graph["feeds"]]
        self.assertEqual(feeds, ["optim/group0/clr", "batch/0", "batch/1"])


if __name__ == "__main__":
    unittest.main()
