"""What the trace benchmarks share: job specs captured once, a pool of job worker processes (trace_worker.py),
solo calibration, the replay of a list of jobs against one tandemd and summary statistics (jct.py, sweep.py);
daemons, flags and plotting (all three, qos.py too).

A job spec is a training step captured by the PyTorch adaptor and saved as a folder that a worker loads without
torch (see trace_worker.py). Captures are cached in --spec_dir, so the programs of one run_traces.sh call
capture each model once.

Timekeeping: every time is time.monotonic() of this machine, shared by all processes. A job's arrival is its
planned time on the trace's clock (t0 + arrival_s); its JCT runs from there to the completion of its last
iteration as the client sees it.

Nothing here is thread-safe beyond the pool's reader threads; the programs use it from their main thread.
"""

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "models"))

import bench_common as bc  # noqa: E402  (puts the tandem package and examples/pytorch on sys.path)
import numpy as np  # noqa: E402

WORKER = os.path.join(HERE, "trace_worker.py")
SPEC_FORMAT = 1


# ---- job specs ----

def spec_path(spec_dir, model, small):
    return os.path.join(spec_dir, f"{model}{'-small' if small else ''}")


def save_job_spec(spec_dir, model, small, batch_count=2):
    """Captures `model`'s training step (SGD with momentum, the reference sizes or tiny) and saves it as a spec
    folder; returns (folder, capture seconds, or None when it was cached)."""
    folder = spec_path(spec_dir, model, small)
    with _spec_lock(spec_dir, folder):
        return _save_job_spec_locked(folder, model, small, batch_count)


def offer_job_spec(spec_dir, model, small, capture, lowered, batches, capture_s):
    """Saves a capture another program already made (of bc.build_model(model, small) with bc.sgd, on
    bc.make_batches' batches) as `model`'s spec folder, unless one exists: later stages of the run then register
    it without capturing again. Returns the folder."""
    folder = spec_path(spec_dir, model, small)
    with _spec_lock(spec_dir, folder):
        if not _has_spec(folder):
            _write_job_spec(folder, model, small, capture, lowered, batches, capture_s)
    return folder


@contextlib.contextmanager
def _spec_lock(spec_dir, folder):
    """Processes of one run (pair and QoS workers side by side) capture a model once: the first holds the lock
    while it captures, the others then find its folder."""
    import fcntl
    os.makedirs(spec_dir, exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _has_spec(folder):
    meta_file = os.path.join(folder, "meta.json")
    if not os.path.exists(meta_file):
        return False
    with open(meta_file) as f:
        return json.load(f).get("format") == SPEC_FORMAT


def _save_job_spec_locked(folder, model, small, batch_count):
    import tandem.torch
    if _has_spec(folder):
        return folder, None
    m, loss_fn, make_batch = bc.build_model(model, small)
    batches = bc.make_batches(make_batch, batch_count)
    optimizer = bc.sgd(m.parameters())
    start = time.perf_counter()
    capture, lowered = tandem.torch.capture_training_job(m, loss_fn, optimizer, batches[0])
    capture_s = time.perf_counter() - start
    _write_job_spec(folder, model, small, capture, lowered, batches, capture_s)
    return folder, capture_s


def _write_job_spec(folder, model, small, capture, lowered, batches, capture_s):
    arrays = {}
    for i, (_, t) in enumerate(lowered.persistent):
        arrays[f"p{i}"] = t.detach().cpu().contiguous().numpy()
    for k, batch in enumerate(batches):
        for j, t in enumerate(batch):
            arrays[f"b{k}_{j}"] = t.detach().cpu().contiguous().numpy()
    meta = {
        "format": SPEC_FORMAT, "model": model, "small": small, "loss_name": lowered.fetch_names["loss"],
        "persistent": [n for n, _ in lowered.persistent], "batch_names": list(capture.batch_names),
        "batch_count": len(batches), "scalar_names": capture.plan.scalar_names(),
        "scalar_values": capture.plan.scalar_values(advance=False), "capture_s": round(capture_s, 3),
        "persistent_bytes": int(sum(a.nbytes for k, a in arrays.items() if k.startswith("p"))),
    }
    tmp = f"{folder}.tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    np.savez(os.path.join(tmp, "arrays.npz"), **arrays)
    with open(os.path.join(tmp, "graph.json"), "w") as f:
        json.dump(lowered.graph, f)
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f)
    if os.path.exists(folder):  # an older format
        import shutil
        shutil.rmtree(folder)
    os.replace(tmp, folder)


# ---- the worker pool ----

class WorkerFailed(Exception):
    """A worker is gone or did not answer in time."""


class WorkerPool:
    """Job worker processes (trace_worker.py), one per job slot; events of all of them on one queue."""

    def __init__(self, size, env=None):
        self.size = size
        self.env = env
        self.events = queue.Queue()
        self.backlog = []
        self.procs = [None] * size
        self.loaded = [set() for _ in range(size)]
        self._run_id = 0
        for i in range(size):
            self._start(i)

    def _start(self, i):
        proc = subprocess.Popen([sys.executable, WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=self.env, text=True, bufsize=1)
        bc.record_pid(proc.pid, f"trace worker {i}")
        self.procs[i] = proc
        self.loaded[i] = set()
        threading.Thread(target=self._read, args=(i, proc), daemon=True).start()

    def _read(self, i, proc):
        for line in proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                self.events.put((i, proc.pid, json.loads(line)))
            except json.JSONDecodeError:
                print(f"  [worker {i}] {line}", file=sys.stderr, flush=True)
        self.events.put((i, proc.pid, {"event": "exit"}))

    def send(self, i, obj):
        try:
            self.procs[i].stdin.write(json.dumps(obj) + "\n")
            self.procs[i].stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerFailed(f"worker {i} is gone ({e})")

    def next_run_id(self):
        self._run_id += 1
        return self._run_id

    def next_event(self, timeout):
        """(worker, event) or None after `timeout` s; events of replaced processes are dropped."""
        if self.backlog:
            return self.backlog.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                i, pid, event = self.events.get(timeout=left)
            except queue.Empty:
                return None
            if self.procs[i] is not None and self.procs[i].pid == pid:
                return i, event

    def expect(self, i, names, timeout):
        """The next event of worker i named in `names`; other workers' events wait in the backlog."""
        deadline = time.monotonic() + timeout
        kept = []
        try:
            while True:
                got = self.next_event(max(0.0, deadline - time.monotonic()))
                if got is None:
                    raise WorkerFailed(f"worker {i}: no {'/'.join(names)} within {timeout:.0f} s")
                if got[0] == i and got[1].get("event") in names:
                    return got[1]
                if got[0] == i and got[1].get("event") == "exit":
                    raise WorkerFailed(f"worker {i} exited (code {self.procs[i].poll()})")
                kept.append(got)
        finally:
            self.backlog = kept + self.backlog

    def load(self, assignments, timeout=120):
        """assignments: {worker: spec folder}; every worker loads its spec (all at once)."""
        todo = {i: s for i, s in assignments.items() if s not in self.loaded[i]}
        for i, s in todo.items():
            self.send(i, {"cmd": "load", "spec": s})
        for i, s in todo.items():
            ev = self.expect(i, ("loaded", "failed"), timeout)
            if ev["event"] == "failed":
                raise WorkerFailed(f"worker {i} could not load {s}: {ev['message']}")
            self.loaded[i].add(s)

    def restart(self, i):
        """Replaces worker i (gone, or stuck in a call that will not return): kills it, starts a fresh one."""
        proc = self.procs[i]
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            bc.forget_pid(proc.pid)
        self._start(i)

    def close(self, grace_s=5.0):
        """Asks every worker to quit, gives them grace_s together, then kills the ones left."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                try:
                    proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                    proc.stdin.flush()
                except OSError:
                    pass
        deadline = time.monotonic() + grace_s
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            bc.forget_pid(proc.pid)
            self.procs[i] = None


# ---- calibration: each model alone ----

def calibrate(pool, worker, endpoint, spec, name, warmup_iters=5, timed_s=1.0, depth=2, timeout=90):
    """The job alone on `endpoint` (worker's calibrate event): registration seconds, time to the first result, and
    wall / device / queue ms per iteration over timed_s after warmup_iters."""
    run = pool.next_run_id()
    pool.send(worker, {"cmd": "calibrate", "run": run, "endpoint": endpoint, "name": name, "spec": spec,
                       "warmup_iters": max(1, warmup_iters), "timed_s": timed_s, "depth": depth})
    ev = pool.expect(worker, ("calibrated", "failed"), timeout)
    if ev["event"] == "failed":
        raise RuntimeError(ev["message"])
    return ev


# ---- replay ----

def replay(pool, daemon, jobs, deadline_s, sequential=False, log_prefix="  "):
    """Runs `jobs` against `daemon` (a running bench_common.Daemon); returns one result per job, in the jobs'
    order, and t0, the trace's start on the monotonic clock.

    jobs: [{"worker", "spec", "name", "iterations", "arrival_s", "hints", "lr"?, "depth"?}]. Each job is sent to
    its worker at t0 + arrival_s (sequential: when the job before it has ended, arrivals ignored). After
    deadline_s seconds every job still running is told to stop; a worker that does not answer within 20 s more
    is replaced (its result says so). If the daemon exits, the jobs still running fail
    at once and their workers are replaced: the client library would wait for the daemon's answer for a day."""
    endpoint = daemon.endpoint
    t0 = time.monotonic() + 0.05
    order = sorted(range(len(jobs)), key=lambda k: (0 if sequential else jobs[k]["arrival_s"], k))
    results = [None] * len(jobs)
    running = {}  # run id -> job index
    arrival = {}  # job index -> planned (or, sequential, actual) arrival on the monotonic clock
    next_k = 0
    stop_sent_at = None
    while True:
        now = time.monotonic()
        # Arrivals that are due.
        while next_k < len(order) and stop_sent_at is None:
            k = order[next_k]
            if sequential:
                if running:
                    break
                due = now
            else:
                due = t0 + jobs[k]["arrival_s"]
                if due > now:
                    break
            job = jobs[k]
            run = pool.next_run_id()
            cmd = {"cmd": "run", "run": run, "endpoint": endpoint, "name": job["name"], "spec": job["spec"],
                   "iterations": int(job["iterations"]), "hints": job.get("hints") or {},
                   "depth": job.get("depth", 2)}
            if job.get("lr") is not None:
                cmd["lr"] = job["lr"]
            arrival[k] = due
            try:
                pool.send(job["worker"], cmd)
            except WorkerFailed as e:
                results[k] = {"error": str(e)}
                next_k += 1
                continue
            running[run] = k
            next_k += 1
        if next_k >= len(order) and not running:
            break
        if not daemon.alive():
            bc.log(f"{log_prefix}tandemd exited: {len(running)} running job(s) fail, {len(order) - next_k} not "
                   f"started; its log ends:\n{daemon.log_tail(1500)}")
            for run, k in list(running.items()):
                results[k] = {"error": "tandemd exited"}
                pool.restart(jobs[k]["worker"])
            for k in order[next_k:]:
                results[k] = {"error": "not started: tandemd exited"}
            break
        if stop_sent_at is None and now - t0 > deadline_s:
            bc.log(f"{log_prefix}deadline ({deadline_s:.0f} s): stopping {len(running)} running job(s); "
                   f"{len(order) - next_k} not started")
            for run, k in running.items():
                try:
                    pool.send(jobs[k]["worker"], {"cmd": "stop", "run": run})
                except WorkerFailed:
                    pass
            for k in order[next_k:]:
                results[k] = {"error": "not started: deadline"}
            next_k = len(order)
            stop_sent_at = now
        if stop_sent_at is not None and now - stop_sent_at > 20:
            for run, k in list(running.items()):
                results[k] = {"error": "no answer after the stop; worker replaced"}
                pool.restart(jobs[k]["worker"])
                del running[run]
            break
        wake = 0.5
        if next_k < len(order) and not sequential and stop_sent_at is None:
            wake = min(wake, max(0.0, t0 + jobs[order[next_k]]["arrival_s"] - time.monotonic()))
        got = pool.next_event(wake)
        if got is None:
            continue
        i, ev = got
        if ev.get("event") == "exit":
            for run, k in list(running.items()):
                if jobs[k]["worker"] == i:
                    results[k] = {"error": f"worker {i} exited"}
                    del running[run]
            pool.restart(i)
            continue
        run = ev.get("run")
        if run not in running:
            continue
        k = running.pop(run)
        results[k] = _job_result(jobs[k], ev, arrival[k], t0)
        r = results[k]
        if "error" in r:
            bc.log(f"{log_prefix}{jobs[k]['name']}: FAILED: {r['error']}")
        else:
            bc.log(f"{log_prefix}{jobs[k]['name']}: {r['iterations']} iterations, JCT {r['jct_s']:.2f} s "
                   f"({r['device']} lane {r['lane']}){' STOPPED' if r['stopped'] else ''}")
    return results, t0


def _job_result(job, ev, arrival, t0):
    if ev.get("event") != "finished":
        return {"error": ev.get("message", str(ev))}
    times = ev["times"]

    def rel(t):
        return None if t is None else round(t - t0, 4)

    end = ev["last_done"] if ev["last_done"] is not None else times.get("trained")
    return {
        "arrival_s": rel(arrival), "registered_s": rel(times.get("registered")),
        "first_done_s": rel(ev["first_done"]), "finish_s": rel(end), "closed_s": rel(times.get("closed")),
        "jct_s": round(end - arrival, 4), "register_s": round(times["registered"] - times["received"], 4),
        "iterations": ev["iterations"], "stopped": ev["stopped"], "device_s": ev["device_s"],
        "queue_s": ev["queue_s"], "lane": ev["lane"], "device": ev.get("device", ""),
        "first_loss": ev["first_loss"], "last_loss": ev["last_loss"],
    }


# ---- statistics ----

def summary(values):
    """mean, median, p90 (linear interpolation between order statistics, numpy's default) and max."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    a = np.asarray(v, dtype=float)
    return {"n": len(v), "mean": round(float(a.mean()), 4), "median": round(float(np.median(a)), 4),
            "p90": round(float(np.percentile(a, 90)), 4), "max": round(float(a.max()), 4)}


def fitting(names, importance, left_s, min_s, at_least=1):
    """The runs of `names` (in their order) that a budget with left_s seconds holds at min_s each, the most
    important first (`importance`: names, most important first); all of them when the budget is unlimited."""
    if left_s == float("inf"):
        return list(names)
    count = max(at_least, min(len(names), int(left_s // min_s)))
    rank = {n: k for k, n in enumerate(importance)}
    chosen = set(sorted(names, key=lambda n: rank.get(n, len(rank)))[:count])
    return [n for n in names if n in chosen]


def release(daemon, pool, scratch_spec_dir=None):
    """Stops what a trace program holds (each may be None); removes its own spec folder, if it made one."""
    if daemon is not None:
        daemon.stop()
    if pool is not None:
        pool.close()
    if scratch_spec_dir:
        shutil.rmtree(scratch_spec_dir, ignore_errors=True)


def start_daemon(args, policy, name, extra=()):
    flags = bc.daemon_flags_for_large_models() + list(extra)
    return bc.Daemon(bc.find_tandemd(args.tandemd), args.device, policy, flags, args.log_dir, name).start()


def add_common_flags(p):
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="the daemon's device (auto: cuda when torch sees a GPU)")
    p.add_argument("--small", action="store_true", help="tiny models and a shorter trace (CPU smoke test)")
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--log_dir", default=None, help="where tandemd's logs go (default: a temporary folder)")
    p.add_argument("--spec_dir", default=None,
                   help="cache of captured job specs, shared between programs (default: a temporary folder)")
    p.add_argument("--budget_s", type=float, default=0, help="total wall-clock budget; 0: none")
    p.add_argument("--out", default=None, help="JSON file to write (required unless --replot)")
    p.add_argument("--replot", default=None, metavar="JSON", help="only draw the plot of a JSON file written earlier")
    p.add_argument("--plot", default=None, help="PNG file to draw (default: --out with .png)")


def device_of(args):
    """The daemon's device flag value and the device for the metadata."""
    return bc.torch_device(args.device)


def plot_path(args):
    return args.plot or os.path.splitext(args.out)[0] + ".png"


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw(plot_fn, result, path):
    """Draws the PNG; 0, or 1 when drawing failed. Without matplotlib it says how to draw it later (--replot)
    and counts as success: the JSON is the result."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        bc.log(f"matplotlib is not installed here: no {path}; draw it elsewhere with "
               f"`{os.path.basename(sys.argv[0])} --replot <json> --plot {os.path.basename(path)}`")
        return 0
    try:
        plot_fn(result, path)
    except Exception as e:  # the JSON is what counts
        bc.log(f"plot failed: {e}")
        return 1
    bc.log(f"wrote {path}")
    return 0


def replot(plot_fn, json_path, png_path):
    """--replot: draws the PNG of a JSON file written earlier."""
    with open(json_path) as f:
        result = json.load(f)
    return draw(plot_fn, result, png_path or os.path.splitext(json_path)[0] + ".png")
