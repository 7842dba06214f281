"""Tests of the hosting benchmark's worker pool (hosting_pool.py): slot grouping, failure reasons, and the
pool's start / wait / cap / stop logic with a stand-in worker script (no torch, no daemon).

    /usr/bin/python3 -m unittest discover -s bench/inference -p '*_test.py'
"""

import os
import sys
import tempfile
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosting_pool  # noqa: E402
import inference_models  # noqa: E402

# Speaks worker.py's protocol. FAKE_FAIL_FROM: a worker hosting a slot >= it reports an out-of-memory error
# instead of ready; FAKE_SLOW_FROM / FAKE_DELAY_S: a worker whose first slot is >= it takes that long to start;
# FAKE_CLIENT_LIMIT / FAKE_CLIENT_DIR: an MPS server of that many clients (a file per client in the folder,
# taken after a random pause so that the refused workers are scattered, given back when the worker ends),
# refusing the others as an H200's did.
FAKE_WORKER = r'''
import json, os, random, signal, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
ids = [s["id"] for s in json.loads(args["models"])]
client = None
if int(os.environ.get("FAKE_CLIENT_LIMIT", "0")):
    time.sleep(random.random() * 0.3)
    for k in range(int(os.environ["FAKE_CLIENT_LIMIT"])):
        path = os.path.join(os.environ["FAKE_CLIENT_DIR"], f"client{k}")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL))
            client = path
            break
        except FileExistsError:
            pass
    if client is None:
        print(json.dumps({"event": "error", "message": "torch.AcceleratorError: CUDA error: CUDA-capable "
                          "device(s) is/are busy or unavailable"}), flush=True)
        sys.exit(1)
def leave(*_):
    if client:
        os.remove(client)
    os._exit(0)
signal.signal(signal.SIGTERM, leave)
if min(ids) >= int(os.environ.get("FAKE_SLOW_FROM", "1000000")):
    time.sleep(float(os.environ.get("FAKE_DELAY_S", "0")))
if max(ids) >= int(os.environ.get("FAKE_FAIL_FROM", "1000000")):
    print(json.dumps({"event": "error", "message": "RuntimeError: CUDA out of memory (stand-in)"}), flush=True)
    sys.exit(1)
print(json.dumps({"event": "ready", "models": [{"id": i, "solo_ms": 1.0} for i in ids]}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "quit":
        break
    print(json.dumps({"event": "done", "models": [{"id": i, "p99_ms": 1.0} for i in cmd["ids"]]}), flush=True)
leave()
'''


class PoolHelpersTest(unittest.TestCase):
    def test_groups_hold_few_specs_and_every_slot_once(self):
        specs = inference_models.slot_specs(64, ["mlp", "cnn", "resnet18"], [1, 2, 4, 8, 16])[16:64]
        groups = hosting_pool.group_slots(specs, 16)
        self.assertEqual([len(g) for g in groups], [16, 16, 16])
        self.assertEqual(sorted(s["id"] for g in groups for s in g), list(range(16, 64)))
        distinct = lambda g: len({(s["kind"], s["batch"]) for s in g})  # noqa: E731
        in_order = [specs[i:i + 16] for i in range(0, 48, 16)]
        self.assertLess(sum(map(distinct, groups)), sum(map(distinct, in_order)))
        self.assertLessEqual(max(map(distinct, groups)), 7)

    def test_failure_reasons(self):
        reason = hosting_pool.failure_reason
        self.assertEqual(reason("RuntimeError: CUDA error: the hardware resources required to create MPS client "
                                "have been exhausted"), "mps_client_limit")
        self.assertEqual(reason("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"), "memory")
        self.assertEqual(reason("RegistrationError: RESOURCE_EXHAUSTED: no room"), "memory")
        self.assertEqual(reason("ValueError: bad spec"), "worker_failed")


class PoolProcessTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        script = os.path.join(self.dir.name, "fake_worker.py")
        with open(script, "w") as f:
            f.write(FAKE_WORKER)
        self.saved_worker = hosting_pool.WORKER
        hosting_pool.WORKER = script
        self.specs = inference_models.slot_specs(32, ["mlp", "cnn"], [1, 2, 4])
        self.pools = []

    def tearDown(self):
        for pool in self.pools:
            pool.close()
        hosting_pool.WORKER = self.saved_worker
        self.dir.cleanup()

    def pool(self, per_proc=1, mps=False, **env):
        pool = hosting_pool.Pool("torch", types.SimpleNamespace(device="cpu", small=False), self.specs,
                                 env=dict(os.environ, **env), per_proc=per_proc, log=lambda *a: None, mps=mps)
        self.pools.append(pool)
        return pool

    @staticmethod
    def go_cmd():
        return {"cmd": "go", "start_at": time.time(), "warmup_s": 0, "duration_s": 0, "grace_s": 0}

    def test_spawn_wait_go_close(self):
        pool = self.pool()
        pool.spawn(4)
        pool.spawn(8)
        self.assertEqual((len(pool.workers), pool.covered()), (8, 8))
        self.assertEqual(pool.wait_ready(8, time.monotonic() + 60), "ready")
        self.assertEqual(pool.ready_count(), 8)
        self.assertEqual([m["id"] for m in pool.go(5, self.go_cmd())], [0, 1, 2, 3, 4])
        procs = [w.proc for w in pool.workers]
        pool.close()
        self.assertTrue(all(p.poll() is not None for p in procs))

    def test_grouped_workers_host_their_slots(self):
        pool = self.pool(per_proc=4)
        self.assertEqual(pool.wait_ready(16, time.monotonic() + 60), "ready")
        self.assertEqual(len(pool.workers), 4)
        for w in pool.workers:
            self.assertLessEqual(len({(s["kind"], s["batch"]) for s in w.specs}), 3)
        self.assertEqual([m["id"] for m in pool.go(11, self.go_cmd())], list(range(11)))

    def test_a_failing_worker_caps_the_pool_with_its_reason(self):
        pool = self.pool(FAKE_FAIL_FROM="6")
        pool.spawn(10)
        self.assertEqual(pool.wait_ready(10, time.monotonic() + 60), "capped")
        self.assertEqual(pool.cap_from_failure()[:2], (6, "memory"))
        self.assertEqual(pool.wait_ready(6, time.monotonic() + 60), "ready")
        self.assertEqual(pool.spawn(12), 0)  # nothing is started at or beyond the cap

    def test_an_mps_client_limit_caps_at_the_clients_taken_and_refills_below_it(self):
        clients = os.path.join(self.dir.name, "clients")
        os.mkdir(clients)
        pool = self.pool(mps=True, FAKE_CLIENT_LIMIT="10", FAKE_CLIENT_DIR=clients)
        pool.spawn(16)  # side by side: the six refused are scattered over the slots
        self.assertEqual(pool.wait_ready(16, time.monotonic() + 60), "capped")
        self.assertEqual(pool.cap_from_failure()[:2], (10, "mps_client_limit"))
        self.assertEqual(pool.wait_ready(10, time.monotonic() + 60), "ready")
        self.assertEqual(pool.ready_count(), 10)
        self.assertEqual(len(os.listdir(clients)), 10)
        self.assertEqual([m["id"] for m in pool.go(10, self.go_cmd())], list(range(10)))
        self.assertEqual(pool.summary()["mps_client_cap"], 10)

    def test_the_device_unavailable_error_is_the_client_limit_only_under_mps(self):
        message = "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"
        self.assertEqual(hosting_pool.failure_reason(message, mps=True), "mps_client_limit")
        self.assertEqual(hosting_pool.failure_reason(message), "worker_failed")

    def test_workers_not_ready_in_time_are_budget_and_can_be_stopped(self):
        pool = self.pool(FAKE_SLOW_FROM="4", FAKE_DELAY_S="30")
        pool.spawn(8)
        self.assertEqual(pool.wait_ready(4, time.monotonic() + 60), "ready")
        self.assertEqual(pool.wait_ready(8, time.monotonic() + 0.5), "budget")
        paused = pool.pause_preparing()
        self.assertEqual(len(paused), 4)
        pool.resume(paused)
        started = time.monotonic()
        self.assertEqual(pool.kill_preparing(), 4)
        self.assertLess(time.monotonic() - started, 10)  # SIGTERM, not the 30 s start
        self.assertEqual((pool.covered(), pool.ready_count()), (4, 4))
        self.assertEqual(pool.summary()["workers_stopped_unused"], 4)


if __name__ == "__main__":
    unittest.main()
