#!/usr/bin/env python3
"""The pair matrix of the empirical study of shared-GPU training: two jobs on one GPU under
time-slicing, MPS and Tandem.

For each pair of models (default: fcn5+fcn5, lstm+lstm, resnet50+resnet50, fcn5+vgg19, vgg19+lstm, fcn5+lstm)
and each system, each job's iteration time alone and beside the other:
  time_slicing  two native PyTorch processes at once (eager, the GPU's default time-slicing);
  mps           the same two processes as clients of an MPS server the program starts (pipe and log folders
                under --mps_dir) and always stops (`echo quit | nvidia-cuda-mps-control`), also on errors and
                signals;
  tandem        two adaptor jobs (two processes, one session each) against one tandemd (--tandem_policy, pack by
                default).
Reported per job r = shared / solo time per iteration (the study's degradation coefficient), per pair the
aggregate throughput = sum over the two jobs of solo / shared (1.0: no gain, no loss); for Tandem also the
aggregate against the native solo times.

PRIORITY mode (--priority HIGH:BEST_EFFORT, default fcn5:vgg19): a high-priority job (one iteration in flight,
plus --think_ms between iterations) beside a best-effort job that runs as fast as it can. Reported: the
high-priority job's slowdown (shared / solo) and the best-effort job's throughput as a fraction of its solo
throughput, under Tandem (a tandemd with --policy=priority, the job's priority hint), MPS and time-slicing (no
priorities: the GPU cannot tell the jobs apart).

Method. Two long-lived worker processes (slots A and B) take commands on a pipe. A configuration is: each
worker prepares its job (model on the GPU, or registration with tandemd) and warms it up; once both are ready
the coordinator sends both a "go" (the barrier); each warms up for --warmup_s, then times a fixed number of
iterations (the number its model completed in --solo_s when measured alone in the same system) with --depth
iterations in flight, reports, and keeps running until every job of the configuration has reported, so that
each timed window is fully overlapped by the partner. The best-effort job of the priority mode runs from "go"
until the high-priority job has finished and counts its completed iterations. The systems run in the order
tandem, time_slicing, mps (the MPS server exists only during the last phase, with fresh workers as its
clients); --budget_s is shared evenly among the systems still to run, and configurations that would not fit
their system's share are skipped (recorded as such).

    python3 bench/pairs/pair_matrix.py --out /tmp/out/pairs.json                     # on the GPU machine
    python3 bench/pairs/pair_matrix.py --small --device cpu --out /tmp/pairs.json    # smoke test (no MPS)
"""

import argparse
import collections
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "traces"))  # job specs (trace_common, trace_worker)

import bench_common as bc  # noqa: E402
import torch  # noqa: E402

DEFAULT_PAIRS = "fcn5+fcn5,lstm+lstm,resnet50+resnet50,fcn5+vgg19,vgg19+lstm,fcn5+lstm"
SYSTEMS = ("tandem", "time_slicing", "mps")


# =====================================================================
# Worker: one process, one job at a time, commands on stdin, events on stdout.
# =====================================================================

class NativeHandle:
    def __init__(self, event):
        self.event = event

    def wait(self):
        if self.event is not None:
            self.event.synchronize()
        return None


class NativeRunner:
    """A PyTorch training step on this process's GPU (or CPU)."""

    def __init__(self, name, small, device):
        from overhead import EagerStep
        model, loss_fn, make_batch = bc.build_model(name, small)
        batch = bc.make_batches(make_batch, 1)[0]
        self.device = device
        self.step = EagerStep(model, loss_fn, batch, device)

    def submit(self):
        self.step()
        if self.device == "cuda":
            event = torch.cuda.Event()
            event.record()
            return NativeHandle(event)
        return NativeHandle(None)

    def close(self):
        bc.sync(self.device)


class TandemHandle:
    def __init__(self, handle):
        self.handle = handle

    def wait(self):
        self.handle.result()
        return self.handle.run_seconds


class TandemRunner:
    """A training job registered with tandemd from a cached capture."""

    def __init__(self, captured, endpoint, name, hints):
        import tandem.torch
        capture, lowered, self.batches = captured
        self.job = tandem.torch.TrainingJob(capture, lowered, endpoint, name, hints)
        self.i = 0

    def submit(self):
        h = self.job.step_async(*self.batches[self.i % len(self.batches)])
        self.i += 1
        return TandemHandle(h)

    def close(self):
        self.job.close()


class SpecHandle:
    def __init__(self, client, pending):
        self.client, self.pending = client, pending

    def wait(self):
        return self.client.wait(self.pending).run_seconds


class SpecRunner:
    """A training job registered with tandemd from a saved job spec (trace_common.save_job_spec): the same graph,
    weights, batches and optimizer scalars as a capture, captured once per suite run ($BENCH_SPEC_DIR) instead
    of once per worker process and stage."""

    loaded = {}  # folder -> JobSpec, kept for the worker's later configurations

    def __init__(self, folder, endpoint, name, hints):
        import tandem
        import trace_worker
        if folder not in SpecRunner.loaded:
            SpecRunner.loaded[folder] = trace_worker.JobSpec(folder)
        self.spec = SpecRunner.loaded[folder]
        self.scalars = self.spec.scalars()
        self.client = tandem.Client(endpoint=endpoint, name=name)
        try:
            self.job_id, self.registration = self.client.register_job(
                {"name": name, "graph": self.spec.graph, "hints": hints}, self.spec.persistent)
        except Exception:
            self.client.close()
            raise
        self.i = 0

    def submit(self):
        feeds = self.scalars + self.spec.batches[self.i % len(self.spec.batches)]
        self.i += 1
        return SpecHandle(self.client, self.client.submit(self.job_id, feeds, [self.spec.loss_name], self.i))

    def close(self):
        self.client.close()


def spec_folder(model, small, log):
    """The saved spec of `model` in $BENCH_SPEC_DIR (captured now when no process of this run has yet), or
    None without that variable."""
    spec_dir = os.environ.get("BENCH_SPEC_DIR")
    if not spec_dir:
        return None
    import trace_common
    folder, capture_s = trace_common.save_job_spec(spec_dir, model, small)
    log(f"{model}: spec {'cached' if capture_s is None else f'captured in {capture_s:.2f} s'}")
    return folder


class Worker:
    def __init__(self, slot, small, device):
        self.slot = slot
        self.small = small
        self.device = device
        self.commands = queue.Queue()
        self.native = {}    # model -> NativeRunner (kept: building them is not free)
        self.captured = {}  # model -> (capture, lowered, batches)
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
        model = cmd["model"]
        info = {"event": "ready"}
        if cmd["system"] == "native":
            if model not in self.native:
                bc.like_for_like_numerics()
                self.native[model] = NativeRunner(model, self.small, self.device)
            self.runner = self.native[model]
        else:
            hints = {"device": self.device}
            if cmd.get("priority"):
                hints["priority"] = int(cmd["priority"])
            folder = spec_folder(model, self.small, self.log) if model not in self.captured else None
            if folder is not None:
                self.runner = SpecRunner(folder, cmd["endpoint"], f"{model}-{self.slot}", hints)
                info["registration"] = self.runner.registration
            if folder is None and model not in self.captured:
                import tandem.torch
                m, loss_fn, make_batch = bc.build_model(model, self.small)
                batches = bc.make_batches(make_batch, 4)
                t = time.perf_counter()
                capture, lowered = tandem.torch.capture_training_job(m, loss_fn, bc.sgd(m.parameters()), batches[0])
                self.log(f"captured {model} in {time.perf_counter() - t:.2f} s")
                if hasattr(lowered, "values"):
                    lowered.values = {}  # PyTorch's value of every intermediate, kept for debugging only
                self.captured[model] = (capture, lowered, batches)
            if folder is None:
                self.runner = TandemRunner(self.captured[model], cmd["endpoint"], f"{model}-{self.slot}", hints)
                info["registration"] = self.runner.job.registration
        for _ in range(2):  # first iterations: lazy initialization, cuDNN/cuBLAS handles
            self.runner.submit().wait()
        info["prepare_s"] = round(time.perf_counter() - start, 3)
        return info

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
        """Warm-up, a timed window, then more iterations until told to stop (see the module's Method)."""
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
        if isinstance(self.runner, (TandemRunner, SpecRunner)):
            try:
                self.runner.close()
            except Exception as e:  # the daemon may be gone already
                self.log(f"closing the job: {e}")
        elif self.runner is not None:
            self.runner.close()
        self.runner = None


def worker_main(args):
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


# =====================================================================
# Coordinator
# =====================================================================

class ConfigFailed(Exception):
    """A configuration could not be measured. fatal: a worker is gone or stuck (restart the workers);
    otherwise a worker reported an error and is idle again."""

    def __init__(self, message, fatal=True):
        super().__init__(message)
        self.fatal = fatal


class WorkerProcess(bc.JsonLinesWorker):
    """A worker subprocess and the events it sends."""

    def __init__(self, slot, args, env=None):
        self.slot = slot
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", f"--slot={slot}", f"--device={args.device}"]
        if args.small:
            cmd.append("--small")
        super().__init__(cmd, f"pair_matrix worker {slot}", env, ConfigFailed)

    def expect(self, event, timeout, skip_errors=False):
        """The next `event` within `timeout` seconds; an error event raises a non-fatal ConfigFailed (or is
        skipped with skip_errors)."""
        return super().expect(event, time.monotonic() + timeout, skip_errors)


class Workers:
    """Two worker processes, restarted after a failed configuration."""

    def __init__(self, args, env=None):
        self.args, self.env = args, env
        self.procs = None

    def get(self):
        if self.procs is None:
            self.procs = [WorkerProcess(s, self.args, self.env) for s in ("A", "B")]
        return self.procs

    def close(self):
        if self.procs:
            for w in self.procs:
                w.close()
        self.procs = None


def run_config(workers, jobs, args):
    """jobs: [{model, system, endpoint?, priority, depth, think_ms, iters | timed_s | open_ended}], one per slot.
    Returns one result per job: its 'done' (or open-ended 'stopped') event plus 'prepare'."""
    procs = workers.get()
    try:
        for w, j in zip(procs, jobs):
            w.send({"cmd": "prepare", **{k: j[k] for k in ("model", "system", "endpoint", "priority") if k in j}})
        prepared = [w.expect("ready", args.prepare_timeout) for w, _ in zip(procs, jobs)]
        for w, j in zip(procs, jobs):  # the barrier: both are ready, both go now
            w.send({"cmd": "go", "warmup_s": args.warmup_s, "depth": j.get("depth", args.depth),
                    "think_ms": j.get("think_ms", 0), "iters": j.get("iters"), "timed_s": j.get("timed_s"),
                    "open_ended": j.get("open_ended", False), "max_s": args.max_config_s})
        results = [None] * len(jobs)
        for k, (w, j) in enumerate(zip(procs, jobs)):
            if not j.get("open_ended"):
                results[k] = w.expect("done", args.max_config_s + 30)
        for w, _ in zip(procs, jobs):
            w.send({"cmd": "stop"})
        for k, (w, j) in enumerate(zip(procs, jobs)):
            stopped = w.expect("stopped", 60)
            if j.get("open_ended"):
                results[k] = stopped
            else:
                results[k]["extra_iters"] = stopped.get("extra_iters")
        for w, _ in zip(procs, jobs):
            w.send({"cmd": "release"})
            w.expect("released", 60)
        for r, p in zip(results, prepared):
            r["prepare_s"] = p.get("prepare_s")
            if "registration" in p:
                r["registration"] = p["registration"]
        return results
    except ConfigFailed as e:
        if not e.fatal and back_to_idle(procs[:len(jobs)]):
            raise
        workers.close()  # a worker is gone or stuck: fresh ones for the next configuration
        raise


def back_to_idle(procs):
    """After a worker reported an error: stops and releases every job of the configuration. False when a
    worker does not come back."""
    try:
        for w in procs:
            w.send({"cmd": "stop"})
            w.send({"cmd": "release"})
        for w in procs:
            w.expect("released", 60, skip_errors=True)
        return True
    except ConfigFailed:
        return False


class Matrix:
    """Runs one system's solos, pairs and priority configurations and fills result['systems'][system]."""

    def __init__(self, args, result, save):
        self.args, self.result, self.save = args, result, save

    def out(self, system):
        return self.result["systems"].setdefault(system, {"solo": {}, "pairs": [], "priority": None})

    def solo(self, system, workers, model, endpoint=None):
        out = self.out(system)
        if model in out["solo"]:
            return out["solo"][model]
        job = {"model": model, "system": "tandem" if system.startswith("tandem") else "native",
               "endpoint": endpoint, "timed_s": self.args.solo_s}
        try:
            r = run_config(workers, [job], self.args)[0]
        except ConfigFailed as e:
            out["solo"][model] = {"error": str(e)}
            bc.log(f"  {system} solo {model}: FAILED: {e}")
            return out["solo"][model]
        r["n"] = max(self.args.min_iters, int(r["iters"]))
        out["solo"][model] = r
        extra = f", device {r['run_ms']:.3f} ms" if r.get("run_ms") else ""
        bc.log(f"  {system} solo {model}: {r['ms_per_iter']:.3f} ms/iter ({r['iters']} iters{extra})")
        self.save()
        return r

    def pair(self, system, workers, a, b, endpoint=None):
        out = self.out(system)
        entry = {"pair": f"{a}+{b}", "models": [a, b]}
        solos = [self.solo(system, workers, m, endpoint) for m in (a, b)]
        if any("error" in s for s in solos):
            entry["error"] = "a solo measurement failed"
            out["pairs"].append(entry)
            return
        kind = "tandem" if system.startswith("tandem") else "native"
        jobs = [{"model": m, "system": kind, "endpoint": endpoint, "iters": s["n"]} for m, s in zip((a, b), solos)]
        try:
            results = run_config(workers, jobs, self.args)
        except ConfigFailed as e:
            entry["error"] = str(e)
            out["pairs"].append(entry)
            bc.log(f"  {system} {a}+{b}: FAILED: {e}")
            self.save()
            return
        entry["jobs"] = []
        for m, s, r in zip((a, b), solos, results):
            entry["jobs"].append({"model": m, "solo_ms": s["ms_per_iter"], "shared_ms": r["ms_per_iter"],
                                  "r": round(r["ms_per_iter"] / s["ms_per_iter"], 4), "iters": r["iters"],
                                  "run_ms": r.get("run_ms"), "iters_after_window": r.get("extra_iters"),
                                  "lane": (r["registration"].get("lane", 0) if "registration" in r else None)})
        entry["aggregate"] = round(sum(1 / j["r"] for j in entry["jobs"]), 4)
        out["pairs"].append(entry)
        rs = ", ".join(f"{j['model']} r={j['r']:.2f}" for j in entry["jobs"])
        bc.log(f"  {system} {a}+{b}: aggregate {entry['aggregate']:.3f} ({rs})")
        self.save()

    def priority(self, system, workers, endpoint=None):
        hp, be = self.args.priority
        out = self.out(system)
        kind = "tandem" if system.startswith("tandem") else "native"
        entry = out["priority"] = {"high": hp, "best_effort": be, "think_ms": self.args.think_ms}
        try:
            hp_solo = run_config(workers, [{"model": hp, "system": kind, "endpoint": endpoint, "priority": 1,
                                            "depth": 1, "think_ms": self.args.think_ms,
                                            "timed_s": self.args.solo_s}], self.args)[0]
            be_solo = run_config(workers, [{"model": be, "system": kind, "endpoint": endpoint,
                                            "timed_s": self.args.solo_s}], self.args)[0]
            n = max(self.args.min_iters, int(hp_solo["iters"]))
            hp_shared, be_shared = run_config(workers, [
                {"model": hp, "system": kind, "endpoint": endpoint, "priority": 1, "depth": 1,
                 "think_ms": self.args.think_ms, "iters": n},
                {"model": be, "system": kind, "endpoint": endpoint, "priority": 0, "open_ended": True}], self.args)
        except ConfigFailed as e:
            entry["error"] = str(e)
            bc.log(f"  {system} priority {hp}:{be}: FAILED: {e}")
            self.save()
            return
        be_solo_its = 1e3 / be_solo["ms_per_iter"]
        entry.update({
            "hp_solo_ms": hp_solo["ms_per_iter"], "hp_shared_ms": hp_shared["ms_per_iter"],
            "hp_slowdown": round(hp_shared["ms_per_iter"] / hp_solo["ms_per_iter"], 4),
            "be_solo_ms": be_solo["ms_per_iter"], "be_solo_its": round(be_solo_its, 4),
            "be_shared_its": be_shared.get("its_per_s"), "be_shared_iters": be_shared.get("iters"),
            "be_throughput": round((be_shared.get("its_per_s") or 0) / be_solo_its, 4),
        })
        bc.log(f"  {system} priority {hp} (high) + {be} (best effort): high-priority slowdown "
               f"{entry['hp_slowdown']:.2f}x, best-effort throughput {entry['be_throughput']:.2f} of solo")
        self.save()

    def run_system(self, system, workers, deadline, endpoint=None, pairs=True, priority=True):
        """Pairs, then the priority mode; configurations that would start less than min_config_s before
        `deadline` (time.monotonic()) are skipped, so that every system gets its share of the budget."""
        def spent():
            return deadline - time.monotonic() < self.args.min_config_s

        for p in self.args.pairs if pairs else []:
            if spent():
                self.out(system)["pairs"].append({"pair": "+".join(p), "models": list(p),
                                                  "error": "skipped: budget spent"})
                continue
            self.pair(system, workers, *p, endpoint=endpoint)
        if priority and self.args.priority:
            if spent():
                self.out(system)["priority"] = {"error": "skipped: budget spent"}
            else:
                self.priority(system, workers, endpoint)


class Mps:
    """An MPS control daemon with private pipe and log folders; stop() is safe to call at any time."""

    def __init__(self, base_dir):
        self.base = base_dir
        # The control daemon serves the GPUs of CUDA_VISIBLE_DEVICES; its clients see those GPUs numbered from
        # 0 (a client left with CUDA_VISIBLE_DEVICES=1 beside a daemon of GPU 1 sees no GPU), so `env`, the
        # clients' environment, renumbers them.
        self.daemon_env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=os.path.join(base_dir, "pipe"),
                               CUDA_MPS_LOG_DIRECTORY=os.path.join(base_dir, "log"))
        self.env = dict(self.daemon_env)
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if visible:
            self.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(visible)))
        self.started = False

    def start(self):
        for d in ("pipe", "log"):
            os.makedirs(os.path.join(self.base, d), exist_ok=True)
        self.started = True  # from here on stop() runs even if -d fails half way
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=self.daemon_env, check=True, timeout=30)
        bc.log(f"MPS control daemon started (pipe {self.env['CUDA_MPS_PIPE_DIRECTORY']})")

    def log_tail(self, chars=2000):
        try:
            with open(os.path.join(self.base, "log", "control.log"), errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self):
        if not self.started:
            return
        self.started = False
        try:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=self.daemon_env, timeout=30)
            bc.log("MPS control daemon stopped")
        except (OSError, subprocess.SubprocessError) as e:
            bc.log(f"stopping MPS failed: {e}")


def mps_unavailable_reason(device):
    if device != "cuda":
        return "no CUDA device"
    import shutil
    if shutil.which("nvidia-cuda-mps-control") is None:
        return "nvidia-cuda-mps-control not found"
    return None


def summarize(result):
    """Tandem's aggregate against the native solo times, and a printed table."""
    systems = result["systems"]
    native = systems.get("time_slicing", {}).get("solo", {})
    for name, s in systems.items():
        if not name.startswith("tandem"):
            continue
        for p in s.get("pairs", []):
            if "jobs" in p and all(j["model"] in native and "ms_per_iter" in native[j["model"]] for j in p["jobs"]):
                p["aggregate_vs_native_solo"] = round(
                    sum(native[j["model"]]["ms_per_iter"] / j["shared_ms"] for j in p["jobs"]), 4)
    bc.log("pair                 " + "".join(f"{s:>30s}" for s in systems))
    pairs = [f"{a}+{b}" for a, b in result["config"]["pairs"]]
    for pair in pairs:
        cells = []
        for s in systems.values():
            entry = next((p for p in s.get("pairs", []) if p["pair"] == pair), None)
            if entry is None or "jobs" not in entry:
                skipped = entry is not None and entry.get("error", "").startswith("skipped")
                state = "-" if entry is None else ("skipped" if skipped else "failed")
                cells.append(f"{state:>30s}")
            else:
                rs = ", ".join(f"{j['r']:.2f}" for j in entry["jobs"])
                cells.append(f"{entry['aggregate']:>14.2f} ({rs})".rjust(30))
        bc.log(f"{pair:20s} " + "".join(cells))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--slot", default="A", help=argparse.SUPPRESS)
    p.add_argument("--pairs", default=DEFAULT_PAIRS, help="comma-separated pairs a+b")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="subset of tandem,time_slicing,mps")
    p.add_argument("--priority", default="fcn5:vgg19",
                   help="HIGH:BEST_EFFORT models of the priority mode; empty to skip it")
    p.add_argument("--think_ms", type=float, default=0.0, help="pause of the high-priority job between iterations")
    p.add_argument("--small", action="store_true", help="the tiny models (CPU smoke test)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--depth", type=int, default=2, help="iterations in flight per job")
    p.add_argument("--solo_s", type=float, default=1.0, help="timed seconds of a solo run (sets the iterations)")
    p.add_argument("--warmup_s", type=float, default=0.5)
    p.add_argument("--min_iters", type=int, default=5, help="fewest timed iterations")
    p.add_argument("--tandem_policy", default="pack", help="tandemd policy of the pair matrix (pack, fair, ...)")
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--log_dir", default=None, help="where tandemd's logs go (default: a temporary folder)")
    p.add_argument("--mps_dir", default=None, help="MPS pipe/log folders go here (default: a new folder in /tmp)")
    p.add_argument("--prepare_timeout", type=float, default=300, help="s for a job to capture/register/warm up")
    p.add_argument("--max_config_s", type=float, default=40, help="longest a configuration may run")
    p.add_argument("--min_config_s", type=float, default=8, help="skip configurations when less budget is left")
    p.add_argument("--budget_s", type=float, default=0, help="total budget; 0: none")
    p.add_argument("--out", default=None, help="JSON file to write")
    args = p.parse_args()
    args.device = bc.torch_device(args.device)
    if args.worker:
        return worker_main(args)
    if not args.out:
        p.error("--out is required")
    bc.raise_on_signals()
    args.pairs = [tuple(bc.parse_models(x.replace("+", ","))) for x in args.pairs.split(",") if x]
    if any(len(x) != 2 for x in args.pairs):
        p.error("--pairs: each entry is a+b")
    args.priority = tuple(bc.parse_models(args.priority.replace(":", ","))) if args.priority else None
    if args.priority is not None and len(args.priority) != 2:
        p.error("--priority: HIGH:BEST_EFFORT")
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            p.error(f"--systems: unknown {s!r}")
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(args.device),
              "config": {"pairs": args.pairs, "systems": systems, "priority": args.priority,
                         "think_ms": args.think_ms, "small": args.small, "depth": args.depth, "solo_s": args.solo_s,
                         "warmup_s": args.warmup_s, "min_iters": args.min_iters,
                         "tandem_policy": args.tandem_policy,
                         "optimizer": f"SGD lr={bc.LR} momentum={bc.MOMENTUM}", **bc.numerics()},
              "systems": {}}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    matrix = Matrix(args, result, save)
    mps_reason = mps_unavailable_reason(args.device) if "mps" in systems else None
    workers = Workers(args)
    mps = None
    daemon = None
    bc.log(f"pair matrix on {result['meta']['gpu']}: systems {', '.join(systems)}; pairs "
           f"{', '.join('+'.join(x) for x in args.pairs)}; priority {args.priority}")

    def deadline(system):
        """An equal share of what is left of the budget for this system and the ones after it."""
        rest = [s for s in SYSTEMS if s in systems and not (s == "mps" and mps_reason)]
        rest = rest[rest.index(system):]
        return time.monotonic() + budget.left() / len(rest)

    try:
        if "tandem" in systems:
            flags = bc.daemon_flags_for_large_models()
            binary = bc.find_tandemd(args.tandemd)
            bc.log(f"== tandem (policy {args.tandem_policy})")
            daemon = bc.Daemon(binary, args.device, args.tandem_policy, flags, args.log_dir, "tandemd-pairs").start()
            matrix.out("tandem")["policy"] = args.tandem_policy
            tandem_deadline = deadline("tandem")
            matrix.run_system("tandem", workers, tandem_deadline, daemon.endpoint, priority=False)
            daemon.stop()
            if args.priority:
                bc.log("== tandem (policy priority): priority mode")
                daemon = bc.Daemon(binary, args.device, "priority", flags, args.log_dir, "tandemd-priority").start()
                matrix.out("tandem")["priority_policy"] = "priority"
                matrix.run_system("tandem", workers, tandem_deadline, daemon.endpoint, pairs=False)
                daemon.stop()
            daemon = None
        if "time_slicing" in systems:
            bc.log("== time-slicing (two PyTorch processes)")
            matrix.run_system("time_slicing", workers, deadline("time_slicing"))
        workers.close()
        if "mps" in systems:
            if mps_reason:
                result["systems"]["mps"] = {"skipped": mps_reason}
                bc.log(f"== MPS skipped: {mps_reason}")
            else:
                bc.log("== MPS (two PyTorch processes as MPS clients)")
                mps = Mps(args.mps_dir or tempfile.mkdtemp(prefix="tandem-bench-mps-"))
                mps.start()
                workers = Workers(args, env=mps.env)
                matrix.run_system("mps", workers, deadline("mps"))
                workers.close()
                result["systems"]["mps"]["control_log_tail"] = mps.log_tail()
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        bc.stopped_early("pair matrix", result, e)
    finally:
        workers.close()
        if daemon is not None:
            daemon.stop()
        if mps is not None:
            mps.stop()
        try:
            summarize(result)
        except Exception as e:  # a summary must not hide the measurements
            bc.log(f"summary failed: {e}")
        save()
    bc.log(f"wrote {args.out}")
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
