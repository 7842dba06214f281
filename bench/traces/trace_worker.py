#!/usr/bin/env python3
"""A trace job worker: one client process that runs training jobs through tandemd on command.

The trace benchmarks (jct.py, sweep.py) keep one worker per job of the trace, started before the trace's clock
starts, so that a job's arrival costs what a client's start costs after its program is loaded: connect,
register the job (uploading its weights), train. The job itself is a training step captured once by the
coordinator (trace_common.save_job_spec) and stored as a spec folder: graph.json (the RegisterJobRequest's
graph), arrays.npz (the persistent tensors and a few batches) and meta.json (names and dtypes). This process
imports numpy and the tandem client (ctypes over libtandem) but not torch, so it starts in a fraction of a
second.

Protocol: one JSON object per line on stdin; one per line on stdout. Times are time.monotonic() values, which
the coordinator compares with its own (CLOCK_MONOTONIC is one clock for every process of the machine).

  {"cmd": "load", "spec": DIR}                                   -> {"event": "loaded", "spec": DIR, "load_s"}
  {"cmd": "run", "run": ID, "endpoint", "name", "spec", "iterations", "hints": {...}, "lr": X?, "depth": 2,
   "think_ms": 0}                                                -> {"event": "finished" | "failed", "run": ID, ...}
  {"cmd": "calibrate", "run": ID, "endpoint", "name", "spec", "warmup_iters", "timed_s", "depth"}
                                                                 -> {"event": "calibrated" | "failed", "run": ID, ...}
  {"cmd": "stop", "run": ID}     ends that run after the iterations in flight (reported with "stopped": true)
  {"cmd": "quit"}

Not thread-safe beyond what it does itself: one reader thread hands commands to the main thread.
"""

import collections
import json
import os
import queue
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO_ROOT, "adaptor", "pytorch"))
sys.path.insert(0, os.path.join(REPO_ROOT, "client", "python"))

import numpy as np  # noqa: E402

import tandem  # noqa: E402  (the framework-free client: no torch)
from tandem import client as tclient  # noqa: E402

_CODES = {"float32": tclient.FLOAT32, "float64": tclient.FLOAT64, "int64": tclient.INT64,
          "int32": tclient.INT32, "bool": tclient.BOOL, "float16": tclient.FLOAT16}


def host_tensor(name, array):
    """A HostTensor over a contiguous numpy array (kept alive by the HostTensor)."""
    a = np.asarray(array)
    if not a.flags["C_CONTIGUOUS"]:
        a = a.copy(order="C")  # not np.ascontiguousarray: it turns a 0-d array into a 1-d one
    code = _CODES.get(a.dtype.name)
    if code is None:
        raise ValueError(f"tensor '{name}' has dtype {a.dtype.name}, which the trace worker cannot send")
    return tclient.HostTensor(name, code, tuple(int(d) for d in a.shape), a.ctypes.data, a.nbytes, a)


class JobSpec:
    """A captured training step, ready to register: graph, persistent tensors, batches, feed names."""

    def __init__(self, folder):
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
        with open(os.path.join(folder, "graph.json")) as f:
            self.graph = json.load(f)
        arrays = np.load(os.path.join(folder, "arrays.npz"), allow_pickle=False)
        self.model = meta["model"]
        self.loss_name = meta["loss_name"]
        self.persistent = [host_tensor(name, arrays[f"p{i}"]) for i, name in enumerate(meta["persistent"])]
        self.batches = [[host_tensor(name, arrays[f"b{k}_{j}"]) for j, name in enumerate(meta["batch_names"])]
                        for k in range(meta["batch_count"])]
        self.scalar_names = meta["scalar_names"]
        self.scalar_values = meta["scalar_values"]
        self.lr_names = [n for n in self.scalar_names if n.endswith("/lr")]

    def scalars(self, lr=None):
        values = [lr if (lr is not None and n in self.lr_names) else v
                  for n, v in zip(self.scalar_names, self.scalar_values)]
        return [host_tensor(n, np.array(v, dtype=np.float32)) for n, v in zip(self.scalar_names, values)]


class Worker:
    def __init__(self):
        self.commands = queue.Queue()
        self.stopped = set()  # run ids told to stop
        self.specs = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            cmd = json.loads(line)
            if cmd.get("cmd") == "stop":
                self.stopped.add(cmd.get("run"))
            else:
                self.commands.put(cmd)
        self.commands.put({"cmd": "quit"})

    @staticmethod
    def emit(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def spec(self, folder):
        if folder not in self.specs:
            self.specs[folder] = JobSpec(folder)
        return self.specs[folder]

    def serve(self):
        while True:
            cmd = self.commands.get()
            what = cmd.get("cmd")
            if what == "quit":
                return
            try:
                if what == "load":
                    start = time.monotonic()
                    self.spec(cmd["spec"])
                    self.emit({"event": "loaded", "spec": cmd["spec"], "load_s": round(time.monotonic() - start, 3)})
                elif what == "run":
                    self.emit(self.run(cmd))
                elif what == "calibrate":
                    self.emit(self.calibrate(cmd))
                else:
                    raise ValueError(f"unknown command {what!r}")
            except Exception as e:  # reported to the coordinator; the worker stays usable
                self.emit({"event": "failed", "run": cmd.get("run"), "message": f"{type(e).__name__}: {e}"})

    # ---- one job ----

    def _register(self, cmd, spec, times):
        client = tandem.Client(endpoint=cmd["endpoint"], name=cmd["name"])
        times["connected"] = time.monotonic()
        try:
            request = {"name": cmd["name"], "graph": spec.graph, "hints": cmd.get("hints") or {}}
            job_id, response = client.register_job(request, spec.persistent)
        except Exception:
            client.close()
            raise
        times["registered"] = time.monotonic()
        return client, job_id, response

    def _train(self, client, job_id, spec, cmd, stop_when):
        """Keeps `depth` iterations in flight until stop_when(done, now) or a stop command; returns the
        per-iteration [(completed_at, run_seconds, queue_seconds)] and the losses (first, last)."""
        depth = max(1, int(cmd.get("depth", 2)))
        think_s = float(cmd.get("think_ms", 0)) / 1e3
        limit = cmd.get("iterations")
        scalars = spec.scalars(cmd.get("lr"))
        pending = collections.deque()
        done, submitted = [], 0
        losses = [None, None]
        stop_submitting = False
        while True:
            while not stop_submitting and len(pending) < depth and (limit is None or submitted < limit):
                feeds = scalars + spec.batches[submitted % len(spec.batches)]
                pending.append(client.submit(job_id, feeds, [spec.loss_name], submitted + 1))
                submitted += 1
            if not pending:
                break
            result = client.wait(pending.popleft())
            now = time.monotonic()
            done.append((now, result.run_seconds, result.queue_seconds))
            loss = float(np.frombuffer(result.tensors[spec.loss_name].data, dtype=np.float32)[0])
            if losses[0] is None:
                losses[0] = loss
            losses[1] = loss
            if cmd.get("run") in self.stopped or stop_when(len(done), now):
                stop_submitting = True
            if think_s and not stop_submitting:
                time.sleep(think_s)
        return done, losses

    def run(self, cmd):
        """Registers the job, runs its iterations, closes it; reports every time that the trace needs."""
        times = {"received": time.monotonic()}
        spec = self.spec(cmd["spec"])
        client, job_id, response = self._register(cmd, spec, times)
        try:
            done, losses = self._train(client, job_id, spec, cmd, lambda n, now: False)
            times["trained"] = time.monotonic()
            client.close_job(job_id)
            times["closed"] = time.monotonic()
        finally:
            client.close()
        return {
            "event": "finished", "run": cmd.get("run"), "times": times,
            "first_done": done[0][0] if done else None, "last_done": done[-1][0] if done else None,
            "iterations": len(done), "stopped": len(done) < int(cmd["iterations"]),
            "device_s": round(sum(d[1] for d in done), 6), "queue_s": round(sum(d[2] for d in done), 6),
            "first_loss": losses[0], "last_loss": losses[1],
            "lane": int(response.get("lane", 0)), "device": response.get("device", ""),
            "persistent_bytes": int(response.get("persistent_bytes", 0)),
            "ephemeral_peak_bytes": int(response.get("ephemeral_peak_bytes", 0)),
        }

    def calibrate(self, cmd):
        """The job alone: registration time, then ms per iteration over timed_s after warmup_iters."""
        times = {"received": time.monotonic()}
        spec = self.spec(cmd["spec"])
        client, job_id, response = self._register(cmd, spec, times)
        warmup = int(cmd.get("warmup_iters", 5))
        timed_s = float(cmd.get("timed_s", 1.0))
        try:
            mark = {}

            def stop_when(n, now):
                if n == warmup:
                    mark["start"] = now
                return "start" in mark and n > warmup and now - mark["start"] >= timed_s

            done, losses = self._train(client, job_id, spec, dict(cmd, iterations=None), stop_when)
            client.close_job(job_id)
        finally:
            client.close()
        timed = done[warmup:]
        if not timed or "start" not in mark:
            raise RuntimeError(f"calibration stopped after {len(done)} iterations")
        wall = timed[-1][0] - mark["start"]
        return {
            "event": "calibrated", "run": cmd.get("run"),
            "register_s": round(times["registered"] - times["received"], 4),
            "first_iteration_s": round(done[0][0] - times["registered"], 4),
            "iterations": len(timed), "wall_ms": round(wall / len(timed) * 1e3, 4),
            "run_ms": round(sum(d[1] for d in timed) / len(timed) * 1e3, 4),
            "queue_ms": round(sum(d[2] for d in timed) / len(timed) * 1e3, 4),
            "first_loss": losses[0], "last_loss": losses[1],
            "persistent_bytes": int(response.get("persistent_bytes", 0)),
            "ephemeral_peak_bytes": int(response.get("ephemeral_peak_bytes", 0)),
        }


def main():
    import signal
    # Default actions: a signal ends the worker at once. A Python handler would instead make the blocking call
    # in libtandem fail with EINTR, which it does not survive.
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    Worker().serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
