"""The worker processes of one hosting mode, started ahead of the probes that need them.

Slot i of `specs` is hosted model i. A Pool starts worker.py processes for slots 0..n-1 (spawn(n), which does
not wait) and waits for them only when a probe needs them (wait_ready(n)). Workers start under the SCHED_IDLE
policy (when this program may undo that: as root), so that the ones starting in the background take CPU time
only from idle cores, not from a running probe (a waking thread of a normal policy preempts them at once) nor
from the workers a probe waits for: wait_ready() puts those back to the normal policy and this program's
niceness, and every worker does so itself once ready (run_normally()).
A tandem worker hosts up to `per_proc` models; the slots added by one spawn() are grouped by (kind, batch)
first, so that each worker captures few distinct specs (it captures each once). A worker that fails to start
caps the pool below its first slot, with a reason (cap_from_failure()). Under MPS (mps=True) a worker refused
because the server holds its most clients caps the pool at the clients that did connect instead: workers start
side by side, so the refused ones are scattered among the slots; wait_ready() then stops the workers of slots
past that cap and starts the refused ones below it again.

The server mode's one process (hosting_server.ServerHost) offers the same interface to the search.

Used from the main thread only.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))

import bench_common as bc  # noqa: E402

WORKER = os.path.join(HERE, "worker.py")

_MPS_LIMIT = re.compile(r"MPS client have been exhausted|MpsMaxClients|MpsMaxConnections|"
                        r"device connections have been exhausted", re.IGNORECASE)
# What an MPS client past the server's limit got on an H200 (driver 580): cudaErrorDevicesUnavailable
# (bench/results/2026-11-30-h200-hosting-mps80.json: 48 of 80 connected). Without MPS the same error means a
# GPU in exclusive-process mode, so it reads as the client limit only under MPS.
_MPS_DEVICE_UNAVAILABLE = re.compile(r"busy or unavailable|cudaErrorDevicesUnavailable", re.IGNORECASE)
_OUT_OF_MEMORY = re.compile(r"out of memory|RESOURCE_EXHAUSTED|Cannot allocate memory|MemoryError|"
                            r"CUBLAS_STATUS_ALLOC_FAILED", re.IGNORECASE)


# How many times a pool stops the workers past the MPS client cap and starts the refused ones below it again.
MAX_REFILLS = 3


class ProbeFailed(Exception):
    """A probe could not run: a worker it needed died or did not answer."""


def failure_reason(message, mps=False):
    """The search's stop reason for a worker that could not start with this error message (under MPS if
    `mps`)."""
    if _MPS_LIMIT.search(message) or (mps and _MPS_DEVICE_UNAVAILABLE.search(message)):
        return "mps_client_limit"
    if _OUT_OF_MEMORY.search(message):
        return "memory"
    return "worker_failed"


def group_slots(specs, per_proc):
    """specs (slot dicts) -> lists of at most per_proc specs, as few distinct (kind, batch) per list as the
    sizes allow: sorted by (kind, batch, id), then cut."""
    ordered = sorted(specs, key=lambda s: (s["kind"], s["batch"], s["id"]))
    return [ordered[i:i + per_proc] for i in range(0, len(ordered), per_proc)]


def can_start_idle():
    """Whether workers may start under SCHED_IDLE: only when they may leave it again (CAP_SYS_NICE; root has
    it) and chrt(1) is there."""
    return hasattr(os, "sched_setscheduler") and os.geteuid() == 0 and shutil.which("chrt") is not None


def run_normally(pid, nice):
    """Puts every thread of process `pid` under the normal policy (SCHED_OTHER) at niceness `nice` (Linux:
    both are per thread; a new thread takes its creator's)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except (OSError, ValueError):
            pass  # the thread ended meanwhile


class WorkerProc(bc.JsonLinesWorker):
    """One worker.py process hosting the models `specs`; state: preparing, ready or failed."""

    def __init__(self, specs, backend, args, endpoint, env, idle):
        self.ids = [s["id"] for s in specs]
        self.specs = specs
        self.state = "preparing"
        self.info = None
        self.error = None
        self.started = time.monotonic()
        self.ready_s = None
        self.idle = False
        cmd = [sys.executable, WORKER, f"--backend={backend}", f"--device={args.device}",
               f"--models={json.dumps(specs, separators=(',', ':'))}"]
        if endpoint:
            cmd.append(f"--endpoint={endpoint}")
        if args.small:
            cmd.append("--small")
        if idle:
            cmd = ["chrt", "--idle", "0", *cmd, f"--serve_nice={os.getpriority(os.PRIO_PROCESS, 0)}"]
        self.idle = bool(idle)
        super().__init__(cmd, f"hosting worker {self.ids[:4]}{'...' if len(self.ids) > 4 else ''}", env,
                         lambda message, fatal: ProbeFailed(message))

    def poll(self):
        """Takes the worker's pending events without waiting: ready, or an error / exit while preparing."""
        while self.state == "preparing":
            try:
                got = self.events.get_nowait()
            except Exception:  # queue.Empty
                return
            if got.get("event") == "ready":
                self.state, self.info = "ready", got
                self.ready_s = time.monotonic() - self.started
            elif got.get("event") == "error":
                self.state, self.error = "failed", got.get("message", "error")
            elif got.get("event") == "exit":
                self.state, self.error = "failed", f"exited (code {self.proc.poll()}) before it was ready"

    def send_signal(self, sig):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except OSError:
                pass

    def terminate(self):
        self.send_signal(signal.SIGTERM)
        self.send_signal(signal.SIGCONT)  # a paused worker acts on SIGTERM only once it runs again


def stop_workers(workers, timeout=15.0):
    """Stops workers side by side: quit to the ready ones, SIGTERM to the others; SIGKILL after `timeout`."""
    for w in workers:
        if w.proc.poll() is not None:
            continue
        if w.state == "ready":
            try:
                w.send({"cmd": "quit"})
            except ProbeFailed:
                pass
        else:
            w.terminate()
    deadline = time.monotonic() + timeout
    for w in workers:
        try:
            w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()
        try:
            w.proc.stdin.close()
        except OSError:
            pass
        bc.forget_pid(w.proc.pid)


class Pool:
    """The worker processes of one mode. Worker lists are grouped by spec for tandem (per_proc > 1)."""

    def __init__(self, backend, args, specs, endpoint=None, env=None, per_proc=1, idle=False, log=bc.log,
                 mps=False):
        self.backend, self.args, self.specs = backend, args, specs
        self.endpoint, self.env, self.per_proc, self.idle, self.mps = endpoint, env, per_proc, idle, mps
        self.workers = []
        self.failures = []  # (first slot, reason, message) of workers that could not start
        self.client_cap = None  # (models, message): the clients the MPS server took when it refused one
        self.refills = 0
        self.solo_ms = {}
        self.log = log
        self.serve_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.started_total = 0
        self.killed_total = 0

    # ---- coverage ----

    def _hosted(self, states):
        """The slots of the workers in `states`."""
        return {i for w in self.workers if w.state in states for i in w.ids}

    @staticmethod
    def _first_missing(hosted):
        n = 0
        while n in hosted:
            n += 1
        return n

    def _first_unhosted(self, states):
        return self._first_missing(self._hosted(states))

    def covered(self):
        """Slots 0..covered()-1 are hosted by workers that are ready or still preparing."""
        return self._first_unhosted(("ready", "preparing"))

    def ready_count(self):
        """Slots 0..ready_count()-1 are hosted by ready workers."""
        return self._first_unhosted(("ready",))

    def preparing(self):
        self.poll()
        return [w for w in self.workers if w.state == "preparing"]

    def cap_from_failure(self):
        """(count, reason, message): the pool hosts at most `count` models because the worker of slot `count`
        could not start, or (under MPS) because the server took no more than `count` models' clients; None while
        none failed. A client the MPS server refused caps nothing by its slot until the refills are spent."""
        caps = [f for f in self.failures if f[1] != "mps_client_limit" or self.refills >= MAX_REFILLS]
        if self.client_cap:
            caps.append((self.client_cap[0], "mps_client_limit", self.client_cap[1]))
        return min(caps) if caps else None

    def _settle_client_cap(self):
        """Once the MPS server refused a client and no worker is still starting, it holds as many clients as
        there are ready workers: that many models is the cap."""
        refused = [f for f in self.failures if f[1] == "mps_client_limit"]
        if self.client_cap or not refused or any(w.state == "preparing" for w in self.workers):
            return
        self.client_cap = (sum(len(w.ids) for w in self.workers if w.state == "ready"), refused[0][2])

    def _refill_below_client_cap(self):
        """Stops the workers of slots at or past the client cap and forgets the refused ones below it, so that
        spawn() starts those again in the clients freed; whether it did (at most MAX_REFILLS times)."""
        cap = self.client_cap[0]
        refused = [w for w in self.workers if w.state == "failed" and min(w.ids) < cap and
                   failure_reason(w.error, self.mps) == "mps_client_limit"]
        if not refused or self.refills >= MAX_REFILLS:
            return False
        self.refills += 1
        beyond = [w for w in self.workers if w.state in ("ready", "preparing") and min(w.ids) >= cap]
        if beyond:
            stop_workers(beyond, timeout=5)
            self.killed_total += len(beyond)
        self.workers = [w for w in self.workers if w not in beyond and w not in refused]
        again = {min(w.ids) for w in refused}
        self.failures = [f for f in self.failures if not (f[1] == "mps_client_limit" and f[0] in again)]
        self.log(f"    MPS took {cap} clients: stopped {len(beyond)} worker(s) past them, starting the "
                 f"{len(refused)} refused below them again")
        return True

    # ---- starting ----

    def spawn(self, n, idle=None):
        """Starts workers (without waiting for them) so that slots 0..n-1 are hosted, below any failure's cap;
        under SCHED_IDLE if `idle` (default: the pool's setting)."""
        idle = self.idle if idle is None else idle and self.idle
        limit = self.cap_from_failure()
        n = min(n, len(self.specs), limit[0] if limit else len(self.specs))
        hosted = self._hosted(("ready", "preparing"))
        first = self._first_missing(hosted)  # covered()
        if n <= first:
            return 0
        missing = [s for s in self.specs[first:n] if s["id"] not in hosted]
        groups = (group_slots(missing, self.per_proc) if self.per_proc > 1 else [[s] for s in missing])
        for g in groups:
            self.workers.append(WorkerProc(g, self.backend, self.args, self.endpoint, self.env, idle))
        self.started_total += len(groups)
        self.log(f"    starting {len(groups)} worker(s) for models {first}..{n - 1}")
        return len(groups)

    def poll(self):
        for w in self.workers:
            if w.state != "preparing":
                continue
            w.poll()
            if w.state == "ready":
                for m in w.info.get("models", []):
                    self.solo_ms[m["id"]] = m.get("solo_ms")
            elif w.state == "failed":
                reason = failure_reason(w.error, self.mps)
                self.failures.append((min(w.ids), reason, w.error))
                self.log(f"    worker of models {min(w.ids)}.. could not start ({reason}): {w.error[-300:]}")
                stop_workers([w], timeout=5)
        self._settle_client_cap()

    def wait_ready(self, n, deadline):
        """Waits until slots 0..n-1 are hosted by ready workers: "ready"; "capped" when a worker of one of them
        failed (cap_from_failure() says where); "budget" when time.monotonic() reached `deadline` first."""
        self.spawn(n)
        started = time.monotonic()
        while True:
            self.poll()
            for w in self.workers:
                if w.state == "preparing" and w.idle and min(w.ids) < n:
                    run_normally(w.proc.pid, self.serve_nice)  # due now; no probe runs while we wait
                    w.idle = False
            if self.client_cap and self._refill_below_client_cap():
                self.spawn(n)
            limit = self.cap_from_failure()
            if limit and limit[0] < n:
                # The cap is the lowest failing slot: a worker of a lower slot still starting may fail too (under
                # load a later worker's failure can be seen first).
                settled = all(w.state != "preparing" for w in self.workers if min(w.ids) < limit[0])
                if settled or time.monotonic() >= deadline:
                    return "capped"
            if self.ready_count() >= n:
                waited = time.monotonic() - started
                if waited > 0.5:
                    self.log(f"    models 0..{n - 1} ready after {waited:.1f} s more")
                return "ready"
            if time.monotonic() >= deadline:
                return "budget"
            time.sleep(0.05)

    def pause_preparing(self):
        """Stops (SIGSTOP) every worker still starting, so that a probe runs without them; resume() them after."""
        paused = self.preparing()
        for w in paused:
            w.send_signal(signal.SIGSTOP)
        return paused

    def resume(self, paused):
        for w in paused:
            w.send_signal(signal.SIGCONT)

    def kill_preparing(self):
        """Stops every worker still starting (they host slots beyond every probe to come); their count."""
        doomed = self.preparing()
        if doomed:
            stop_workers(doomed, timeout=5)
            self.workers = [w for w in self.workers if w not in doomed]
            self.killed_total += len(doomed)
        return len(doomed)

    # ---- running ----

    def go(self, n, cmd):
        """Runs slots 0..n-1 with `cmd`; their stats, in slot order. A worker that dies or does not answer is
        stopped and counted as failed (the pool's cap falls below its first slot) and ProbeFailed raised."""
        active = [w for w in self.workers if w.state == "ready" and min(w.ids) < n]
        deadline = time.monotonic() + (cmd["start_at"] - time.time()) + cmd["warmup_s"] + cmd["duration_s"] + \
            cmd["grace_s"] + 60
        models, failed = [], None
        for w in active:
            try:
                w.send({**cmd, "ids": [i for i in w.ids if i < n]})
            except ProbeFailed as e:
                failed = failed or (w, str(e))
        for w in active:
            if failed and failed[0] is w:
                continue
            try:
                models += w.expect("done", deadline)["models"]
            except ProbeFailed as e:
                failed = failed or (w, str(e))
                break
        if failed:
            w, message = failed
            w.state, w.error = "failed", message
            self.failures.append((min(w.ids), failure_reason(message, self.mps), message))
            stop_workers([w], timeout=5)
            raise ProbeFailed(message)
        return sorted(models, key=lambda m: m["id"])

    def ready_pids(self):
        """The process ids of the ready workers."""
        return [w.proc.pid for w in self.workers if w.state == "ready"]

    def go_notes(self):
        """What the hosts said about the last go beyond the models' numbers: nothing, for worker processes."""
        return {}

    def summary(self):
        """What starting the workers took: counts, seconds from start to ready, and the tandem captures."""
        ready = [w for w in self.workers if w.state == "ready"]
        secs = sorted(w.ready_s for w in ready)
        out = {"workers_started": self.started_total, "workers_ready": len(ready),
               "workers_stopped_unused": self.killed_total, "workers_failed": len(self.failures),
               "ready_s_median": round(secs[len(secs) // 2], 2) if secs else None,
               "ready_s_max": round(secs[-1], 2) if secs else None}
        if any("captures" in (w.info or {}) for w in ready):
            out["captures"] = sum(w.info.get("captures", 0) for w in ready)
            out["capture_s"] = round(sum(w.info.get("capture_s", 0.0) for w in ready), 2)
            out["models_ready"] = sum(len(w.ids) for w in ready)
            checks = [c for w in ready for c in w.info.get("checks", [])]
            if checks:
                out["weight_checks"] = len(checks)
                out["weight_check_max_rel_diff"] = max(c["max_rel_diff"] for c in checks)
        if self.client_cap:
            out["mps_client_cap"], out["mps_refills"] = self.client_cap[0], self.refills
        if self.failures:
            out["failures"] = [{"first_slot": f[0], "reason": f[1], "message": f[2][-500:]}
                               for f in sorted(self.failures)[:5]]
        return out

    def close(self):
        stop_workers(self.workers)
        self.workers = []
