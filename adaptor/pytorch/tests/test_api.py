"""The training and serving API beyond plain equivalence: pipelined steps, learning-rate schedules, the
optimizer variants (nesterov, weight decay, AdamW), state read-back, inference, closing."""

import copy
import unittest

import common  # noqa: F401  (paths)
from common import EquivalenceMixin, ModuleDaemon, models, relative_error, tandem, torch

_daemon = ModuleDaemon()
setUpModule, tearDownModule = _daemon.start, _daemon.stop


class TrainingApiTest(EquivalenceMixin, unittest.TestCase):
    def test_pipelined_steps_give_the_sequential_losses(self):
        opt = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)  # noqa: E731
        self.run_both(_daemon.endpoint, "mlp", opt, steps=8, pipelined=4)

    def test_learning_rate_schedule_is_followed(self):
        opt = lambda p: torch.optim.SGD(p, lr=0.2, momentum=0.9)  # noqa: E731
        sched = lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)  # noqa: E731
        losses, _ = self.run_both(_daemon.endpoint, "mlp", opt, steps=6, scheduler=sched)
        self.assertEqual(len(losses), 6)

    def test_sgd_nesterov_weight_decay_dampening(self):
        self.run_both(_daemon.endpoint, "mlp",
                      lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01), steps=6)
        self.run_both(_daemon.endpoint, "mlp",
                      lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3), steps=6)
        self.run_both(_daemon.endpoint, "mlp", lambda p: torch.optim.SGD(p, lr=0.05), steps=6)

    def test_adam_weight_decay_and_adamw(self):
        self.run_both(_daemon.endpoint, "mlp", lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.01), steps=6)
        self.run_both(_daemon.endpoint, "mlp", lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), steps=6)

    def test_param_groups_with_their_own_learning_rates(self):
        def opt(params):
            params = list(params)
            return torch.optim.SGD([{"params": params[:4], "lr": 0.2}, {"params": params[4:]}], lr=0.05,
                                   momentum=0.9)
        self.run_both(_daemon.endpoint, "mlp", opt, steps=5)

    def test_optimizer_state_is_continued(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        g = torch.Generator().manual_seed(2)
        batches = [make_batch(g) for _ in range(6)]
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for x, y in batches[:3]:  # three steps in PyTorch first: state and step count exist
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        reference = copy.deepcopy(model)
        ref_optimizer = torch.optim.Adam(reference.parameters(), lr=1e-2)
        ref_optimizer.load_state_dict(optimizer.state_dict())
        with tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint) as job:
            losses = [job.step(x, y) for x, y in batches[3:]]
            trained = job.state_dict()
        for (x, y), loss in zip(batches[3:], losses):
            ref_optimizer.zero_grad()
            expected = loss_fn(reference(x), y)
            expected.backward()
            ref_optimizer.step()
            self.assertAlmostEqual(loss, expected.item(), delta=1e-4 * abs(expected.item()))
        for key, value in reference.state_dict().items():
            self.assertLessEqual(relative_error(trained[key], value), 1e-4, key)

    def test_state_dict_and_load_into(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        before = copy.deepcopy(model.state_dict())
        x, y = make_batch(torch.Generator().manual_seed(3))
        job = tandem.torch.train(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.5), (x, y),
                                 endpoint=_daemon.endpoint)
        job.step(x, y)
        # Training happens in the daemon: the local model is untouched until load_into.
        for key, value in model.state_dict().items():
            self.assertTrue(torch.equal(value, before[key]), key)
        job.load_into(model)
        self.assertFalse(torch.equal(model.state_dict()["0.weight"], before["0.weight"]))
        self.assertTrue(torch.equal(model.state_dict()["0.weight"], job.read("0.weight")))
        job.close()
        job.close()  # twice is fine
        with self.assertRaises(tandem.JobClosedError):
            job.step(x, y)

    def test_registration_reports_memory_and_device(self):
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        batch = make_batch(torch.Generator().manual_seed(3))
        with tandem.torch.train(model, loss_fn, torch.optim.Adam(model.parameters()), batch,
                                endpoint=_daemon.endpoint, name="mlp-hints", priority=2,
                                expected_iterations=10) as job:
            reg = job.registration
            params = sum(p.numel() * 4 for p in model.parameters())
            # Parameters plus two Adam moments per parameter, at least.
            self.assertGreaterEqual(int(reg["persistent_bytes"]), 3 * params)
            self.assertEqual(reg["device"].split(":")[0], "cpu")
            self.assertEqual(job.graph["fetches"][0], job._loss_name)


class ServeTest(unittest.TestCase):
    def test_served_model_matches_eval_forward(self):
        torch.manual_seed(0)
        model, _, make_batch = models.tiny("resnet50")
        x, _ = make_batch(torch.Generator().manual_seed(4))
        # Running statistics that are not the initial ones, so that eval mode matters.
        model.train()
        with torch.no_grad():
            model(x)
        model.eval()
        try:
            served = tandem.torch.serve(model, x, endpoint=_daemon.endpoint)
        except tandem.UnsupportedOpError as e:
            self.fail(common.missing_op_message(e))
        with served:
            out = served(x)
            with torch.no_grad():
                expected = model(x)
            self.assertEqual(tuple(out.shape), tuple(expected.shape))
            self.assertLessEqual(relative_error(out, expected), 1e-4)
            with self.assertRaises(tandem.BatchError):
                served(x[:2])

    def test_one_capture_serves_models_with_their_own_weights(self):
        torch.manual_seed(0)
        first, _, make_batch = models.tiny("resnet50")
        x, _ = make_batch(torch.Generator().manual_seed(5))
        others = []
        for seed in (1, 2):
            torch.manual_seed(seed)
            model, _, _ = models.tiny("resnet50")
            model.train()
            with torch.no_grad():
                model(x)  # running statistics of its own
            others.append(model.eval())
        first.eval()
        capture, lowered = tandem.torch.capture_serving(first, x)
        served = [tandem.torch.serve_lowered(capture, lowered, model=m, endpoint=_daemon.endpoint)
                  for m in [first] + others]
        try:
            outputs = [s(x) for s in served]
            for model, out in zip([first] + others, outputs):
                with torch.no_grad():
                    expected = model(x)
                self.assertLessEqual(relative_error(out, expected), 1e-4)
            # Each job holds its own weights: the outputs differ where the models do.
            self.assertGreater(relative_error(outputs[1], outputs[2]), 1e-2)
            self.assertEqual(len({s.job_id for s in served}), 3)
        finally:
            for s in served:
                s.close()

    def test_serve_lowered_refuses_another_architecture(self):
        torch.manual_seed(0)
        model, _, make_batch = models.tiny("mlp")
        x, _ = make_batch(torch.Generator().manual_seed(6))
        capture, lowered = tandem.torch.capture_serving(model, x)
        wider = models.mlp(inputs=12, hidden=24, classes=5, batch=6)[0]
        with self.assertRaises(tandem.CaptureError):
            tandem.torch.serve_lowered(capture, lowered, model=wider, endpoint=_daemon.endpoint)
        deeper = torch.nn.Sequential(*model, torch.nn.Linear(5, 5))
        with self.assertRaises(tandem.CaptureError):
            tandem.torch.serve_lowered(capture, lowered, model=deeper, endpoint=_daemon.endpoint)


if __name__ == "__main__":
    unittest.main()
