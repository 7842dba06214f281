#!/usr/bin/env python3
"""A client process of the hosting benchmark (bench/inference/hosting.py starts it; not meant to be run by hand).

It hosts one or more models (--models, a JSON list of {id, kind, batch}); each gets its own thread and, on
"go", its own open-loop Poisson request stream.

  --backend torch   each model runs in this process with PyTorch eager on --device: input copied to the device,
                    forward under inference_mode, output copied back to the host (the time-slicing and MPS
                    modes; for MPS the coordinator starts this process with the MPS pipe folder in its
                    environment)
  --backend tandem  each model is a tandem.torch.ServedModel (its own session and job, with its own weights)
                    of the tandemd at --endpoint; each distinct (kind, batch) is captured and lowered once
                    and registered for every model of that spec (tandem.torch.serve_lowered), and the last
                    model of each spec is checked against its own eager forward on the CPU ("checks");
                    this process never touches the GPU itself

Latency is the client's wall time from a request's scheduled arrival to its result on the host, so a request
that waits behind its model's previous one counts the wait (no coordinated omission); a request whose
thread slept until its arrival counts from the moment the thread woke (the sleep's overshoot is the load
generator's, not the server's). One request per model is in flight at a time: a model's stream is a FIFO queue
in front of one server, in every mode alike. The server mode's process (model_server.py) takes the streams
(arrival_times), their accounting (StreamRecord) and the solo timing (solo_ms) from here.

--serve_nice V: the process was started under SCHED_IDLE so that its start-up takes CPU time only from idle
cores; once ready it puts every thread under the normal policy at niceness V (the coordinator's), so that
serving competes on equal terms.

Protocol (JSON lines). Events on stdout: {"event": "ready", "import_s", "prepare_s", "models": [{id, solo_ms}],
and for tandem "captures", "capture_s", "checks": [{id, kind, batch, max_rel_diff}]} once;
{"event": "done", "models": [stats...]} after each go; {"event": "error", "message"}. Commands on stdin:
{"cmd": "go", "ids", "start_at" (time.time() epoch), "warmup_s", "duration_s", "rate", "grace_s", "seed",
"slow_ms" (optional: each model's stats list when its requests slower than this arrived, "slow_at_s")},
{"cmd": "quit"} (or end of input).
"""

import time

IMPORT_START = time.perf_counter()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))
sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
import torch  # noqa: E402

import inference_models  # noqa: E402
from hosting_pool import run_normally  # noqa: E402

SOLO_REQUESTS = 10  # timed alone after the warm-up, reported as solo_ms
WARMUP_REQUESTS = 5


def solo_ms(call):
    """The median milliseconds of SOLO_REQUESTS calls of `call` alone, after WARMUP_REQUESTS untimed ones."""
    for _ in range(WARMUP_REQUESTS):
        call()
    times = []
    for _ in range(SOLO_REQUESTS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    times.sort()
    return round(times[len(times) // 2] * 1e3, 4)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve_commands(handlers):
    """Reads JSON commands from standard input, one per line, until {"cmd": "quit"} or the end of input; runs
    handlers[cmd["cmd"]](cmd) for each, and answers an unknown command with an error event."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            break
        handler = handlers.get(cmd.get("cmd"))
        if handler is None:
            emit({"event": "error", "message": f"unknown command {cmd.get('cmd')!r}"})
        else:
            handler(cmd)


def log(*parts):
    print("  [worker]", *parts, file=sys.stderr, flush=True)


class Hosted:
    """One model and how to send it one request (call() returns the output on the host). With backend tandem,
    `lowered` is (capture, lowered graph) of the model's spec from tandem.torch.capture_serving(): the model is
    registered with its own weights, without capturing again."""

    def __init__(self, spec, backend, device, endpoint, small, built=None, lowered=None):
        self.spec = spec
        model, x = built or inference_models.build(spec["kind"], spec["batch"], small, seed=1000 + spec["id"])
        self.x = x
        self.info = {"id": spec["id"]}
        if backend == "tandem":
            import tandem.torch
            self.model = model  # kept for the check against eager PyTorch
            self.served = tandem.torch.serve_lowered(*lowered, model=model, endpoint=endpoint,
                                                     name=f"m{spec['id']}-{spec['kind']}-b{spec['batch']}",
                                                     device=device)
            self.call = lambda: self.served(self.x)
        else:
            self.served = None
            self.model = model.to(device)
            self.device = device
            self.call = self._torch_call

    def daemon_seconds(self):
        """(queue, run) seconds of the last call by tandemd's account; None for the torch backend."""
        if self.served is None or self.served.queue_seconds is None:
            return None
        return self.served.queue_seconds, self.served.run_seconds

    def _torch_call(self):
        with torch.inference_mode():
            return self.model(self.x.to(self.device)).cpu()

    def warm_up(self):
        self.info["solo_ms"] = solo_ms(self.call)

    def check(self):
        """max |served - eager| / max |eager| of this model's output on its input (eager on the CPU)."""
        with torch.no_grad():
            ref = self.model(self.x)
        out = self.served(self.x)
        return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12))

    def close(self):
        if self.served is not None:
            try:
                self.served.close()
            except Exception as e:  # the daemon may be gone
                log(f"closing model {self.spec['id']}: {e}")


def percentile(sorted_values, q):
    """Nearest rank; +inf entries stand for requests that were never sent."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


class LatencySplit:
    """Where timed requests' latency went, summed: waiting in the client behind the model's previous request
    ("behind", from the scheduled arrival to the call), and of the call itself the daemon's queue ("queue":
    waiting for its turn in tandemd) and device time ("run"), and the rest ("other": the client library, the
    transport, the copies). The daemon's parts are known for the tandem backend only; for torch, the whole
    call is "other". The one-process server (model_server.py) has no client side: "behind" is a request's wait
    for its model's previous one inside the server, "queue" its wait in the server's queue for a thread, "run"
    unknown (0) and "other" the serving itself (copies, graph replay, the wait for the stream)."""

    PARTS = ("behind", "queue", "run", "other")

    def __init__(self):
        self.n = 0
        self.sums = dict.fromkeys(self.PARTS, 0.0)

    def add(self, behind, call, daemon):
        """behind, call: seconds; daemon: (queue, run) seconds of the call by the server's account, or None."""
        queue, run = daemon if daemon is not None else (0.0, 0.0)
        self.n += 1
        for part, v in zip(self.PARTS, (behind, queue, run, max(0.0, call - queue - run))):
            self.sums[part] += v

    def means_ms(self):
        """{"requests": n, part: mean ms}, or None without requests."""
        if self.n == 0:
            return None
        return {"requests": self.n} | {p: round(v / self.n * 1e3, 4) for p, v in self.sums.items()}


def arrival_times(go, model_id):
    """The arrivals of one model's requests in a go, in seconds from the stream's start: a Poisson process of
    go["rate"] over go["warmup_s"] + go["duration_s"], seeded by go["seed"] and the model, so that every mode
    sends a model the same requests."""
    rng = random.Random(int(go["seed"]) * 1000003 + model_id)
    arrivals, t = [], rng.expovariate(go["rate"])
    while t < go["warmup_s"] + go["duration_s"]:
        arrivals.append(t)
        t += rng.expovariate(go["rate"])
    return arrivals


class StreamRecord:
    """How one model's requests of one go ended: served (latency and its LatencySplit), failed, or never sent.
    Only requests that arrived after the warm-up count (a failure's message is kept either way). Not
    thread-safe: one thread at a time records a model's requests."""

    def __init__(self, spec, go):
        self.spec = spec
        self.warmup = go["warmup_s"]
        self.keep_latencies = go.get("keep_latencies")
        # When the slow requests arrived (seconds into the timed window): the coordinator lines them up across
        # models, to tell a stall of the server (many models at once) from one model's bad luck.
        self.slow_s = go.get("slow_ms", math.inf) / 1e3
        self.slow_at = []
        self.latencies, self.failures, self.dropped, self.first_error = [], 0, 0, None
        self.split_all, self.split_slow = LatencySplit(), LatencySplit()

    def served(self, arrival, latency, split):
        """A request that arrived `arrival` s into the stream took `latency` s; split: LatencySplit.add's
        arguments."""
        if arrival < self.warmup:
            return
        self.latencies.append(latency)
        self.split_all.add(*split)
        if latency > self.slow_s:
            self.split_slow.add(*split)
            if len(self.slow_at) < 100:
                self.slow_at.append(round(arrival - self.warmup, 4))

    def failed(self, arrival, error):
        self.first_error = self.first_error or error
        if arrival >= self.warmup:
            self.failures += 1

    def unsent(self, arrival):
        if arrival >= self.warmup:
            self.dropped += 1

    def stats(self):
        """The model's numbers for the "done" event; an unsent request ranks as infinitely slow."""
        latencies = sorted(self.latencies)
        ranked = latencies + [math.inf] * self.dropped
        p50, p99 = percentile(ranked, 0.5), percentile(ranked, 0.99)

        def ms(v):
            return None if v is None or math.isinf(v) else round(v * 1e3, 4)

        out = {"id": self.spec["id"], "kind": self.spec["kind"], "batch": self.spec["batch"],
               "requests": len(latencies) + self.failures + self.dropped, "completed": len(latencies),
               "failures": self.failures, "dropped": self.dropped,
               "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(latencies[-1]) if latencies else None,
               "mean_ms": ms(sum(latencies) / len(latencies)) if latencies else None,
               "latencies_ms": [round(v * 1e3, 3) for v in latencies] if self.keep_latencies else None,
               "slow_at_s": self.slow_at, "split_ms": self.split_all.means_ms(),
               "slow_split_ms": self.split_slow.means_ms()}
        if self.first_error:
            out["error"] = self.first_error
        return out


def run_stream(hosted, go, t0, out):
    """Sends hosted's requests at their scheduled times from t0 (perf_counter) on; fills out with its stats."""
    arrivals = arrival_times(go, hosted.spec["id"])
    stop_at = t0 + go["warmup_s"] + go["duration_s"] + go["grace_s"]
    record = StreamRecord(hosted.spec, go)
    for k, a in enumerate(arrivals):
        at = t0 + a
        now = time.perf_counter()
        if now < at:
            time.sleep(at - now)
            at = time.perf_counter()  # the sleep's overshoot is the load generator's, not the server's
        elif now > stop_at:  # too far behind: what is left is never sent
            for b in arrivals[k:]:
                record.unsent(b)
            break
        called = time.perf_counter()
        try:
            hosted.call()
        except Exception as e:  # a failed request is a failure of the probe, not of the worker
            record.failed(a, f"{type(e).__name__}: {e}")
            continue
        done = time.perf_counter()
        record.served(a, done - at, (max(0.0, called - at), done - called, hosted.daemon_seconds()))
    out.update(record.stats())


@contextlib.contextmanager
def no_gc_pauses():
    """No garbage collection inside, in every mode's serving processes alike: a collection pauses all of the
    process's threads (all its models' streams) at once, and the requests would count the pause as latency.
    What exists on entry is frozen out of later collections; the collector runs again on exit."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def prepare_tandem(specs, args, models):
    """Registers the tandem models of `specs` into `models` (by id; the caller closes them, also after an
    error), each (kind, batch) captured once; returns the capture stats."""
    import tandem.torch
    groups = {}
    for spec in specs:
        groups.setdefault((spec["kind"], spec["batch"]), []).append(spec)
    stats = {"captures": 0, "capture_s": 0.0, "checks": []}
    for (kind, batch), group in groups.items():
        first = inference_models.build(kind, batch, args.small, seed=1000 + group[0]["id"])
        start = time.perf_counter()
        lowered = tandem.torch.capture_serving(*first)
        stats["capture_s"] += time.perf_counter() - start
        stats["captures"] += 1
        for k, spec in enumerate(group):
            models[spec["id"]] = Hosted(spec, "tandem", args.device, args.endpoint, args.small,
                                        built=first if k == 0 else None, lowered=lowered)
        last = models[group[-1]["id"]]  # registered with weights other than the captured ones, if k > 0
        stats["checks"].append({"id": last.spec["id"], "kind": kind, "batch": batch,
                                "max_rel_diff": last.check()})
        for spec in group:
            models[spec["id"]].model = None  # the weights live in the daemon now
    stats["capture_s"] = round(stats["capture_s"], 3)
    return stats


def go(models, cmd):
    active = [models[i] for i in cmd["ids"]]
    t0 = time.perf_counter() + (cmd["start_at"] - time.time())
    results = [{} for _ in active]
    threads = [threading.Thread(target=run_stream, args=(h, cmd, t0, r), daemon=True) for h, r in zip(active, results)]
    with no_gc_pauses():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for h, r in zip(active, results):
        if "id" not in r:  # the thread died before writing its stats
            r.update({"id": h.spec["id"], "kind": h.spec["kind"], "batch": h.spec["batch"], "failures": 1,
                      "error": "the stream thread failed"})
        r["pid"] = os.getpid()  # the coordinator tells a stall of one client process from one across processes
    emit({"event": "done", "models": results})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("torch", "tandem"), required=True)
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--models", required=True, help="JSON list of {id, kind, batch}")
    p.add_argument("--small", action="store_true")
    p.add_argument("--serve_nice", type=int, default=None, help="once ready: normal policy at this niceness")
    p.add_argument("--prepare_threads", type=int, default=4,
                   help="tandem: torch CPU threads while capturing (serving uses 1)")
    args = p.parse_args()
    bc.raise_on_signals()
    import_s = time.perf_counter() - IMPORT_START
    # Many of these processes share the host's cores; a tandem worker computes on the CPU only to capture.
    torch.set_num_threads(max(1, min(args.prepare_threads, os.cpu_count() or 1)) if args.backend == "tandem"
                          else 1)
    if args.backend == "torch" and args.device == "cuda":
        bc.like_for_like_numerics()
    models = {}
    try:
        start = time.perf_counter()
        specs = json.loads(args.models)
        extra = {}
        if args.backend == "tandem":
            extra = prepare_tandem(specs, args, models)
            torch.set_num_threads(1)
        else:
            for spec in specs:
                models[spec["id"]] = Hosted(spec, args.backend, args.device, args.endpoint, args.small)
        for h in models.values():
            h.warm_up()
        if args.serve_nice is not None:
            run_normally(os.getpid(), args.serve_nice)
        emit({"event": "ready", "import_s": round(import_s, 3), "prepare_s": round(time.perf_counter() - start, 3),
              "models": [h.info for h in models.values()], **extra})
        serve_commands({"go": lambda cmd: go(models, cmd)})
    except bc.Terminated:
        pass
    except Exception as e:
        traceback.print_exc()
        emit({"event": "error", "message": f"{type(e).__name__}: {e}"})
        return 1
    finally:
        for h in models.values():
            h.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the models are closed: skip the interpreter's (and torch's) slow teardown
