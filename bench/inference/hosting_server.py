"""The server mode of the hosting benchmark: what a user with hundreds of small models runs without Tandem, as
Triton's PyTorch backend or TorchServe would: ONE PyTorch process (model_server.py) that holds every hosted
model on the GPU, each captured as a CUDA graph of its forward (on the CPU: eager under inference_mode), and
serves the requests of all of them from --server_threads threads that take them from one FIFO queue, each
thread with its own CUDA stream.

ServerHost is that process seen as a pool of hosts (hosting_mode's interface). Models are loaded into it in
slot order when a probe needs them (wait_ready), never while a probe runs, so nothing is ever "preparing". A
model that cannot be loaded (out of memory, most likely) caps the count at the models loaded before it; a
server that dies or fails a go caps it at 0, since nothing more can be probed. memory_cap() estimates from the
server's memory reports how many models fit what is free (hosting_memory's margins kept free).

Used from the main thread only.
"""

import os
import queue
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import bench_common as bc  # noqa: E402

import model_server  # noqa: E402
from hosting_mode import Mode, environment_without_mps  # noqa: E402
from hosting_memory import GPU_MARGIN_MIB, HOST_MARGIN_MIB, gpu_memory_mib  # noqa: E402
from hosting_pool import ProbeFailed, failure_reason  # noqa: E402

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_server.py")


def memory_cap(loaded, memory, margins=None):
    """(models, text): how many models fit, from a model_server "loaded" event's `memory` ({kind: {models_mib,
    free_mib, ...}}) with `loaded` models in the server: those plus what the free memory, less the kind's margin,
    holds at the loaded models' mean (fixed costs such as cuBLAS's workspace included, so the estimate errs low
    while few are loaded). The tighter of the GPU and the host; None before a model took measurable memory."""
    margins = margins or {"gpu": GPU_MARGIN_MIB, "host": HOST_MARGIN_MIB}
    best = None
    for kind, m in sorted((memory or {}).items()):
        per = m["models_mib"] / loaded if loaded else 0.0
        if per <= 0:
            continue
        margin = margins.get(kind, 0)
        fits = loaded + int(max(0.0, m["free_mib"] - margin) // per)
        text = (f"{kind} memory: {per:.1f} MiB per model in the server, {m['free_mib']:.0f} MiB free with {loaded} "
                f"loaded ({margin} MiB kept free)")
        if best is None or fits < best[0]:
            best = (fits, text)
    return best


class ServerHost:
    """The model server process, with the interface of hosting_pool.Pool that hosting_mode and hosting_probe
    use. `specs` are the slots in order (slot i has id i)."""

    def __init__(self, args, specs, threads, env=None, log=bc.log):
        self.specs, self.log = specs, log
        cmd = [sys.executable, SERVER, f"--device={args.device}", f"--threads={threads}"]
        if args.small:
            cmd.append("--small")
        self.proc = bc.JsonLinesWorker(cmd, "model server", env, lambda message, fatal: ProbeFailed(message))
        self.started = time.monotonic()
        self.info = None  # the ready event
        self.ready_s = None
        self.loaded = 0
        self.loading = False  # a load command is unanswered
        self.load_s = 0.0
        self.memory = None  # the last "loaded" event's report
        self.graph_max_rel_diff = None
        self.failure = None  # (count, reason, message)
        self.solo_ms = {}
        self.notes = {}
        self.log(f"    starting the model server ({threads} threads)")

    # ---- failures ----

    def cap_from_failure(self):
        """(count, reason, message) once a model could not be loaded or the server died; None before."""
        return self.failure

    def _died(self, message):
        """The server died, failed or stopped answering: nothing more can be probed."""
        if self.failure is None or self.failure[0] > 0:
            self.failure = (0, "worker_failed", message)
            self.log(f"    model server failed: {message[-300:]}")
        self._stop(kill=True)

    # ---- loading ----

    def spawn(self, n, idle=None):
        """Starts nothing: the models are loaded when a probe waits for them (wait_ready); 0 hosts started."""
        return 0

    def _take(self, event):
        kind = event.get("event")
        if kind == "ready":
            self.info, self.ready_s = event, time.monotonic() - self.started
        elif kind == "loaded":
            self.loading = False
            self.loaded, self.memory = event["loaded"], event.get("memory")
            self.load_s += event.get("load_s", 0.0)
            for m in event.get("models", []):
                self.solo_ms[m["id"]] = m.get("solo_ms")
                if m.get("graph_max_rel_diff") is not None:
                    self.graph_max_rel_diff = max(self.graph_max_rel_diff or 0.0, m["graph_max_rel_diff"])
            if event.get("error"):
                reason = failure_reason(event["error"])
                self.failure = (self.loaded, reason, event["error"])
                self.log(f"    model server: model {self.loaded} could not be loaded ({reason}): "
                         f"{event['error'][-300:]}")
        elif kind == "error":
            self._died(event.get("message", "error"))
        elif kind == "exit":
            self._died(f"exited (code {self.proc.proc.poll()})")

    def wait_ready(self, n, deadline):
        """Loads models until slots 0..n-1 are in the server: "ready"; "capped" when one of them could not be
        loaded or the server died (cap_from_failure() says where); "budget" when time.monotonic() reached
        `deadline` first (the load goes on; a later call waits for it)."""
        n = min(n, len(self.specs))
        waited = time.monotonic()
        while True:
            if self.failure and self.failure[0] < n:
                return "capped"
            if self.info is not None and not self.loading:
                if self.loaded >= n:
                    if time.monotonic() - waited > 0.5:
                        self.log(f"    models 0..{n - 1} loaded after {time.monotonic() - waited:.1f} s more")
                    return "ready"
                try:
                    self.proc.send({"cmd": "load", "models": self.specs[self.loaded:n]})
                    self.loading = True
                except ProbeFailed as e:
                    self._died(str(e))
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                return "budget"
            try:
                self._take(self.proc.events.get(timeout=min(left, 1.0)))
            except queue.Empty:
                pass

    # ---- running ----

    def go(self, n, cmd):
        """Runs slots 0..n-1 with `cmd`; their stats, in slot order. A server that fails it or does not answer
        is stopped (the cap falls to 0) and ProbeFailed raised."""
        if self.info is None or self.loading or self.loaded < n or (self.failure and self.failure[0] == 0):
            message = f"the model server is not ready for {n} models"  # wait_ready said it was: give up on it
            self._died(message)
            raise ProbeFailed(message)
        deadline = (time.monotonic() + (cmd["start_at"] - time.time()) + cmd["warmup_s"] + cmd["duration_s"]
                    + cmd["grace_s"] + model_server.FINISH_S + 30)
        try:
            self.proc.send({**cmd, "ids": [s["id"] for s in self.specs[:n]]})
            done = self.proc.expect("done", deadline)
        except ProbeFailed as e:
            self._died(str(e))
            raise
        self.notes = {"server": done.get("server")}
        return sorted(done["models"], key=lambda m: m["id"])

    def go_notes(self):
        """The server's account of the last go: its threads, how it ran the models, its generator's lateness."""
        return self.notes

    def ready_pids(self):
        return [self.proc.proc.pid] if self.info is not None and self.proc.proc.poll() is None else []

    # ---- nothing starts in the background ----

    def preparing(self):
        return []

    def pause_preparing(self):
        return []

    def resume(self, paused):
        pass

    def kill_preparing(self):
        return 0

    # ---- the end ----

    def summary(self):
        """What starting the server and loading the models took, and its failure if any."""
        out = {"workers_started": 1, "workers_ready": int(self.info is not None), "models_loaded": self.loaded,
               "ready_s": None if self.ready_s is None else round(self.ready_s, 2), "load_s": round(self.load_s, 2),
               "graph_max_rel_diff": self.graph_max_rel_diff}
        if self.failure:
            out["failures"] = [{"first_slot": self.failure[0], "reason": self.failure[1],
                                "message": self.failure[2][-500:]}]
        return out

    def _stop(self, kill):
        """Stops the server: quit when idle, SIGTERM while it loads or when `kill`; SIGKILL after 10 s."""
        p = self.proc.proc
        if p.poll() is None:
            if kill or self.loading:
                p.terminate()
            else:
                try:
                    self.proc.send({"cmd": "quit"})
                except ProbeFailed:
                    p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        try:
            p.stdin.close()
        except OSError:
            pass
        bc.forget_pid(p.pid)

    def close(self):
        self._stop(kill=False)


class ServerMode(Mode):
    name = "server"
    spawn_ahead = 0  # loads happen in wait_ready only, never beside a probe
    weight = 1.5  # its search goes as far as Tandem's: hundreds of models

    def open(self, counts, idle):
        args = self.args
        env = environment_without_mps()
        # A hardware queue per serving thread's stream (CUDA's default is 8), as tandemd gives each lane one.
        env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", str(min(32, max(8, args.server_threads))))
        if args.device == "cuda":
            used = gpu_memory_mib()
            if used:
                self.out["gpu_mem_used_before_mib"] = used[0]
        self.out["server_threads"] = args.server_threads
        self.out["execution"] = model_server.EXECUTION[args.device]
        if args.device in model_server.EXECUTION_NOTES:
            self.out["execution_note"] = model_server.EXECUTION_NOTES[args.device]
        self.pool = ServerHost(args, self.state["specs"], args.server_threads, env)
        return self.pool

    def caps(self):
        fits = memory_cap(self.pool.loaded, self.pool.memory) if self.pool else None
        return [(fits[0], "memory", fits[1])] if fits else []

    def close(self):
        if self.pool is not None and self.pool.memory:
            fits = memory_cap(self.pool.loaded, self.pool.memory)
            self.out["memory"] = {"reported": self.pool.memory, "models_loaded": self.pool.loaded,
                                  "fits_models": fits[0] if fits else None, "limited_by": fits[1] if fits else None}
