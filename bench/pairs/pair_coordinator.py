"""The coordinator's side of the pair-matrix workers (pair_worker.py): the worker processes and one
configuration run on them behind a barrier.

Used by pair_matrix.py and bench/traces/qos.py (which starts more slots than two). Not thread-safe: one
coordinator thread drives the workers.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))

import bench_common as bc  # noqa: E402

WORKER = os.path.join(HERE, "pair_worker.py")


class ConfigFailed(Exception):
    """A configuration could not be measured. fatal: a worker is gone or stuck (restart the workers);
    otherwise a worker reported an error and is idle again."""

    def __init__(self, message, fatal=True):
        super().__init__(message)
        self.fatal = fatal


class WorkerProcess(bc.JsonLinesWorker):
    """A worker subprocess and the events it sends. args: device and small (the command line's)."""

    def __init__(self, slot, args, env=None):
        self.slot = slot
        cmd = [sys.executable, WORKER, f"--slot={slot}", f"--device={args.device}"]
        if args.small:
            cmd.append("--small")
        super().__init__(cmd, f"pair_matrix worker {slot}", env, ConfigFailed)

    def expect(self, event, timeout, skip_errors=False):
        """The next `event` within `timeout` seconds; an error event raises a non-fatal ConfigFailed (or is
        skipped with skip_errors)."""
        return super().expect(event, time.monotonic() + timeout, skip_errors)


class Workers:
    """Two worker processes (slots A and B), started on first use and again after a failed configuration."""

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
    """jobs: [{model, system ("native" | "tandem"), endpoint?, priority?, compile?, depth?, think_ms?,
    iters | timed_s | open_ended}], one per slot. args: prepare_timeout, warmup_s, depth, max_config_s.
    Returns one result per job: its 'done' (or open-ended 'stopped') event plus 'prepare_s' and, through
    tandemd, 'registration'. Raises ConfigFailed; after a fatal one the workers are closed (fresh ones start on
    the next configuration)."""
    procs = workers.get()
    try:
        for w, j in zip(procs, jobs):
            w.send({"cmd": "prepare",
                    **{k: j[k] for k in ("model", "system", "endpoint", "priority", "compile") if k in j}})
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
