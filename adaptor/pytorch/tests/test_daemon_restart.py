"""A training job outlives its daemon: with a state_dir, tandemd checkpoints the job, and after a restart (SIGTERM,
or kill -9 between checkpoints) train(..., resume=job.resume_token) continues it. The resumed steps run the same
kernels on the same values as an uninterrupted job's (the checkpoint holds the daemon's own bits; Adam's step
count continues from job.resumed_iterations), so their losses and the final weights must be equal, not close."""

import shutil
import tempfile
import time
import unittest

import common  # noqa: F401  (paths)
from common import tandem, torch
from daemon import Daemon

import torch.nn as nn
import torch.nn.functional as F

STEPS = 8


def _model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 4))


def _batches():
    g = torch.Generator().manual_seed(4)
    return [(torch.randn(16, 12, generator=g), torch.randint(0, 4, (16,), generator=g)) for _ in range(STEPS)]


def _train(endpoint, model, batches, resume=None):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return tandem.torch.train(model, F.cross_entropy, optimizer, batches[0], endpoint=endpoint, name="restartable",
                              resume=resume)


class DaemonRestartTest(unittest.TestCase):
    def setUp(self):
        self.state_dir = tempfile.mkdtemp(prefix="tandem-state-")
        batches = _batches()
        with Daemon() as plain:
            job = _train(plain.endpoint, _model(), batches)
            with job:
                self.want = [job.step(*b) for b in batches]
                self.want_weights = job.state_dict()
            self.assertIsNone(job.resume_token, "no state_dir: no checkpoints")

    def tearDown(self):
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def _resume_and_finish(self, token, flags, at_most):
        batches = _batches()
        with Daemon(*flags) as daemon:
            job = _train(daemon.endpoint, _model(), batches, resume=token)
            with job:
                k = job.resumed_iterations
                self.assertGreaterEqual(k, 1)
                self.assertLessEqual(k, at_most)
                losses = [job.step(*b) for b in batches[k:]]
                weights = job.state_dict()
        self.assertEqual(losses, self.want[k:])
        for name, value in self.want_weights.items():
            self.assertTrue(torch.equal(weights[name], value), name)
        return k

    def test_sigterm_then_resume(self):
        flags = (f"--state_dir={self.state_dir}", "--checkpoint_interval=3600")
        batches = _batches()
        daemon = Daemon(*flags).start()
        try:
            job = _train(daemon.endpoint, _model(), batches)
            token = job.resume_token
            self.assertEqual(len(token), 16)
            self.assertEqual(job.resumed_iterations, 0)
            self.assertEqual([job.step(*b) for b in batches[:5]], self.want[:5])
        finally:
            daemon.stop()  # SIGTERM: a final checkpoint after the 5 steps
        self.assertEqual(self._resume_and_finish(token.hex(), flags, 5), 5)

    def test_kill_nine_then_resume(self):
        flags = (f"--state_dir={self.state_dir}", "--checkpoint_interval=0")
        batches = _batches()
        daemon = Daemon(*flags).start()
        try:
            job = _train(daemon.endpoint, _model(), batches)
            token = job.resume_token
            for b in batches[:6]:
                job.step(*b)
            time.sleep(0.3)  # a checkpoint written (after every iteration, one at a time)
            daemon.kill()
        finally:
            daemon.stop()
        self._resume_and_finish(token, flags, 6)


if __name__ == "__main__":
    unittest.main()
