"""Tests of the hosting benchmark's server mode on the CPU: the memory cap (hosting_server.memory_cap), the
serving threads of model_server.ModelServer with stand-in models (one FIFO queue, one request per model at a
time, every request accounted for), and hosting_server.ServerHost driving a real model_server.py process with
the --small models (no GPU, no daemon).

    /usr/bin/python3 -m unittest discover -s bench/inference -p '*_test.py'
"""

import os
import sys
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosting_server  # noqa: E402
import inference_models  # noqa: E402
import model_server  # noqa: E402
import worker  # noqa: E402


class MemoryCapTest(unittest.TestCase):
    def test_the_tighter_kind_at_the_loaded_models_mean(self):
        memory = {"gpu": {"models_mib": 400.0, "free_mib": 10240.0, "total_mib": 81920.0},
                  "host": {"models_mib": 40.0, "free_mib": 100000.0, "total_mib": 200000.0}}
        fits, text = hosting_server.memory_cap(4, memory, margins={"gpu": 2048, "host": 4096})
        self.assertEqual(fits, 4 + (10240 - 2048) // 100)
        self.assertTrue(text.startswith("gpu memory: 100.0 MiB per model"), text)

    def test_nothing_measured_yet_and_no_room_left(self):
        self.assertIsNone(hosting_server.memory_cap(0, None))
        self.assertIsNone(hosting_server.memory_cap(4, {"host": {"models_mib": 0.0, "free_mib": 10.0}}))
        full = {"gpu": {"models_mib": 800.0, "free_mib": 1000.0}}
        self.assertEqual(hosting_server.memory_cap(8, full, margins={"gpu": 2048})[0], 8)


class StandIn:
    """A model whose request takes `seconds`; it records whether two of its requests ever overlapped."""

    max_rel_diff = None

    def __init__(self, seconds):
        self.seconds, self.fail = seconds, False
        self.running, self.overlapped, self.calls = 0, False, 0
        self.mu = threading.Lock()

    def call(self, stream):
        with self.mu:
            self.running += 1
            self.overlapped |= self.running > 1
            self.calls += 1
        time.sleep(self.seconds)
        with self.mu:
            self.running -= 1
        if self.fail:
            raise RuntimeError("stand-in failure")


class ModelServerTest(unittest.TestCase):
    def server(self, threads, models):
        made = dict(models)
        srv = model_server.ModelServer(threads, "cpu", small=True, make=lambda spec: made[spec["id"]])
        self.addCleanup(srv.stop)
        specs = [{"id": i, "kind": "mlp", "batch": 1} for i in sorted(models)]
        loaded = srv.load(specs)
        self.assertEqual(loaded["loaded"], len(models))
        self.assertNotIn("error", loaded)
        return srv

    @staticmethod
    def go(ids, rate, duration_s, grace_s=0.5):
        return {"cmd": "go", "ids": ids, "start_at": time.time() + 0.05, "warmup_s": 0.05, "duration_s": duration_s,
                "grace_s": grace_s, "rate": rate, "seed": 3, "slow_ms": 5.0}

    def test_every_request_is_served_once_one_at_a_time_per_model(self):
        models = {i: StandIn(0.002) for i in range(6)}
        srv = self.server(4, models)
        cmd = self.go(list(models), rate=150, duration_s=0.4)
        done = srv.serve(cmd)
        self.assertEqual(done["server"]["threads"], 4)
        self.assertEqual(done["server"]["execution"], "eager")
        for m in done["models"]:
            arrivals = worker.arrival_times(cmd, m["id"])
            timed = sum(1 for a in arrivals if a >= cmd["warmup_s"])
            self.assertEqual((m["requests"], m["completed"], m["dropped"], m["failures"]), (timed, timed, 0, 0))
            self.assertEqual(models[m["id"]].calls, len(arrivals) + worker.WARMUP_REQUESTS + worker.SOLO_REQUESTS)
            self.assertGreaterEqual(m["p99_ms"], 2.0)
            self.assertEqual(set(m["split_ms"]), {"requests", "behind", "queue", "run", "other"})
            self.assertEqual(m["split_ms"]["run"], 0.0)
        self.assertFalse(any(s.overlapped for s in models.values()))

    def test_requests_no_thread_started_in_time_are_unsent(self):
        slow = StandIn(0.05)
        srv = self.server(2, {0: slow})
        done = srv.serve(self.go([0], rate=200, duration_s=0.3, grace_s=0.0))
        m = done["models"][0]
        self.assertGreater(m["dropped"], 0)
        self.assertEqual(m["requests"], m["completed"] + m["dropped"])
        self.assertIsNone(m["p99_ms"])  # an unsent request ranks as infinitely slow
        self.assertFalse(slow.overlapped)

    def test_a_failing_model_fails_its_requests_only(self):
        failing = StandIn(0.001)
        srv = self.server(2, {0: failing, 1: StandIn(0.001)})
        failing.fail = True  # after its solo timing at load
        done = srv.serve(self.go([0, 1], rate=100, duration_s=0.3))
        bad, good = done["models"]
        self.assertGreater(bad["failures"], 0)
        self.assertIn("stand-in failure", bad["error"])
        self.assertEqual((good["failures"], good["dropped"]), (0, 0))


class ServerHostTest(unittest.TestCase):
    def host(self, specs):
        args = types.SimpleNamespace(device="cpu", small=True)
        host = hosting_server.ServerHost(args, specs, threads=2, log=lambda *a: None)
        self.addCleanup(host.close)
        return host

    def test_load_go_and_close(self):
        host = self.host(inference_models.slot_specs(8, ["mlp", "cnn"], [1, 2]))
        self.assertEqual(host.wait_ready(3, time.monotonic() + 120), "ready")
        self.assertEqual((host.loaded, host.cap_from_failure(), host.preparing()), (3, None, []))
        cmd = {"cmd": "go", "start_at": time.time() + 0.1, "warmup_s": 0.05, "duration_s": 0.3, "grace_s": 0.5,
               "rate": 50, "seed": 0}
        models = host.go(3, cmd)
        self.assertEqual([m["id"] for m in models], [0, 1, 2])
        self.assertTrue(all(m["p99_ms"] is not None and m["dropped"] == 0 for m in models))
        self.assertEqual(host.go_notes()["server"]["execution"], "eager")
        self.assertIn("host", host.memory)
        self.assertEqual(set(host.solo_ms), {0, 1, 2})
        self.assertEqual(len(host.ready_pids()), 1)
        proc = host.proc.proc
        host.close()
        self.assertIsNotNone(proc.poll())

    def test_a_model_that_cannot_be_loaded_caps_the_count_below_it(self):
        specs = inference_models.slot_specs(6, ["mlp"], [1])
        specs[4]["kind"] = "no-such-kind"
        host = self.host(specs)
        self.assertEqual(host.wait_ready(6, time.monotonic() + 120), "capped")
        self.assertEqual(host.cap_from_failure()[:2], (4, "worker_failed"))
        self.assertEqual(host.wait_ready(4, time.monotonic() + 60), "ready")


if __name__ == "__main__":
    unittest.main()
