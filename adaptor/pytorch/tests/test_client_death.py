"""Death detection with the Python client: a training process killed (SIGKILL) or stopped (SIGSTOP) between two
steps, with nothing in flight whose reply could bounce, loses its job and memory at once (killed) or within about
3 s (stopped: the heartbeat timeout) (tests/client_death_test.cc does the same with the C++ client)."""

import os
import signal
import subprocess
import sys
import time
import unittest

import common  # noqa: F401  (paths)
from common import tandem
from daemon import Daemon

# The victim: trains a small MLP on the daemon, says "ready" after three steps, then spends a minute on the host
# (a slow data loader).
VICTIM = """
import sys, time
sys.path[:0] = {paths!r}
import torch, tandem, tandem.torch
model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
job = tandem.torch.train(model, torch.nn.functional.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1),
                         (x, y), endpoint={endpoint!r}, name="python-victim")
for _ in range(3):
    job.step(x, y)
print("ready", flush=True)
time.sleep(60)
"""


def _jobs_and_persistent(client):
    stats = client.stats()
    devices = stats.get("devices", [])
    persistent = int(devices[0].get("persistent_bytes", 0)) if devices else 0
    return int(stats.get("jobs", 0)), persistent


class ClientDeathTest(unittest.TestCase):
    def setUp(self):
        # A session timeout far beyond what is measured: only death detection can free the job in time.
        self.daemon = Daemon(session_timeout=60).start()
        self.observer = tandem.Client(endpoint=self.daemon.endpoint, name="observer")

    def tearDown(self):
        self.observer.close()
        self.daemon.stop()

    def start_victim(self):
        paths = [p for p in sys.path if p]
        code = VICTIM.format(paths=paths, endpoint=self.daemon.endpoint)
        victim = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
        line = victim.stdout.readline().decode()
        if "ready" not in line:
            victim.kill()
            self.fail(f"the victim did not train: {line} {victim.stderr.read().decode()}")
        jobs, persistent = _jobs_and_persistent(self.observer)
        self.assertEqual(jobs, 1)
        self.assertGreater(persistent, 0)
        return victim

    def seconds_until_freed(self, limit=10.0):
        start = time.monotonic()
        while time.monotonic() - start < limit:
            if _jobs_and_persistent(self.observer) == (0, 0):
                return time.monotonic() - start
            time.sleep(0.01)
        return None

    def test_killed_between_steps(self):
        victim = self.start_victim()
        victim.kill()
        victim.wait()
        seconds = self.seconds_until_freed()
        self.assertIsNotNone(seconds, self.daemon.log())
        self.assertLess(seconds, 1.0, self.daemon.log())
        print(f"python client killed between steps: freed after {seconds:.3f} s", file=sys.stderr)

    def test_stopped_between_steps(self):
        victim = self.start_victim()
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            seconds = self.seconds_until_freed()
        finally:
            victim.kill()
            os.kill(victim.pid, signal.SIGCONT)
            victim.wait()
        self.assertIsNotNone(seconds, self.daemon.log())
        # The heartbeat interval plus its timeout is 3.2 s; the rest is room for a loaded CI machine.
        self.assertLess(seconds, 4.5, self.daemon.log())
        print(f"python client stopped between steps: freed after {seconds:.3f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
