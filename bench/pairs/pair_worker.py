#!/usr/bin/env python3
"""A pair-matrix worker: one process that runs one training job at a time on command (pair_matrix.py's Method).

    python3 pair_worker.py --slot A --device cuda [--small]      # started by pair_coordinator.WorkerProcess

Protocol: one JSON object per line on stdin, one per line on stdout (anything else goes to stderr).

  {"cmd": "prepare", "model", "system": "native" | "tandem", "endpoint"?, "priority"?, "compile"?}
        -> {"event": "ready", "prepare_s", "registration"?}   the job built (native: on this process's device,
           torch.compile(model, mode=compile) with "compile"; tandem: registered with the daemon at endpoint)
           and its first steps run (3 for a compiled model, which compiles in them; else 2)
  {"cmd": "go", "warmup_s", "warmup_min", "depth", "think_ms", "iters" | "timed_s" | "open_ended", "max_s"}
        -> {"event": "done", "iters", "wall_s", "ms_per_iter", "run_ms"} after the timed window (none when
           open-ended), then, after a "stop", {"event": "stopped", "stopped_by", "extra_iters" | "iters",
           "wall_s", "its_per_s", "run_ms"}
  {"cmd": "release"} -> {"event": "released"}                 the job closed (a native model is kept for later)
  {"cmd": "quit"}
A command that fails answers {"event": "error", "message"} and leaves the worker idle.

One reader thread hands commands to the main thread, which runs the job.
"""

import argparse
import collections
import gc
import json
import os
import queue
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pair_runners as runners  # noqa: E402  (puts bench/models and bench/traces on sys.path)
import bench_common as bc  # noqa: E402
import pair_models  # noqa: E402
import torch  # noqa: E402

# Native models a worker keeps between configurations (building, and compiling, them is not free): the two of
# the pair being measured; older ones are dropped so that a long list of zoo pairs does not fill the GPU.
NATIVE_KEPT = 2


class Worker:
    def __init__(self, slot, small, device):
        self.slot = slot
        self.small = small
        self.device = device
        self.commands = queue.Queue()
        self.native = collections.OrderedDict()  # (model, compile mode) -> NativeRunner, least recent first
        self.captured = {}  # reference model -> (capture, lowered, batches)
        self.built = {}     # zoo model -> (model, loss_fn, batches), for tandem.torch.train
        self.runner = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in sys.stdin:
            line = line.strip()
            if line:
                self.commands.put(json.loads(line))
        self.commands.put({"cmd": "quit"})

    def log(self, *parts):
        print(f"  [{self.slot}]", *parts, file=sys.stderr, flush=True)

    @staticmethod
    def emit(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def serve(self):
        while True:
            cmd = self.commands.get()
            what = cmd.get("cmd")
            if what == "quit":
                self.release()
                return
            try:
                if what == "prepare":
                    self.emit(self.prepare(cmd))
                elif what == "go":
                    self.go(cmd)
                elif what == "release":
                    self.release()
                    self.emit({"event": "released"})
                elif what == "stop":
                    continue  # a stop that arrived after the run ended by itself
                else:
                    raise ValueError(f"unknown command {what!r}")
            except Exception as e:
                traceback.print_exc()
                self.release()
                self.emit({"event": "error", "message": f"{type(e).__name__}: {e}"})

    def prepare(self, cmd):
        start = time.perf_counter()
        info = {"event": "ready"}
        if cmd["system"] == "native":
            self.runner = self._native(cmd["model"], cmd.get("compile"))
        else:
            self.runner = self._tandem(cmd)
            info["registration"] = self.runner.registration
        for _ in range(self.runner.warmup_steps):  # lazy initialization, cuDNN/cuBLAS handles, compilation
            self.runner.submit().wait()
        info["prepare_s"] = round(time.perf_counter() - start, 3)
        return info

    def _native(self, model, compile_mode):
        key = (model, compile_mode)
        if key in self.native:
            self.native.move_to_end(key)
            return self.native[key]
        while len(self.native) >= NATIVE_KEPT:
            self.native.popitem(last=False)
            gc.collect()
            if self.device == "cuda":
                torch.cuda.empty_cache()
        bc.like_for_like_numerics()
        t = time.perf_counter()
        self.native[key] = runners.NativeRunner(model, self.small, self.device, compile_mode)
        self.log(f"built {model}{f' (torch.compile mode {compile_mode})' if compile_mode else ''} in "
                 f"{time.perf_counter() - t:.2f} s")
        return self.native[key]

    def _tandem(self, cmd):
        model = cmd["model"]
        name = f"{model}-{self.slot}"
        hints = {"device": self.device}
        if cmd.get("priority"):
            hints["priority"] = int(cmd["priority"])
        if pair_models.zoo_name(model) is not None:
            if model not in self.built:
                m, loss_fn, make_batch = pair_models.build(model, self.small)
                self.built[model] = (m, loss_fn, bc.make_batches(make_batch, 4))
            t = time.perf_counter()
            runner = runners.TandemRunner.trained(self.built[model], cmd["endpoint"], name, hints)
            self.log(f"tandem.torch.train({model}) in {time.perf_counter() - t:.2f} s")
            return runner
        folder = runners.spec_folder(model, self.small, self.log) if model not in self.captured else None
        if folder is not None:
            return runners.SpecRunner(folder, cmd["endpoint"], name, hints)
        if model not in self.captured:
            import tandem.torch
            m, loss_fn, make_batch = pair_models.build(model, self.small)
            batches = bc.make_batches(make_batch, 4)
            t = time.perf_counter()
            capture, lowered = tandem.torch.capture_training_job(m, loss_fn, bc.sgd(m.parameters()), batches[0])
            self.log(f"captured {model} in {time.perf_counter() - t:.2f} s")
            if hasattr(lowered, "values"):
                lowered.values = {}  # PyTorch's value of every intermediate, kept for debugging only
            self.captured[model] = (capture, lowered, batches)
        return runners.TandemRunner.from_capture(self.captured[model], cmd["endpoint"], name, hints)

    def poll(self, flags):
        """Takes waiting commands without blocking: sets flags["stop"] / flags["quit"] (a quit stays queued
        for serve())."""
        try:
            while True:
                cmd = self.commands.get_nowait()
                if cmd.get("cmd") == "stop":
                    flags["stop"] = True
                elif cmd.get("cmd") == "quit":
                    flags["quit"] = True
                    self.commands.put(cmd)
                    return
        except queue.Empty:
            return

    def go(self, cmd):
        """Warm-up (at least warmup_min iterations and warmup_s seconds), a timed window, then more iterations
        until told to stop (see pair_matrix.py's Method)."""
        depth = max(1, int(cmd.get("depth", 2)))
        think_s = float(cmd.get("think_ms", 0)) / 1e3
        warmup_s, warmup_min = float(cmd.get("warmup_s", 0.5)), int(cmd.get("warmup_min", 3))
        iters, timed_s = cmd.get("iters"), cmd.get("timed_s")
        open_ended = bool(cmd.get("open_ended"))
        max_s = float(cmd.get("max_s", 60))
        runner = self.runner
        pending = collections.deque()
        go_at = time.perf_counter()
        phase = "timed" if open_ended else "warmup"
        phase_at = go_at
        count, runs = 0, []
        reported = False
        stopped_by = "stop"
        flags = {"stop": False, "quit": False}
        while True:
            pending.append(runner.submit())
            if len(pending) < depth:
                continue
            run_seconds = pending.popleft().wait()
            now = time.perf_counter()
            count += 1
            if phase == "warmup":
                if count >= warmup_min and now - phase_at >= warmup_s:
                    phase, phase_at, count, runs = "timed", now, 0, []
            elif phase == "timed":
                if run_seconds is not None:
                    runs.append(run_seconds)
                if not open_ended and ((iters and count >= iters) or (not iters and now - phase_at >= timed_s)):
                    wall = now - phase_at
                    self.emit({"event": "done", "iters": count, "wall_s": round(wall, 6),
                               "ms_per_iter": round(wall / count * 1e3, 4),
                               "run_ms": round(sum(runs) / len(runs) * 1e3, 4) if runs else None})
                    reported = True
                    phase, phase_at, count = "extend", now, 0
            self.poll(flags)
            if flags["quit"]:
                stopped_by = "quit"
                break
            if flags["stop"] and (phase == "extend" or open_ended):
                break
            if now - go_at > max_s:
                stopped_by = f"max_s ({max_s} s)"
                break
            if think_s:
                time.sleep(think_s)
        end = time.perf_counter()
        while pending:
            pending.popleft().wait()
        if not reported and not open_ended:
            self.emit({"event": "error", "message": f"no timed result within {max_s} s (phase {phase}, {count} iters)"})
            return
        stopped = {"event": "stopped", "stopped_by": stopped_by}
        if open_ended:
            wall = end - phase_at
            stopped.update({"iters": count, "wall_s": round(wall, 6),
                            "its_per_s": round(count / wall, 4) if wall > 0 else None,
                            "run_ms": round(sum(runs) / len(runs) * 1e3, 4) if runs else None})
        else:
            stopped["extra_iters"] = count
        self.emit(stopped)

    def release(self):
        if isinstance(self.runner, (runners.TandemRunner, runners.SpecRunner)):
            try:
                self.runner.close()
            except Exception as e:  # the daemon may be gone already
                self.log(f"closing the job: {e}")
        elif self.runner is not None:
            self.runner.close()
        self.runner = None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--slot", default="A")
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--small", action="store_true")
    args = p.parse_args()
    bc.raise_on_signals()
    if args.device == "cpu":
        torch.set_num_threads(1)
    else:
        # Both workers capture at the same time in the Tandem phase; the GPU phases barely use the CPU.
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    try:
        Worker(args.slot, args.small, args.device).serve()
    except bc.Terminated:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
