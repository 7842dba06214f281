#!/usr/bin/env python3
"""Inference hosting: how many small inference models one GPU serves while every one meets a p99 latency target.

Each hosted model (slot i: a small MLP, a small CNN or ResNet-18 at 64x64, batch drawn from 1-16; see
inference_models.py) gets an open-loop Poisson request stream of --rate requests/s; a request's latency is the
client's wall time from its scheduled arrival to its result on the host. A probe runs N models at once for
--warmup_s + --duration_s and passes when every model's p99 over the timed window is <= --p99_ms and no request
failed or was left unsent. Modes:

  tandem     one tandemd; N tandem.torch.ServedModels, one client process per model by default
             (--models_per_proc K puts K models, one thread each, in one process)
  timeslice  N PyTorch processes, one model each, eager on the GPU, no MPS (the GPU's time-slicing)
  mps        the same N processes as clients of an MPS control daemon the program starts (pipe and log folders
             under --mps_dir) and always stops, also on errors and signals

Per mode the largest N that passes is searched: from --start, doubling up to --max_count, then bisection until
the bracket is within --resolution of the count that passed (or the counts of --counts, each probed). Worker
processes are kept between probes, so probe N reuses the N models of the probes before it. A model alone is the
"no sharing" baseline: one model per GPU, count 1 by definition; the JSON reports Salus's two ratios, tandem / 1
and tandem / mps (Salus: 42x and 7x).

    python3 bench/inference/hosting.py --out /tmp/out/hosting.json --plot /tmp/out/hosting.png   # GPU, ~4 min
    python3 bench/inference/hosting.py --device cpu --small --modes tandem,timeslice --out /tmp/h.json
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "pairs"))
sys.path.insert(0, os.path.join(BENCH, "models"))
sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
import torch  # noqa: E402

import inference_models  # noqa: E402
from hosting_plot import plot  # noqa: E402
from pair_matrix import Mps, mps_unavailable_reason  # noqa: E402

MODES = ("tandem", "timeslice", "mps")
WORKER = os.path.join(HERE, "worker.py")
SALUS = {"over_noshare": 42, "over_mps": 7}


class ProbeFailed(Exception):
    """A probe could not run (a worker did not start or died). The pool is closed; the next probe starts fresh."""


# ---- worker processes ----

class WorkerProc(bc.JsonLinesWorker):
    """One worker.py process hosting the models `specs`; its JSON events arrive on a queue."""

    def __init__(self, specs, backend, args, endpoint, env):
        self.ids = [s["id"] for s in specs]
        cmd = [sys.executable, WORKER, f"--backend={backend}", f"--device={args.device}",
               f"--models={json.dumps(specs)}"]
        if endpoint:
            cmd.append(f"--endpoint={endpoint}")
        if args.small:
            cmd.append("--small")
        super().__init__(cmd, f"hosting worker {self.ids}", env, lambda message, fatal: ProbeFailed(message))


class Pool:
    """The worker processes of one mode: worker j hosts slots [j*K, (j+1)*K). ensure(n) starts what is missing."""

    def __init__(self, backend, args, specs, endpoint=None, env=None, per_proc=1):
        self.backend, self.args, self.specs = backend, args, specs
        self.endpoint, self.env, self.per_proc = endpoint, env, per_proc
        self.workers = []
        self.solo_ms = {}
        self.spawn_s_per_worker = None

    def covered(self):
        return len(self.workers) * self.per_proc

    def ensure(self, n):
        """Starts workers until slots 0..n-1 are hosted and warm; ProbeFailed (and a closed pool) otherwise."""
        if n > len(self.specs):
            raise ValueError(f"{n} models asked for, {len(self.specs)} slots")
        start = time.monotonic()
        new = []
        try:
            while self.covered() < n:
                first = self.covered()
                w = WorkerProc(self.specs[first:first + self.per_proc], self.backend, self.args, self.endpoint,
                               self.env)
                self.workers.append(w)
                new.append(w)
            deadline = time.monotonic() + self.args.prepare_timeout
            for w in new:
                ready = w.expect("ready", deadline)
                for m in ready["models"]:
                    self.solo_ms[m["id"]] = m.get("solo_ms")
        except ProbeFailed:
            self.close()
            raise
        if new:
            self.spawn_s_per_worker = (time.monotonic() - start) / len(new)
            bc.log(f"    {len(new)} worker(s) started in {time.monotonic() - start:.1f} s")

    def estimate_spawn_s(self, n):
        missing = max(0, -(-(n - self.covered()) // self.per_proc))
        return missing * (self.spawn_s_per_worker or 1.0)

    def go(self, n, cmd):
        """Runs slots 0..n-1 with `cmd`; their stats, in slot order."""
        active = [w for w in self.workers if w.ids[0] < n]
        try:
            for w in active:
                w.send({**cmd, "ids": [i for i in w.ids if i < n]})
            deadline = time.monotonic() + (cmd["start_at"] - time.time()) + cmd["warmup_s"] + cmd["duration_s"] + \
                cmd["grace_s"] + 60
            models = []
            for w in active:
                models += w.expect("done", deadline)["models"]
        except ProbeFailed:
            self.close()
            raise
        return sorted(models, key=lambda m: m["id"])

    def close(self):
        for w in self.workers:
            w.close()
        self.workers = []


# ---- one probe ----

def daemon_stats(client):
    """The first device's counters from tandemd's stats (protobuf JSON: 64-bit integers come as strings)."""
    if client is None:
        return None
    try:
        dev = client.stats().get("devices", [{}])[0]
    except Exception as e:  # stats are extra information; a probe does not fail for them
        return {"error": str(e)}
    keys = ("persistent_bytes", "lane_bytes", "reserve_bytes", "capacity_bytes", "iterations", "lanes")
    out = {k: int(dev.get(k, 0)) for k in keys}
    out["busy_seconds"] = float(dev.get("busy_seconds", 0.0))
    return out


def summarize_probe(n, models, args, pool):
    target = args.p99_ms
    p99s = [m.get("p99_ms") for m in models]
    unbounded = any(v is None for v in p99s)
    failures = sum(m.get("failures", 0) for m in models)
    dropped = sum(m.get("dropped", 0) for m in models)
    completed = sum(m.get("completed", 0) for m in models)
    bounded = [v for v in p99s if v is not None]
    worst = max(models, key=lambda m: float("inf") if m.get("p99_ms") is None else m["p99_ms"]) if models else None
    passed = (len(models) == n and not unbounded and failures == 0 and dropped == 0 and
              all(v <= target for v in bounded))
    p50s = [m["p50_ms"] for m in models if m.get("p50_ms") is not None]
    errors = sorted({m["error"] for m in models if m.get("error")})
    return {
        "n": n, "pass": passed,
        "p99_ms_max": None if unbounded or not bounded else max(bounded),
        "p99_ms_max_bounded": max(bounded) if bounded else None,
        "p99_unbounded_models": sum(1 for v in p99s if v is None),
        "p50_ms_max": max(p50s) if p50s else None,
        "p50_ms_median": sorted(p50s)[len(p50s) // 2] if p50s else None,
        "models_over_target": sum(1 for v in p99s if v is None or v > target),
        "failures": failures, "dropped": dropped,
        "offered_rps": round(n * args.rate, 2),
        "served_rps": round(completed / args.duration_s, 2),
        "worst_model": None if worst is None else {k: worst.get(k) for k in ("id", "kind", "batch", "p99_ms")},
        "errors": errors[:5],
        "models": [{k: m.get(k) for k in ("id", "kind", "batch", "requests", "failures", "dropped", "p50_ms",
                                          "p99_ms", "max_ms", "mean_ms")} | {"solo_ms": pool.solo_ms.get(m["id"])}
                   for m in models],
    }


def run_probe(n, pool, args, stats_client, device):
    started = time.monotonic()
    pool.ensure(n)
    before = daemon_stats(stats_client)
    start_at = time.time() + 0.5 + 0.005 * n
    cmd = {"cmd": "go", "start_at": start_at, "warmup_s": args.warmup_s, "duration_s": args.duration_s,
           "rate": args.rate, "grace_s": args.grace_s, "seed": args.seed + n}
    mem = {}

    def sample_memory():  # once, in the middle of the timed window
        delay = start_at + args.warmup_s + args.duration_s / 2 - time.time()
        if delay > 0:
            time.sleep(delay)
        smi = bc.nvidia_smi(["memory.used"])
        if smi:
            mem["gpu_mem_used_mib"] = int(float(smi["memory.used"]))

    sampler = None
    if device == "cuda":
        sampler = threading.Thread(target=sample_memory, daemon=True)
        sampler.start()
    models = pool.go(n, cmd)
    if sampler is not None:
        sampler.join(timeout=30)
    after = daemon_stats(stats_client)
    out = summarize_probe(n, models, args, pool)
    out.update(mem)
    if before and after and "error" not in before and "error" not in after:
        out["tandemd"] = {"persistent_mib": round(after["persistent_bytes"] / 2**20, 1),
                          "lane_mib": round(after["lane_bytes"] / 2**20, 1), "lanes": after["lanes"],
                          "iterations": after["iterations"] - before["iterations"],
                          "busy_s": round(after["busy_seconds"] - before["busy_seconds"], 3)}
    out["wall_s"] = round(time.monotonic() - started, 2)
    return out


# ---- the search ----

def search(probe, args, out, deadline, pool, save):
    """Fills out["probes"] and out["hosted"]: the largest count that passed (0 if none)."""
    probes = out["probes"]

    def attempt(n):
        need = args.warmup_s + args.duration_s + args.grace_s + 3 + pool.estimate_spawn_s(n)
        if time.monotonic() + need > deadline:
            out["search"] = f"stopped before N={n}: over this mode's share of the budget"
            bc.log(f"  N={n}: skipped (budget)")
            return None
        try:
            r = probe(n)
        except ProbeFailed as e:
            r = {"n": n, "pass": False, "error": str(e)}
        probes.append(r)
        save()
        if "error" in r:
            bc.log(f"  N={n:3d}: FAILED: {r['error']}")
        else:
            p99 = "unbounded" if r["p99_ms_max"] is None else f"{r['p99_ms_max']:.2f} ms"
            bc.log(f"  N={n:3d}: {'pass' if r['pass'] else 'FAIL'}  worst p99 {p99}, median p50 "
                   f"{r['p50_ms_median']} ms, {r['models_over_target']} over target, {r['failures']} failed, "
                   f"{r['dropped']} unsent, {r['served_rps']:.0f}/{r['offered_rps']:.0f} req/s ({r['wall_s']} s)")
        return r["pass"]

    if args.counts:
        passed = [n for n in args.counts if attempt(n)]
        out["hosted"] = max(passed) if passed else 0
        out["search"] = out.get("search", "counts")
        return
    lo, hi, n = 0, None, min(args.start, args.max_count)
    while True:
        ok = attempt(n)
        if ok is None:
            break
        if not ok:
            hi = n
            break
        lo = n
        if n >= args.max_count:
            out["at_cap"] = True
            break
        n = min(2 * n, args.max_count)
    while hi is not None and hi - lo > max(1, lo * args.resolution) and "search" not in out:
        n = (lo + hi) // 2
        ok = attempt(n)
        if ok is None:
            break
        lo, hi = (n, hi) if ok else (lo, n)
    out["hosted"] = lo
    out["first_failing"] = hi
    out.setdefault("search", "done")


# ---- modes ----

def preflight(args, endpoint, kinds, result):
    """Serves one model of each kind through tandemd and checks its output against PyTorch on the CPU. A kind
    that cannot be served is dropped from the mix of every mode (and the reason recorded)."""
    import tandem.torch
    kept = []
    for kind in kinds:
        spec = next(s for s in inference_models.slot_specs(len(kinds) * 4, kinds, args.batches, args.seed)
                    if s["kind"] == kind)
        model, x = inference_models.build(kind, spec["batch"], args.small, seed=1000 + spec["id"])
        try:
            with torch.no_grad():
                ref = model(x)
            with tandem.torch.serve(model, x, endpoint=endpoint, name=f"preflight-{kind}",
                                    device=args.device) as served:
                y = served(x)
            diff = float((y - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
            result["preflight"][kind] = {"batch": spec["batch"], "max_rel_diff": diff}
            kept.append(kind)
            # Kept either way (the benchmark measures latency), but a large difference is worth a look.
            warn = "  WARNING: differs from PyTorch's output" if diff > 1e-2 else ""
            bc.log(f"  preflight {kind} (batch {spec['batch']}): served, max relative difference to PyTorch on "
                   f"the CPU {diff:.1e}{warn}")
        except Exception as e:
            result["preflight"][kind] = {"error": f"{type(e).__name__}: {e}"}
            result["kinds_dropped"][kind] = f"{type(e).__name__}: {e}"
            bc.log(f"  preflight {kind}: DROPPED from every mode: {e}")
    if not kept:
        raise RuntimeError("tandemd could serve none of the model kinds")
    return kept


def run_mode(mode, args, state, result, deadline, save):
    out = result["modes"][mode] = {"probes": []}
    daemon = mps = pool = stats_client = None
    try:
        if mode == "tandem":
            flags = ["--session_timeout=600", *args.tandemd_flags]
            daemon = bc.Daemon(bc.find_tandemd(args.tandemd), args.device, args.tandem_policy, flags,
                               log_dir=args.log_dir, name="tandemd-hosting").start()
            out["tandemd_flags"] = daemon.flags
            if not args.no_preflight:
                state["kinds"] = preflight(args, daemon.endpoint, state["kinds"], result)
                state["specs"] = inference_models.slot_specs(args.max_count, state["kinds"], args.batches, args.seed)
                result["config"]["kinds"] = state["kinds"]
            import tandem
            stats_client = tandem.Client(endpoint=daemon.endpoint, name="hosting-stats")
            pool = Pool("tandem", args, state["specs"], endpoint=daemon.endpoint, per_proc=args.models_per_proc)
            out["models_per_proc"] = args.models_per_proc
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
            if mode == "mps":
                mps = Mps(args.mps_dir or tempfile.mkdtemp(prefix="tandem-bench-mps-"))
                mps.start()
                env = mps.env
            if args.device == "cuda":
                smi = bc.nvidia_smi(["memory.used"])
                out["gpu_mem_used_before_mib"] = int(float(smi["memory.used"])) if smi else None
            pool = Pool("torch", args, state["specs"], env=env)
        out["specs"] = state["specs"]
        if args.prespawn:
            try:
                pool.ensure(args.max_count)
            except ProbeFailed as e:  # e.g. the daemon cannot admit them all: each probe starts its own
                out["prespawn_error"] = str(e)
                bc.log(f"  starting {args.max_count} workers failed ({e}); each probe starts its workers")
        def probe(n):
            if daemon is not None and not daemon.alive():
                raise RuntimeError(f"tandemd exited: {daemon.log_tail(1500)}")
            return run_probe(n, pool, args, stats_client, args.device)

        search(probe, args, out, deadline, pool, save)
        bc.log(f"  {mode}: hosts {out['hosted']} model(s){' (the cap)' if out.get('at_cap') else ''}")
    finally:
        if pool is not None:
            pool.close()
        if stats_client is not None:
            stats_client.close()
        if daemon is not None:
            if not daemon.alive():
                out["tandemd_log_tail"] = daemon.log_tail()
            daemon.stop()
        if mps is not None:
            out["mps_control_log_tail"] = mps.log_tail()
            mps.stop()


def summary(result):
    hosted = {m: r.get("hosted") for m, r in result["modes"].items() if r.get("hosted") is not None}
    at_cap = {m: bool(r.get("at_cap")) for m, r in result["modes"].items()}
    s = {"noshare": 1, "hosted": hosted, "at_cap": at_cap, "salus_reported": SALUS,
         "definitions": {"noshare": "one model per GPU at a time: 1 by definition",
                         "tandem_over_noshare": "tandem hosted count / 1 (Salus: 42x)",
                         "tandem_over_mps": "tandem hosted count / mps hosted count (Salus: 7x)",
                         "tandem_over_timeslice": "tandem hosted count / timeslice hosted count",
                         "lower_bound": "a ratio is a lower bound when tandem reached the cap (--max_count)"}}
    for mode, r in result["modes"].items():  # what the GPU held at the hosted count
        at = next((p for p in r.get("probes", []) if p.get("n") == r.get("hosted") and "error" not in p), None)
        if at is None:
            continue
        if "tandemd" in at:
            s.setdefault("memory_at_hosted", {})[mode] = {
                "tandemd_jobs_mib": round(at["tandemd"]["persistent_mib"] + at["tandemd"]["lane_mib"], 1),
                "what": "tandemd's persistent tensors + lane arenas (the daemon itself holds the whole GPU)"}
        elif at.get("gpu_mem_used_mib") is not None and r.get("gpu_mem_used_before_mib") is not None:
            s.setdefault("memory_at_hosted", {})[mode] = {
                "processes_mib": at["gpu_mem_used_mib"] - r["gpu_mem_used_before_mib"],
                "what": "nvidia-smi memory.used during the probe minus before the mode started"}
    t = hosted.get("tandem")
    if t is not None:
        s["tandem_over_noshare"] = t
        for other in ("mps", "timeslice"):
            if hosted.get(other):
                s[f"tandem_over_{other}"] = round(t / hosted[other], 3)
        s["lower_bound"] = at_cap.get("tandem", False)
    result["summary"] = s
    return s


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of tandem,timeslice,mps")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--small", action="store_true", help="tiny models and short probes (CPU smoke test)")
    p.add_argument("--kinds", default=None, help="model kinds, round-robin over slots (default mlp,cnn,resnet18; "
                                                 "--small: mlp,cnn)")
    p.add_argument("--batches", default="1,2,4,8,16", help="batch sizes each slot draws from")
    p.add_argument("--rate", type=float, default=None, help="requests/s per model (default 40; --small 20)")
    p.add_argument("--p99_ms", type=float, default=20.0, help="latency target of every model's p99")
    p.add_argument("--duration_s", type=float, default=None, help="timed seconds per probe (default 4; --small 2)")
    p.add_argument("--warmup_s", type=float, default=None, help="untimed seconds before (default 0.5)")
    p.add_argument("--grace_s", type=float, default=1.0,
                   help="a request not yet sent this long after the window is counted as unsent (a failed probe)")
    p.add_argument("--start", type=int, default=None, help="first count probed (default 4; --small 2)")
    p.add_argument("--max_count", type=int, default=None, help="most models probed (default 64; --small 4)")
    p.add_argument("--resolution", type=float, default=0.25,
                   help="stop bisecting when the bracket is within this fraction of the passing count (0: exact)")
    p.add_argument("--counts", default=None, help="probe exactly these counts instead of searching, e.g. 8,16,32")
    p.add_argument("--models_per_proc", type=int, default=1,
                   help="tandem mode: models per client process (one thread each); 1: a process per model")
    p.add_argument("--prespawn", action=argparse.BooleanOptionalAction, default=None,
                   help="start the workers of --max_count models before the first probe (default: only with "
                        "--small; otherwise each probe starts the workers it adds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--tandem_policy", default="pack", help="tandemd's --policy")
    p.add_argument("--tandemd_flags", default="",
                   help='extra tandemd flags, space-separated, after an = sign: --tandemd_flags="--max_lanes=8"')
    p.add_argument("--no_preflight", action="store_true", help="skip the tandem mode's per-kind check")
    p.add_argument("--log_dir", default=None, help="where tandemd's log goes (default: a temporary folder)")
    p.add_argument("--mps_dir", default=None, help="MPS pipe/log folders go here (default: a new folder in /tmp)")
    p.add_argument("--prepare_timeout", type=float, default=300, help="s for new workers to capture/load and warm up")
    p.add_argument("--budget_s", type=float, default=None,
                   help="total seconds, shared evenly among the modes still to run (default 225; --small: none)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--plot", default=None, help="PNG of p99 vs N per mode")
    args = p.parse_args()
    small_or = lambda small, full: small if args.small else full  # noqa: E731
    args.kinds = [k for k in (args.kinds or small_or("mlp,cnn", "mlp,cnn,resnet18")).split(",") if k]
    for k in args.kinds:
        if k not in inference_models.KINDS:
            p.error(f"--kinds: unknown {k!r}; one of {', '.join(inference_models.KINDS)}")
    args.batches = [int(b) for b in args.batches.split(",") if b]
    args.rate = args.rate if args.rate is not None else small_or(20.0, 40.0)
    args.duration_s = args.duration_s if args.duration_s is not None else small_or(2.0, 4.0)
    args.warmup_s = args.warmup_s if args.warmup_s is not None else 0.5
    args.start = args.start if args.start is not None else small_or(2, 4)
    args.max_count = args.max_count if args.max_count is not None else small_or(4, 64)
    args.prespawn = args.prespawn if args.prespawn is not None else args.small
    args.budget_s = args.budget_s if args.budget_s is not None else small_or(0, 225)
    args.counts = sorted({int(c) for c in args.counts.split(",") if c}) if args.counts else None
    if args.counts:
        args.max_count = max(args.max_count, max(args.counts))
    args.tandemd_flags = [f for f in args.tandemd_flags.split() if f]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            p.error(f"--modes: unknown {m!r}; one of {', '.join(MODES)}")
    args.modes = [m for m in MODES if m in modes]  # tandem first (its preflight sets the mix), MPS last
    if args.models_per_proc < 1 or args.rate <= 0 or args.start < 1 or args.max_count < 1:
        p.error("--models_per_proc, --rate, --start and --max_count must be positive")
    return args


def main():
    args = parse_args()
    bc.raise_on_signals()
    args.device = bc.torch_device(args.device)
    budget = bc.Budget(args.budget_s)
    result = {
        "meta": bc.metadata(args.device),
        "config": {"modes": args.modes, "small": args.small, "kinds": args.kinds,
                   "kind_descriptions": {k: inference_models.describe(k, args.small) for k in args.kinds},
                   "batches": args.batches, "rate_per_model": args.rate, "p99_target_ms": args.p99_ms,
                   "warmup_s": args.warmup_s, "duration_s": args.duration_s, "grace_s": args.grace_s,
                   "start": args.start, "max_count": args.max_count, "resolution": args.resolution,
                   "counts": args.counts, "prespawn": args.prespawn, "models_per_proc": args.models_per_proc, "seed": args.seed,
                   "tandem_policy": args.tandem_policy, "tandemd_flags": args.tandemd_flags,
                   "budget_s": args.budget_s, "dtype": "float32", "tf32": False},
        "preflight": {}, "kinds_dropped": {}, "modes": {},
    }
    state = {"kinds": list(args.kinds),
             "specs": inference_models.slot_specs(args.max_count, args.kinds, args.batches, args.seed)}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    bc.log(f"hosting: modes {', '.join(args.modes)} on {result['meta']['gpu']}; kinds {', '.join(args.kinds)}, "
           f"batches {args.batches}, {args.rate:g} req/s per model, p99 target {args.p99_ms:g} ms, "
           f"{args.warmup_s:g}+{args.duration_s:g} s per probe")
    status = 0
    try:
        for k, mode in enumerate(args.modes):
            if mode == "mps":
                reason = mps_unavailable_reason(args.device)
                if reason:
                    result["modes"]["mps"] = {"skipped": reason}
                    bc.log(f"== mps skipped: {reason}")
                    continue
            deadline = time.monotonic() + budget.left() / (len(args.modes) - k)
            bc.log(f"== {mode}")
            try:
                run_mode(mode, args, state, result, deadline, save)
            except (Exception, KeyboardInterrupt, bc.Terminated) as e:
                result["modes"][mode]["error"] = f"{type(e).__name__}: {e}"
                bc.log(f"  {mode}: stopped: {e}")
                status = 1
                if isinstance(e, (KeyboardInterrupt, bc.Terminated)):
                    raise
                traceback.print_exc()
            save()
    except (KeyboardInterrupt, bc.Terminated) as e:
        result["error"] = f"{type(e).__name__}: {e}"
        status = 1
    finally:
        s = summary(result)
        save()
    print_summary(result, s)
    if args.plot:
        try:
            plot(result, args.plot)
            bc.log(f"wrote {args.plot}")
        except Exception as e:  # the JSON is what matters
            bc.log(f"plot failed: {e}")
    bc.log(f"wrote {args.out}")
    return status


def print_summary(result, s):
    target = result["config"]["p99_target_ms"]
    bc.log(f"mode        hosted   (p99 target {target:g} ms, {result['config']['rate_per_model']:g} req/s per model)")
    bc.log(f"noshare     {1:6d}   (one model per GPU, by definition)")
    for mode, r in result["modes"].items():
        if "skipped" in r:
            bc.log(f"{mode:11s} {'-':>6s}   skipped: {r['skipped']}")
        elif r.get("hosted") is None:
            bc.log(f"{mode:11s} {'-':>6s}   {r.get('error', 'no result')}")
        else:
            note = " (cap)" if r.get("at_cap") else ""
            bc.log(f"{mode:11s} {r['hosted']:6d}{note}   {r.get('search', '')}")
    for key in ("tandem_over_noshare", "tandem_over_mps", "tandem_over_timeslice"):
        if key in s:
            bound = " (lower bound: tandem at the cap)" if s.get("lower_bound") else ""
            bc.log(f"{key}: {s[key]}{bound}")


if __name__ == "__main__":
    sys.exit(main())
