"""Bad input ends in a TandemError subclass whose message says what happened and what to do."""

import copy
import os
import tempfile
import time
import unittest

import common  # noqa: F401  (paths)
from common import models, tandem, torch
from daemon import Daemon

import torch.nn as nn
import torch.nn.functional as F


class PairwiseSpread(nn.Module):
    """Uses F.pdist (aten._pdist_forward), a Core ATen op the daemon does not implement (docs/ops.md)."""

    def forward(self, x):
        return x + F.pdist(x).mean()


class WithUnsupportedOp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.odd = PairwiseSpread()

    def forward(self, x):
        return self.odd(self.fc(x))


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:  # the branch taken depends on the values
            return y * 2
        return y


def _mlp_job(endpoint, **kwargs):
    torch.manual_seed(0)
    model, loss_fn, make_batch = models.tiny("mlp")
    x, y = make_batch(torch.Generator().manual_seed(1))
    job = tandem.torch.train(model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), (x, y),
                             endpoint=endpoint, **kwargs)
    return job, x, y


class ErrorsWithDaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon().start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_unsupported_op_is_named_with_its_module(self):
        model = WithUnsupportedOp()
        x, y = torch.randn(3, 6), torch.tensor([0, 1, 2])
        with self.assertRaises(tandem.UnsupportedOpError) as ctx:
            tandem.torch.train(model, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), (x, y),
                               endpoint=self.daemon.endpoint)
        e = ctx.exception
        self.assertEqual(e.op, "_pdist_forward")
        self.assertIn("model.odd", e.label)
        self.assertIn("PairwiseSpread", e.label)
        self.assertIn("_pdist_forward", str(e))
        self.assertIn("model.odd", str(e))
        self.assertEqual(e.code, tandem.errors.INVALID_ARGUMENT)
        self.assertIsInstance(e, tandem.RegistrationError)

    def test_batch_of_wrong_shape_or_dtype(self):
        job, x, y = _mlp_job(self.daemon.endpoint)
        with job:
            with self.assertRaises(tandem.BatchError) as ctx:
                job.step(x[:-1], y[:-1])
            self.assertIn(str(list(x.shape)), str(ctx.exception))
            self.assertIn("drop_last", str(ctx.exception))
            with self.assertRaises(tandem.BatchError) as ctx:
                job.step(x.double(), y)
            self.assertIn("torch.float64", str(ctx.exception))
            with self.assertRaises(tandem.BatchError):
                job.step(x)
            # A refused batch leaves the job usable.
            self.assertGreater(job.step(x, y), 0)

    def test_bad_class_label_fails_the_iteration(self):
        job, x, y = _mlp_job(self.daemon.endpoint)
        with job:
            before = job.read("0.weight")
            with self.assertRaises(tandem.IterationError) as ctx:
                job.step(x, torch.full_like(y, 99))
            self.assertIn("99", str(ctx.exception))
            # No update was applied.
            self.assertTrue(torch.equal(job.read("0.weight"), before))

    def test_a_failed_step_does_not_count_as_an_optimizer_step(self):
        # Adam's bias corrections depend on the step count: after a failed step, the next steps must be those
        # of a run that never had it.
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny("mlp")
        reference = copy.deepcopy(model)
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(3)]
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=self.daemon.endpoint)
        with job:
            losses = [job.step(*batches[0])]
            with self.assertRaises(tandem.IterationError):
                job.step(batches[1][0], torch.full_like(batches[1][1], 99))
            losses += [job.step(*b) for b in batches[1:]]
        ref_optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
        want = []
        for x, y in batches:
            ref_optimizer.zero_grad()
            loss = loss_fn(reference(x), y)
            loss.backward()
            ref_optimizer.step()
            want.append(loss.item())
        for a, e in zip(losses, want):
            self.assertLessEqual(abs(a - e), 1e-4 * abs(e), (losses, want))

    def test_data_dependent_control_flow_is_a_capture_error(self):
        model = DataDependent()
        x, y = torch.randn(3, 6), torch.tensor([0, 1, 2])
        with self.assertRaises(tandem.CaptureError) as ctx:
            tandem.torch.train(model, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1), (x, y),
                               endpoint=self.daemon.endpoint)
        self.assertIn("depends on the data", str(ctx.exception))
        self.assertIn("torch.where", str(ctx.exception))

    def test_unsupported_optimizer_is_a_capture_error(self):
        model, loss_fn, make_batch = models.tiny("mlp")
        with self.assertRaises(tandem.CaptureError) as ctx:
            tandem.torch.train(model, loss_fn, torch.optim.Adadelta(model.parameters()),
                               make_batch(torch.Generator().manual_seed(1)), endpoint=self.daemon.endpoint)
        self.assertIn("Adadelta", str(ctx.exception))
        self.assertIn("SGD, Adam", str(ctx.exception))

    def test_memory_quota_from_the_environment(self):
        # $TANDEM_MEMORY_QUOTA_MIB (cluster/slurm/'s TaskProlog sets it per job) is the job's memory quota:
        # libtandem applies it at registration.
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 4))  # 1 MiB of weights
        x, y = torch.randn(8, 256), torch.tensor([0, 1, 2, 3] * 2)
        saved = os.environ.get("TANDEM_MEMORY_QUOTA_MIB")

        def train():
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            return tandem.torch.train(model, F.cross_entropy, optimizer, (x, y), endpoint=self.daemon.endpoint)

        try:
            os.environ["TANDEM_MEMORY_QUOTA_MIB"] = "1"
            with self.assertRaises(tandem.RegistrationError) as ctx:
                train()
            self.assertEqual(ctx.exception.code, tandem.errors.RESOURCE_EXHAUSTED)
            self.assertIn("its own quota of 1.0 MiB", str(ctx.exception))
            os.environ["TANDEM_MEMORY_QUOTA_MIB"] = "64"
            with train() as job:
                self.assertGreater(job.step(x, y), 0)
        finally:
            if saved is None:
                os.environ.pop("TANDEM_MEMORY_QUOTA_MIB", None)
            else:
                os.environ["TANDEM_MEMORY_QUOTA_MIB"] = saved


class ErrorsWithoutDaemonTest(unittest.TestCase):
    def test_daemon_not_running(self):
        with tempfile.TemporaryDirectory() as d:
            endpoint = f"ipc://{d}/nobody.sock"
            start = time.monotonic()
            with self.assertRaises(tandem.DaemonUnavailableError) as ctx:
                _mlp_job(endpoint)
            self.assertLess(time.monotonic() - start, 10)
            self.assertIn("tandemd", str(ctx.exception))
            self.assertIn("Start the daemon", str(ctx.exception))
            self.assertIsInstance(ctx.exception, ConnectionError)

    def test_daemon_goes_away_mid_training(self):
        daemon = Daemon(session_timeout=1).start()
        try:
            job, x, y = _mlp_job(daemon.endpoint)
            self.assertGreater(job.step(x, y), 0)
            daemon.kill()
            start = time.monotonic()
            with self.assertRaises(tandem.DaemonUnavailableError) as ctx:
                for _ in range(3):
                    job.step(x, y)
            self.assertLess(time.monotonic() - start, 30)
            self.assertIn("stopped answering", str(ctx.exception))
            job.close()  # closing after the daemon died does not raise
        finally:
            daemon.stop()

    def test_missing_library(self):
        import subprocess
        import sys
        env = dict(os.environ, TANDEM_LIB="/nonexistent/libtandem.so")
        code = ("import tandem\n"
                "try:\n    tandem.Client()\nexcept tandem.LibraryNotFoundError as e:\n    print('LNF', e)\n")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             cwd=os.path.join(common.SOURCE_ROOT, "client", "python"))
        self.assertIn("LNF", out.stdout, out.stderr)
        self.assertIn("TANDEM_LIB", out.stdout)


if __name__ == "__main__":
    unittest.main()
