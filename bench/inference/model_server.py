#!/usr/bin/env python3
"""The server mode's process of the hosting benchmark: ONE PyTorch process that holds every hosted model on
--device and serves the requests of all of them from a pool of threads, as Triton's PyTorch backend or
TorchServe would (hosting_server.py starts it; not meant to be run by hand).

Preparing a model ("load"): built as in the other modes (inference_models.build: weights and input seeded by
the slot) and moved to the device in eval mode. On CUDA its forward at its batch size becomes a CUDA graph
(GraphedModel): static input and output buffers on the device, WARMUP_FORWARDS forwards on a side stream, then
the capture on that stream under torch.no_grad, each graph in a memory pool of its own (the graphs replay side
by side on the threads' streams, so they cannot share one). A request copies its input from page-locked host
memory into the static input, replays the graph and copies the static output into a page-locked host buffer,
all on the serving thread's own stream, and waits for that stream. On the CPU there is no CUDA graph: a request
runs the eager forward under torch.inference_mode (EagerModel). EXECUTION names the two.

Serving ("go"): each model's requests arrive as in the other modes (worker.arrival_times: the same open-loop
Poisson arrivals per model and seed). One generator thread (the main one) puts each request into one FIFO
queue at its arrival; --threads serving threads take them in order. A model serves one request at a time, as
one Triton model instance does (its graph has one set of static buffers): a thread that takes a request of a
busy model parks it behind the running one, and the thread that finishes that one serves the parked ones
next, in order. A request's latency runs from its arrival to its output on the host (when the generator slept
until the arrival, from the moment it woke, as in worker.py); worker.LatencySplit says where it went. A
request that no thread starts before the window's end + grace is unsent.

The generator and the serving threads share the interpreter lock, as a Python server's front end and its
handlers do (Triton's backend is C++ and has none): the done event's "generator_late_ms" says how late the
generator put the timed requests into the queue, so that a probe shows whether the load generator kept up.

Protocol (JSON lines; "go" and "quit" as in worker.py). Events on stdout: {"event": "ready", "import_s",
"execution", "threads"} once started; per "load" {"event": "loaded", "loaded", "models": [{id, solo_ms,
graph_max_rel_diff}], "load_s", "memory", and "error" when a model could not be prepared (those before it stay
loaded, the rest of the command is skipped)}; per "go" {"event": "done", "models": [stats...], "server": {...}};
{"event": "error", "message"}. Commands on stdin: {"cmd": "load", "models": [{id, kind, batch}]}, {"cmd": "go",
"ids", ...}, {"cmd": "quit"} (or end of input).
"""

import time

IMPORT_START = time.perf_counter()

import argparse  # noqa: E402
import collections  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import queue  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))
sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
import torch  # noqa: E402

import inference_models  # noqa: E402
from hosting_memory import host_memory_mib, host_memory_of  # noqa: E402
from worker import (StreamRecord, arrival_times, emit, no_gc_pauses, percentile, serve_commands,  # noqa: E402
                    solo_ms)

# How a request runs, per device (the mode's JSON repeats it).
EXECUTION = {"cuda": "cuda_graph", "cpu": "eager"}
EXECUTION_NOTES = {"cpu": "no CUDA graph on the CPU: each request runs the eager forward under "
                          "torch.inference_mode"}
WARMUP_FORWARDS = 3
# Seconds a go waits for its last requests after the window's end + grace (they were started before it).
FINISH_S = 60.0


def log(*parts):
    print("  [model_server]", *parts, file=sys.stderr, flush=True)


def rel_diff(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-12))


class GraphedModel:
    """One model's forward at its batch size as a CUDA graph (see the module's docstring). call(stream) serves
    one request on `stream` and returns the output in page-locked host memory, which the model's next request
    overwrites: a model serves one request at a time."""

    def __init__(self, model, x, device):
        self.model = model.to(device).eval()  # the weights the graph reads
        self.host_in = x.pin_memory()
        self.static_in = x.to(device)
        self.graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(WARMUP_FORWARDS):
                eager = self.model(self.static_in)
            # capture_begin/end rather than torch.cuda.graph, which also collects garbage and empties the
            # allocator's cache before each capture: seconds over hundreds of models, for nothing here.
            self.graph.capture_begin()
            try:
                self.static_out = self.model(self.static_in)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream().wait_stream(side)
        self.host_out = torch.empty(self.static_out.shape, dtype=self.static_out.dtype, pin_memory=True)
        self.graph.replay()
        torch.cuda.synchronize()
        self.max_rel_diff = rel_diff(self.static_out, eager)  # the replay against the eager forward

    def call(self, stream):
        with torch.cuda.stream(stream):
            self.static_in.copy_(self.host_in, non_blocking=True)
            self.graph.replay()
            self.host_out.copy_(self.static_out, non_blocking=True)
        stream.synchronize()
        return self.host_out


class EagerModel:
    """One model run eagerly under torch.inference_mode on the CPU; call(stream) ignores the stream (None)."""

    max_rel_diff = None

    def __init__(self, model, x):
        self.model, self.x = model.eval(), x

    def call(self, stream):
        with torch.inference_mode():
            return self.model(self.x)


class Request:
    __slots__ = ("model", "arrival", "at", "taken")

    def __init__(self, model, arrival, at):
        self.model = model  # the model's id
        self.arrival = arrival  # seconds into the stream (its schedule)
        self.at = at  # perf_counter() its latency counts from
        self.taken = None  # perf_counter() when a serving thread took it from the queue


class ModelServer:
    """The loaded models, the FIFO queue and the serving threads (each with its own CUDA stream on CUDA).

    `models` maps a model's id to (spec, GraphedModel or EagerModel); load() adds to it and serve() runs one go;
    both are called from one thread (the main one), never at the same time. The per-go state below is guarded by
    `mu`; a model's StreamRecord is written only by the thread serving that model's request (one at a time) and,
    after the window, by the generator."""

    def __init__(self, threads, device, small, make=None):
        self.device, self.small = device, small
        self.make = make or self._prepare
        self.models = {}
        self.fifo = queue.SimpleQueue()
        self.mu = threading.Lock()
        self.busy, self.parked, self.records, self.left = set(), {}, {}, 0  # guarded by mu
        self.stop_at = math.inf
        self.finished = threading.Event()
        self.streams = [torch.cuda.Stream() if device == "cuda" else None for _ in range(threads)]
        self.load_stream = torch.cuda.current_stream() if device == "cuda" else None
        self.threads = [threading.Thread(target=self._serve, args=(s,), daemon=True) for s in self.streams]
        for t in self.threads:
            t.start()
        self.base = self._memory_now()

    # ---- loading ----

    def _prepare(self, spec):
        model, x = inference_models.build(spec["kind"], spec["batch"], self.small, seed=1000 + spec["id"])
        return GraphedModel(model, x, self.device) if self.device == "cuda" else EagerModel(model, x)

    def _memory_now(self):
        """{kind: (MiB this process holds, MiB free, MiB in all)} of the GPU (CUDA only) and the host."""
        out = {}
        host, own = host_memory_mib(), host_memory_of(os.getpid())
        if host and own is not None:
            out["host"] = (own, host[1] - host[0], host[1])
        if self.device == "cuda":
            free, total = torch.cuda.mem_get_info()
            out["gpu"] = (None, free / 2**20, total / 2**20)
        return out

    def memory(self):
        """{kind: {"models_mib": what the loaded models took since the server was ready, "free_mib",
        "total_mib"}}; the GPU's share from its free memory (what the context and the caching allocator took)."""
        now, out = self._memory_now(), {}
        for kind, (own, free, total) in now.items():
            base = self.base.get(kind)
            if base is None:
                continue
            took = own - base[0] if own is not None else base[1] - free
            out[kind] = {"models_mib": round(max(0.0, took), 1), "free_mib": round(free, 1),
                         "total_mib": round(total, 1)}
        return out

    def load(self, specs):
        """Prepares the models of `specs` in order; the "loaded" event (with "error" at the first that failed)."""
        started, infos, error = time.perf_counter(), [], None
        for spec in specs:
            try:
                served = self.make(spec)
                info = {"id": spec["id"], "solo_ms": solo_ms(lambda: served.call(self.load_stream))}
            except Exception as e:  # out of memory, most likely: the models before it stay
                traceback.print_exc()
                error = f"{type(e).__name__}: {e}"
                break
            if served.max_rel_diff is not None:
                info["graph_max_rel_diff"] = served.max_rel_diff
            self.models[spec["id"]] = (spec, served)
            infos.append(info)
        out = {"event": "loaded", "loaded": len(self.models), "models": infos,
               "load_s": round(time.perf_counter() - started, 3), "memory": self.memory()}
        if error:
            out["error"] = error
        return out

    # ---- serving ----

    def _serve(self, stream):
        while True:
            req = self.fifo.get()
            if req is None:
                return
            req.taken = time.perf_counter()
            with self.mu:
                if req.model in self.busy:
                    self.parked[req.model].append(req)
                    continue
                self.busy.add(req.model)
            while req is not None:
                self._run(req, stream)
                with self.mu:
                    parked = self.parked[req.model]
                    following = parked.popleft() if parked else None
                    if following is None:
                        self.busy.discard(req.model)
                    self._count_down(1)
                req = following

    def _count_down(self, n):
        """`n` more requests of the go ended (served, failed or unsent); requires mu."""
        self.left -= n
        if self.left <= 0:
            self.finished.set()

    def _run(self, req, stream):
        record = self.records[req.model]
        started = time.perf_counter()
        if started > self.stop_at:
            record.unsent(req.arrival)
            return
        try:
            self.models[req.model][1].call(stream)
        except Exception as e:  # a failed request is a failure of the probe
            record.failed(req.arrival, f"{type(e).__name__}: {e}")
            return
        done = time.perf_counter()
        queued = req.taken - req.at
        # behind: parked behind the model's previous request; queue: in the FIFO; other: the serving.
        record.served(req.arrival, done - req.at, (started - req.taken, queued + done - started, (queued, 0.0)))

    def serve(self, go):
        """Runs one go over the models go["ids"]: the "done" event."""
        ids = go["ids"]
        warmup = go["warmup_s"]
        t0 = time.perf_counter() + (go["start_at"] - time.time())
        schedule = sorted((a, i) for i in ids for a in arrival_times(go, i))
        with self.mu:
            self.records = {i: StreamRecord(self.models[i][0], go) for i in ids}
            self.parked = {i: collections.deque() for i in ids}
            self.busy = set()
            self.stop_at = t0 + warmup + go["duration_s"] + go["grace_s"]
            self.left = len(schedule)
            self.finished.clear()
            if not schedule:
                self.finished.set()
        late = []
        with no_gc_pauses():
            for k, (a, i) in enumerate(schedule):
                at = t0 + a
                now = time.perf_counter()
                if now < at:
                    time.sleep(at - now)
                    now = time.perf_counter()
                    at = now  # the sleep's overshoot is the load generator's, not the server's
                elif now > self.stop_at:  # too far behind: what is left is never sent
                    with self.mu:
                        for b, j in schedule[k:]:
                            self.records[j].unsent(b)
                        self._count_down(len(schedule) - k)
                    break
                if a >= warmup:
                    late.append(now - t0 - a)
                self.fifo.put(Request(i, a, at))
            if not self.finished.wait(timeout=max(0.0, self.stop_at - time.perf_counter()) + FINISH_S):
                raise RuntimeError(f"{self.left} requests still unfinished {FINISH_S:g} s after the window")
        models = [self.records[i].stats() | {"pid": os.getpid()} for i in ids]
        late.sort()
        return {"event": "done", "models": models,
                "server": {"threads": len(self.threads), "execution": EXECUTION[self.device],
                           "requests": len(schedule),
                           "generator_late_ms": {"p50": ms(percentile(late, 0.5)), "p99": ms(percentile(late, 0.99)),
                                                 "max": ms(late[-1] if late else None)}}}

    def stop(self):
        for _ in self.threads:
            self.fifo.put(None)
        for t in self.threads:
            t.join(timeout=5)


def ms(seconds):
    return None if seconds is None else round(seconds * 1e3, 4)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=tuple(EXECUTION), required=True)
    p.add_argument("--threads", type=int, default=8, help="serving threads, each with its own CUDA stream")
    p.add_argument("--small", action="store_true")
    args = p.parse_args()
    bc.raise_on_signals()
    import_s = time.perf_counter() - IMPORT_START
    # The serving threads are the parallelism: one intra-op thread each, as the other modes' processes run.
    torch.set_num_threads(1)
    if args.device == "cuda":
        bc.like_for_like_numerics()
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the context exists before the baseline of memory()
    server = None
    try:
        server = ModelServer(max(1, args.threads), args.device, args.small)
        emit({"event": "ready", "import_s": round(import_s, 3), "execution": EXECUTION[args.device],
              "threads": len(server.threads)})
        serve_commands({"load": lambda cmd: emit(server.load(cmd["models"])),
                        "go": lambda cmd: emit(server.serve(cmd))})
    except bc.Terminated:
        pass
    except Exception as e:
        traceback.print_exc()
        emit({"event": "error", "message": f"{type(e).__name__}: {e}"})
        return 1
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the interpreter's (and torch's) slow teardown
