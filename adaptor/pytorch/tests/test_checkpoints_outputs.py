"""Real training loops: checkpoints that round-trip through torch.save, named outputs beyond the loss, keyword
inputs and several targets — against a CPU tandemd.

Resuming is checked bit for bit: a job's 20 steps against 10 steps, a checkpoint written with torch.save,
loaded into a fresh model and optimizer, and 10 more steps in a new job. Both runs execute the same kernels on
the same values (the checkpoint holds the daemon's own bits, the scalar feeds depend only on the step count and
the learning rate), so the losses and weights must be equal, not close.
"""

import copy
import os
import tempfile
import unittest

import common  # noqa: F401  (paths)
from common import RTOL, ModuleDaemon, assert_losses_close, eager_losses, models, relative_error, tandem, torch

import torch.nn as nn
import torch.nn.functional as F

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)


def _adam(params):
    return torch.optim.Adam(params, lr=1e-2)


def _adamw_amsgrad(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.05, amsgrad=True)


def _step_lr(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)


class CheckpointTest(unittest.TestCase):
    def _run(self, model, optimizer, loss_fn, batches, scheduler=None, checkpoint_path=None):
        """Trains through a job; returns (losses, job.state_dict(), job.optimizer_state_dict()) and, with
        checkpoint_path, saves job.checkpoint() plus the scheduler's state there."""
        with tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint) as job:
            losses = []
            for x, y in batches:
                losses.append(job.step(x, y))
                if scheduler:
                    scheduler.step()
            weights, state = job.state_dict(), job.optimizer_state_dict()
            if checkpoint_path:
                checkpoint = job.checkpoint()
                if scheduler:
                    checkpoint["scheduler"] = scheduler.state_dict()
                torch.save(checkpoint, checkpoint_path)
        return losses, weights, state

    def _assert_state_equal(self, actual, expected, exact):
        self.assertEqual(actual["param_groups"], expected["param_groups"])
        self.assertEqual(sorted(actual["state"]), sorted(expected["state"]))
        for index, entry in expected["state"].items():
            self.assertEqual(list(actual["state"][index]), list(entry), f"state keys of parameter {index}")
            for key, value in entry.items():
                got = actual["state"][index][key]
                self.assertEqual(type(got), type(value), f"{index}/{key}")
                if not isinstance(value, torch.Tensor):
                    self.assertEqual(got, value, f"{index}/{key}")
                    continue
                self.assertEqual((got.dtype, tuple(got.shape)), (value.dtype, tuple(value.shape)), f"{index}/{key}")
                if exact or key == "step":
                    self.assertTrue(torch.equal(got, value), f"{index}/{key}")
                else:
                    err = relative_error(got, value)
                    self.assertLessEqual(err, RTOL * 10, f"{index}/{key}: relative error {err:.3g}")

    def _resume_is_bit_for_bit(self, make_optimizer, make_scheduler=None, float_step=False):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(20)]

        straight_model = copy.deepcopy(model)
        straight_opt = make_optimizer(straight_model.parameters())
        straight = self._run(straight_model, straight_opt, loss_fn, batches,
                             make_scheduler(straight_opt) if make_scheduler else None)

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "step10.pt")
            first_model = copy.deepcopy(model)
            first_opt = make_optimizer(first_model.parameters())
            first = self._run(first_model, first_opt, loss_fn, batches[:10],
                              make_scheduler(first_opt) if make_scheduler else None, checkpoint_path=path)

            # Fresh objects: other initial weights, an optimizer without state, all replaced from the file.
            torch.manual_seed(123)
            fresh, _, _ = models.tiny("mlp")
            fresh_opt = make_optimizer(fresh.parameters())
            checkpoint = torch.load(path)
        fresh.load_state_dict(checkpoint["model"])  # strict: the keys are model.state_dict()'s
        fresh_opt.load_state_dict(checkpoint["optimizer"])
        fresh_sched = None
        if make_scheduler:
            fresh_sched = make_scheduler(fresh_opt)
            fresh_sched.load_state_dict(checkpoint["scheduler"])
        if float_step:  # the convention of torch < 1.12 (and of hand-written state): a Python number
            for state in fresh_opt.state.values():
                state["step"] = float(state["step"])
        resumed = self._run(fresh, fresh_opt, loss_fn, batches[10:], fresh_sched)

        self.assertEqual(first[0], straight[0][:10])
        self.assertEqual(resumed[0], straight[0][10:], "losses of steps 11-20")
        self.assertEqual(list(resumed[1]), list(straight_model.state_dict()))
        for key, value in straight[1].items():
            self.assertTrue(torch.equal(resumed[1][key], value), f"final {key}")
        expected_state = straight[2]
        if float_step:
            for entry in expected_state["state"].values():
                entry["step"] = float(entry["step"])
        self._assert_state_equal(resumed[2], expected_state, exact=True)

        # The checkpoint is what PyTorch itself would have saved after the same 10 steps.
        reference = copy.deepcopy(model)
        ref_opt = make_optimizer(reference.parameters())
        ref_sched = make_scheduler(ref_opt) if make_scheduler else None
        ref_losses = eager_losses(reference, loss_fn, ref_opt, batches[:10], ref_sched)
        assert_losses_close(self, first[0], ref_losses, RTOL)
        self._assert_state_equal(checkpoint["optimizer"], ref_opt.state_dict(), exact=False)
        self.assertEqual(list(checkpoint["model"]), list(reference.state_dict()))
        for key, value in reference.state_dict().items():
            self.assertLessEqual(relative_error(checkpoint["model"][key], value), RTOL * 10, key)
        return checkpoint

    def test_sgd_momentum_with_a_schedule_resumes_bit_for_bit(self):
        checkpoint = self._resume_is_bit_for_bit(_sgd, _step_lr)
        # The schedule halved the rate at steps 4 and 8: the checkpoint holds the current one.
        self.assertAlmostEqual(checkpoint["optimizer"]["param_groups"][0]["lr"], 0.025)
        self.assertEqual(sorted(checkpoint["optimizer"]["state"][0]), ["momentum_buffer"])

    def test_adam_resumes_bit_for_bit(self):
        checkpoint = self._resume_is_bit_for_bit(_adam)
        step = checkpoint["optimizer"]["state"][0]["step"]
        self.assertIsInstance(step, torch.Tensor)  # torch >= 1.12 keeps Adam's step as a tensor
        self.assertEqual(float(step), 10.0)

    def test_adamw_amsgrad_with_float_steps_resumes_bit_for_bit(self):
        checkpoint = self._resume_is_bit_for_bit(_adamw_amsgrad, float_step=True)
        self.assertIn("max_exp_avg_sq", checkpoint["optimizer"]["state"][0])

    def test_load_into_writes_the_weights_and_the_optimizer_state_back(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        g = torch.Generator().manual_seed(2)
        batches = [make_batch(g) for _ in range(3)]
        optimizer = _adam(model.parameters())
        before = copy.deepcopy(model.state_dict())
        with tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint) as job:
            untouched = job.optimizer_state_dict()  # before any step: the optimizer's own (empty) state
            self.assertEqual(untouched["state"], {})
            for x, y in batches:
                job.step(x, y)
            # Training happens in the daemon: the local objects are untouched until load_into.
            self.assertEqual(len(optimizer.state), 0)
            self.assertTrue(torch.equal(model.state_dict()["0.weight"], before["0.weight"]))
            job.load_into(model, optimizer)
            checkpoint = job.checkpoint()
        self._assert_state_equal(optimizer.state_dict(), checkpoint["optimizer"], exact=True)
        self.assertEqual(float(optimizer.state[model[0].weight]["step"]), 3.0)
        for key, value in checkpoint["model"].items():
            self.assertTrue(torch.equal(model.state_dict()[key], value), key)

    def test_state_dict_has_the_keys_of_model_state_dict(self):
        class Tied(nn.Module):
            def __init__(self):
                super().__init__()
                self.inp = nn.Linear(4, 4)
                self.out = nn.Linear(4, 4)
                self.out.weight = self.inp.weight  # one tensor, two state_dict keys
                self.register_buffer("scale", torch.full((4,), 0.5), persistent=False)  # not in state_dict

            def forward(self, x):
                return self.out(torch.tanh(self.inp(x)) * self.scale)

        torch.manual_seed(0)
        model = Tied()
        x, y = torch.randn(3, 4), torch.randn(3, 4)
        with tandem.torch.train(model, F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1), (x, y),
                                endpoint=_daemon.endpoint) as job:
            job.step(x, y)
            trained = job.state_dict()
        self.assertEqual(list(trained), list(model.state_dict()))
        self.assertIs(trained["inp.weight"], trained["out.weight"])
        self.assertFalse(torch.equal(trained["inp.weight"], model.inp.weight.detach()))
        fresh = Tied()
        fresh.load_state_dict(trained)  # strict
        self.assertTrue(torch.equal(fresh.out.weight, trained["inp.weight"]))


def _accuracy(output, target):
    return (output.argmax(1) == target).float().mean()


class OutputsTest(unittest.TestCase):
    def test_model_output_and_a_metric_come_back_with_the_loss(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        g = torch.Generator().manual_seed(3)
        batches = [make_batch(g) for _ in range(6)]
        reference = copy.deepcopy(model)
        plain = copy.deepcopy(model)
        ref_opt = _sgd(reference.parameters())
        outputs = {"logits": tandem.torch.MODEL_OUTPUT, "acc": _accuracy}
        with tandem.torch.train(model, loss_fn, _sgd(model.parameters()), batches[0], endpoint=_daemon.endpoint,
                                outputs=outputs) as job:
            self.assertEqual(job.output_names, ["logits", "acc"])
            for i, (x, y) in enumerate(batches):
                ref_opt.zero_grad()
                logits = reference(x)  # this step's forward, before its update
                expected = loss_fn(logits, y)
                expected.backward()
                ref_opt.step()
                if i == 0:
                    result = job.step(x, y)  # no fetch: the loss alone, as always
                    self.assertIsInstance(result, float)
                    loss = result
                elif i == 1:
                    result = job.step(x, y, fetch="acc")
                    self.assertEqual(list(result.outputs), ["acc"])
                    loss = result.loss
                else:
                    result = job.step_async(x, y, fetch=True).result()
                    self.assertIsInstance(result, tandem.torch.StepResult)
                    loss, out = result
                    self.assertEqual(list(out), ["logits", "acc"])
                    self.assertLessEqual(relative_error(out["logits"], logits.detach()), RTOL, f"step {i} logits")
                    self.assertEqual(out["acc"].shape, ())
                    self.assertEqual(out["acc"].dtype, torch.float32)
                    self.assertEqual(out["acc"].item(), _accuracy(out["logits"], y).item(), f"step {i} acc")
                self.assertLessEqual(abs(loss - expected.item()), RTOL * abs(expected.item()), f"step {i} loss")
            with self.assertRaises(tandem.TandemError):
                job.step(*batches[0], fetch="accuracy")
            with_outputs = job.state_dict()
        # Declaring outputs changes nothing of the training: the same steps without them give the same bits.
        with tandem.torch.train(plain, loss_fn, _sgd(plain.parameters()), batches[0],
                                endpoint=_daemon.endpoint) as job:
            for x, y in batches:
                job.step(x, y)
            for key, value in job.state_dict().items():
                self.assertTrue(torch.equal(with_outputs[key], value), key)

    def test_one_function_returning_nested_outputs(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        x, y = make_batch(torch.Generator().manual_seed(4))

        def outputs(output, target):
            return {"pred": output.argmax(1), "pair": (output.softmax(1), (output.argmax(1) == target).sum())}

        with torch.no_grad():
            expected = model(x)
        with tandem.torch.train(model, loss_fn, _sgd(model.parameters()), (x, y), endpoint=_daemon.endpoint,
                                outputs=outputs) as job:
            loss, out = job.step(x, y, fetch=True)
        self.assertEqual(out["pred"].dtype, torch.int64)
        self.assertTrue(torch.equal(out["pred"], expected.argmax(1)))
        probabilities, correct = out["pair"]
        self.assertIsInstance(out["pair"], tuple)
        self.assertLessEqual(relative_error(probabilities, expected.softmax(1)), RTOL)
        self.assertEqual(int(correct), int((expected.argmax(1) == y).sum()))

    def test_bad_outputs_are_refused_at_capture(self):
        model, loss_fn, make_batch = models.tiny("mlp")
        batch = make_batch(torch.Generator().manual_seed(4))
        for bad in ({"acc": 3}, lambda output, y: output, {"n": lambda output, y: 1.0}):
            with self.assertRaises(tandem.CaptureError):
                tandem.torch.capture_training_job(model, loss_fn, _sgd(model.parameters()), batch, outputs=bad)


class MaskedPool(nn.Module):
    """A sequence classifier with an attention mask: model(x, attention_mask=m)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x, attention_mask=None):
        h = torch.relu(self.proj(x))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
            pooled = h.sum(1) / attention_mask.sum(1, keepdim=True)
        else:
            pooled = h.mean(1)
        return self.head(pooled)


def _weighted_loss(output, target, weight):
    return (F.cross_entropy(output, target, reduction="none") * weight).mean()


def _masked_batch(g):
    x = torch.randn(4, 5, 6, generator=g)
    mask = (torch.rand(4, 5, generator=g) > 0.4).float()
    mask[:, 0] = 1.0  # every row sees at least one position
    return x, mask, torch.randint(0, 3, (4,), generator=g), torch.rand(4, generator=g)


class KeywordInputsTest(unittest.TestCase):
    def test_keyword_input_and_two_targets_train_as_in_pytorch(self):
        torch.manual_seed(0)
        model = MaskedPool()
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(5)
        batches = [_masked_batch(g) for _ in range(5)]
        Batch = tandem.torch.Batch
        x, m, y, w = batches[0]
        example = Batch(inputs=x, kwargs={"attention_mask": m}, targets=(y, w))
        ref_opt = _adam(reference.parameters())
        with tandem.torch.train(model, _weighted_loss, _adam(model.parameters()), example,
                                endpoint=_daemon.endpoint, outputs={"logits": tandem.torch.MODEL_OUTPUT}) as job:
            self.assertEqual(job._capture.batch_names, ["batch/0", "batch/kwargs/attention_mask", "batch/1",
                                                        "batch/2"])
            losses, expected = [], []
            for x, m, y, w in batches:
                ref_opt.zero_grad()
                logits = reference(x, attention_mask=m)
                loss = _weighted_loss(logits, y, w)
                loss.backward()
                ref_opt.step()
                expected.append(loss.item())
                result = job.step(Batch(inputs=(x,), kwargs={"attention_mask": m}, targets=(y, w)), fetch=True)
                losses.append(result.loss)
                self.assertLessEqual(relative_error(result.outputs["logits"], logits.detach()), RTOL)
            assert_losses_close(self, losses, expected, RTOL)
            for key, value in reference.state_dict().items():
                self.assertLessEqual(relative_error(job.read(key), value), RTOL * 10, key)

            x, m, y, w = batches[0]
            with self.assertRaisesRegex(tandem.BatchError, "keyword inputs"):
                job.step(x, y, w)  # the mask cannot go positionally
            with self.assertRaisesRegex(tandem.BatchError, "attention_mask"):
                job.step(Batch(inputs=x, targets=(y, w)))  # missing
            with self.assertRaisesRegex(tandem.BatchError, r"keyword input 'attention_mask' is torch.float32\[4, 4\]"):
                job.step(Batch(inputs=x, kwargs={"attention_mask": m[:, :4]}, targets=(y, w)))
            with self.assertRaisesRegex(tandem.BatchError, "target"):
                job.step(Batch(inputs=x, kwargs={"attention_mask": m}, targets=y))
            with self.assertRaisesRegex(tandem.BatchError, r"target 1 is torch.float64"):
                job.step(Batch(inputs=x, kwargs={"attention_mask": m}, targets=(y, w.double())))
            with self.assertRaises(tandem.BatchError):
                Batch(inputs=x, kwargs={"attention_mask": 1.0})
            self.assertGreater(job.step(Batch(inputs=x, kwargs={"attention_mask": m}, targets=(y, w))), 0)

    def test_accumulation_splits_keyword_inputs_and_targets_and_concatenates_the_outputs(self):
        # accumulate=2 over a Batch with a keyword input and two targets: each micro-batch takes the same rows of
        # every tensor, and the logits that come back are the two micro-batches' together, the whole batch's.
        torch.manual_seed(0)
        model = MaskedPool()
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(6)
        batches = [_masked_batch(g) for _ in range(3)]
        Batch = tandem.torch.Batch
        x, m, y, w = batches[0]
        ref_opt = _adam(reference.parameters())
        with tandem.torch.train(model, _weighted_loss, _adam(model.parameters()),
                                Batch(inputs=x, kwargs={"attention_mask": m}, targets=(y, w)),
                                endpoint=_daemon.endpoint, outputs={"logits": tandem.torch.MODEL_OUTPUT},
                                accumulate=2) as job:
            for x, m, y, w in batches:
                ref_opt.zero_grad()
                expected_loss, parts = 0.0, []
                for rows in (slice(0, 2), slice(2, 4)):
                    logits = reference(x[rows], attention_mask=m[rows])
                    loss = _weighted_loss(logits, y[rows], w[rows]) / 2
                    loss.backward()
                    expected_loss += loss.item()
                    parts.append(logits.detach())
                ref_opt.step()
                result = job.step(Batch(inputs=(x,), kwargs={"attention_mask": m}, targets=(y, w)), fetch=True)
                self.assertLessEqual(abs(result.loss - expected_loss), RTOL * abs(expected_loss))
                self.assertEqual(list(result.outputs["logits"].shape), [4, 3])
                self.assertLessEqual(relative_error(result.outputs["logits"], torch.cat(parts)), RTOL)
            for key, value in reference.state_dict().items():
                self.assertLessEqual(relative_error(job.read(key), value), RTOL * 10, key)

    def test_several_targets_go_positionally_without_keyword_inputs(self):
        torch.manual_seed(0)
        model, _, _ = models.tiny("mlp")
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(6)
        batches = [(torch.randn(6, 12, generator=g), torch.randint(0, 5, (6,), generator=g),
                    torch.rand(6, generator=g)) for _ in range(4)]
        x, y, w = batches[0]
        example = tandem.torch.Batch(inputs=x, targets=(y, w))
        ref_opt = _sgd(reference.parameters())
        with tandem.torch.train(model, _weighted_loss, _sgd(model.parameters()), example,
                                endpoint=_daemon.endpoint) as job:
            losses = [job.step(x, y, w) for x, y, w in batches]  # inputs, then targets, as in the example
            with self.assertRaises(tandem.BatchError):
                job.step(x, y)
        expected = []
        for x, y, w in batches:
            ref_opt.zero_grad()
            loss = _weighted_loss(reference(x), y, w)
            loss.backward()
            ref_opt.step()
            expected.append(loss.item())
        assert_losses_close(self, losses, expected, RTOL)


if __name__ == "__main__":
    unittest.main()
