#!/usr/bin/env python3
"""Inference hosting: how many small inference models one GPU serves while every one meets a p99 latency target.

Each hosted model (slot i: a small MLP, a small CNN or ResNet-18 at 64x64, batch drawn from 1-16; see
inference_models.py) gets an open-loop Poisson request stream of --rate requests/s; a request's latency is the
client's wall time from its scheduled arrival to its result on the host. A probe runs N models at once for
--warmup_s + --duration_s (default: --min_requests / --rate, so that each model's p99 rests on about 100
requests) and passes when every model's p99 over the timed window is <= --p99_ms and no request failed or was
left unsent. Modes:

  tandem     one tandemd; N tandem.torch.ServedModels, each its own job with its own weights, --models_per_proc
             (16) per client process, one thread each; a process captures each distinct (kind, batch) once
  timeslice  N PyTorch processes, one model each, eager on the GPU, no MPS (the GPU's time-slicing)
  mps        the same N processes as clients of an MPS control daemon the program starts (pipe and log folders
             under --mps_dir) and always stops, also on errors and signals; at most --mps_max_clients (48)

Per mode the largest N that passes is searched (hosting_search.py): 4, 16, 64, then doubling up to
--max_count, each clipped to the mode's cap (memory, the MPS client limit), then bisection until the bracket is
within --resolution of the passing count (or exactly the counts of --counts). Tandem's workers all start
(up to the cap) before its first probe, which waits until every one is ready; the other modes' workers of the
next --spawn_ahead counts start in the background (SCHED_IDLE) while a probe runs; a probe that fails while
workers were starting is repeated once with them paused (SIGSTOP), and only the repeat counts; so is a Tandem probe
that failed while tandemd moved jobs between lanes or captured graphs (once per move or first request: at one
H200's first probe of 256 models, 9 moves and 41 captures, the slow requests 0.6-1.05 s into it). Each mode gets a share
of what is left of --budget_s (Tandem's weighs 1.5, the others 1), so one slow mode cannot starve the others;
the JSON says per mode why its search stopped (stop_reason) and whether its count is only a lower bound. A
model alone is the "no sharing" baseline: one model per GPU, count 1 by definition; the JSON reports Salus's
two ratios, tandem / 1 and tandem / mps (Salus: 42x and 7x).

    python3 bench/inference/hosting.py --out /tmp/out/hosting.json --plot /tmp/out/hosting.png   # GPU, ~2 min
    python3 bench/inference/hosting.py --device cpu --small --modes tandem,timeslice --out /tmp/h.json
"""

import argparse
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
import daemon_stats  # noqa: E402
import torch  # noqa: E402,F401  (bench_common's numerics; imported before the workers start)

import inference_models  # noqa: E402
from hosting_pool import MemoryWatch, Pool, ProbeFailed, can_start_idle, gpu_memory_mib  # noqa: E402
from hosting_search import BUDGET, CAPPED, FAIL, PASS, ahead_of, ladder, search  # noqa: E402
from pair_matrix import Mps, mps_unavailable_reason  # noqa: E402

MODES = ("tandem", "timeslice", "mps")
SALUS = {"over_noshare": 42, "over_mps": 7}
START_DELAY_S = 0.3
# Growth steps whose workers start while a probe runs (--spawn_ahead). Tandem starts none: on the H200 with
# four steps ahead, the workers capturing, registering and checking 100 more models during the probes (each
# check runs iterations in the daemon) made 16 models fail at p50 170 ms and the count came out 13; with none
# it was 64 (bench/results/2026-11-30-h200-hosting-tandem.json). Its workers are ready in ~30 s anyway. The
# one-process-per-model modes start two steps ahead: a process needs 8-9 s to start, which the budget could
# not afford serially.
SPAWN_AHEAD = {"tandem": 0, "timeslice": 2, "mps": 2}
# Modes whose workers all start (up to the cap) before the first probe, which then waits until every one is
# ready, so that nothing starts during a probe. Tandem's: with 160 and more models hosted, starting 8 more
# processes per growth step (each capturing its models) after the previous probe left the suite's Tandem share
# out of time at 128 models with 256's workers not ready; all 16 processes start side by side on 16 cores.
PRESPAWN = {"tandem": True, "timeslice": False, "mps": False}
# Each mode's share of --budget_s (what is left of it, among the modes still to run).
MODE_WEIGHT = {"tandem": 1.5, "timeslice": 1.0, "mps": 1.0}


# ---- one probe ----

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
        "stalls": stall_bins(models),
        # Where the latency went (worker.py's LatencySplit), over every timed request and over the slow ones.
        "latency_split_ms": {"all": merge_splits(models, "split_ms"), "slow": merge_splits(models, "slow_split_ms")},
        "models": [{k: m.get(k) for k in ("id", "kind", "batch", "requests", "failures", "dropped", "p50_ms",
                                          "p99_ms", "max_ms", "mean_ms")} | {"solo_ms": pool.solo_ms.get(m["id"])}
                   for m in models],
    }


# tandemd's --max_inflight_per_lane for hosting: with 4, a lane's stream
# holds the running iteration and 3 more (of other models) behind it; on an
# H200 that hosted 256 models where 2 (the daemon's default) hosted 192
# (bench/results/2026-11-30-h200-hosting-level-inflight4.json).
INFLIGHT_PER_LANE = 4
# tandemd's --max_lanes for hosting: 8 lanes (streams side by side) hosted 320-352 models on an H200 where 4 hosted
# 288-320, once each lane stream had a hardware queue of its own (CUDA_DEVICE_MAX_CONNECTIONS, which tandemd
# sets; before that, 8 lanes did worse than 4: bench/results/2026-12-01-h200-hosting-lanes-queues.json). At
# 352-416 models 12 lanes passed every count where 8 failed every one and 16 passed only 416
# (bench/results/2026-12-01-h200-hosting-lanes12.json).
LANES = 12
# The daemon-side defaults of hosting, each added unless --tandemd_flags names the flag.
TANDEMD_DEFAULTS = {"--max_inflight_per_lane": INFLIGHT_PER_LANE, "--max_lanes": LANES}
STALL_BIN_S = 0.05
# tandemd's journal events lined up with a stall bin: from this long before the bin (a capture or a move holds
# up its lane for a while before the requests behind it come out slow) to this long after the bin's end (the
# journal stamps an iteration's capture or slow wait when the iteration ends: a slow request that arrived in the
# bin ends up to its latency later).
EVENT_LEAD_S = 0.1
EVENT_LAG_S = 0.05
# The most journal events a probe keeps in the JSON (as seconds into its timed window).
MAX_PROBE_EVENTS = 400


def event_window(t):
    """The times of the journal events that go with a stall bin starting at t (any clock)."""
    return t - EVENT_LEAD_S, t + STALL_BIN_S + EVENT_LAG_S


def probe_events(events, start, duration_s, stall_times, limit=MAX_PROBE_EVENTS):
    """The journal events a probe keeps, in time order: every one beside a stall bin (event_window of each bin
    start in `stall_times`), then the rest of the timed window [start - EVENT_LEAD_S, start + duration_s +
    EVENT_LAG_S) from its start, up to `limit` in all. The events outside the window (the workers' warm-up, the
    lanes' warm steps while models register) are left out: cutting a busy window's journal at its first `limit`
    events could drop the ones the stalls need."""
    def beside_stall(e):
        return any(lo <= e["t"] < hi for lo, hi in map(event_window, stall_times))
    timed = daemon_stats.near(events, start - EVENT_LEAD_S, start + duration_s + EVENT_LAG_S)
    stalls = [e for e in timed if beside_stall(e)]
    rest = [e for e in timed if not beside_stall(e)][:max(0, limit - len(stalls))]
    return sorted(stalls[:limit] + rest, key=lambda e: e["t"])


class RegistrationWatch:
    """Samples tandemd's per-lane job counts and lane moves every `every_s` while the prespawned models register,
    on its own thread (the stats client is not used by anything else then): whether a crowded lane forms as the
    models are placed or by moves among them."""

    def __init__(self, client, every_s=1.0):
        self.client, self.every_s, self.samples = client, every_s, []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self):
        snap = daemon_stats.snapshot(self.client)
        if snap and "error" not in snap:
            lanes = snap["per_lane"]
            self.samples.append({"t": round(time.monotonic() - self._started, 2),
                                 "lane_jobs": [lanes[k]["jobs"] for k in sorted(lanes)],
                                 "lane_moves": snap["lane_moves"]})

    def _run(self):
        while not self._stop.wait(self.every_s):
            self._sample()

    def stop(self):
        """Stops sampling, takes a last sample, and returns registration_summary of them all."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._sample()
        return registration_summary(self.samples)


def registration_summary(samples):
    """{"lane_jobs": at the end, "lane_moves": moves while the models registered, "fullest": [[t, most jobs in a
    lane, moves so far], ...] at each sample} from RegistrationWatch's samples (None without any)."""
    if not samples:
        return None
    last = samples[-1]
    return {"lane_jobs": last["lane_jobs"], "lane_moves": last["lane_moves"],
            "fullest": [[x["t"], max(x["lane_jobs"], default=0), x["lane_moves"]] for x in samples]}


def merge_splits(models, key):
    """The request-weighted mean of the models' `key` splits ({"requests", part: mean ms}), or None."""
    splits = [m[key] for m in models if m.get(key)]
    n = sum(s["requests"] for s in splits)
    if n == 0:
        return None
    parts = [p for p in splits[0] if p != "requests"]
    return {"requests": n} | {p: round(sum(s[p] * s["requests"] for s in splits) / n, 4) for p in parts}


def stall_bins(models, top=5):
    """Requests over the latency target, by when they arrived (STALL_BIN_S bins of the timed window; a worker
    lists at most 100 per model): the bins with most of them, each with how many models and client processes
    they span. A stall of the server shows as one bin spanning many models of many processes; a pause of one
    client process as a bin of its models only; one model's bad luck as scattered bins of one."""
    bins = {}
    for m in models:
        for t in m.get("slow_at_s") or []:
            b = bins.setdefault(int(t / STALL_BIN_S), [0, set(), set()])
            b[0] += 1
            b[1].add(m["id"])
            b[2].add(m.get("pid"))
    ranked = sorted(bins.items(), key=lambda kv: (-len(kv[1][1]), kv[0]))[:top]
    return {"slow_requests": sum(b[0] for b in bins.values()), "bins": len(bins),
            "top": [{"at_s": round(k * STALL_BIN_S, 3), "requests": b[0], "models": len(b[1]),
                     "processes": len(b[2])} for k, b in ranked]}


def _cpu_snapshot(pids):
    """(machine busy jiffies, machine total jiffies, {pid: CPU seconds}) from /proc; zeros where unreadable."""
    busy = total = 0
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])
        busy = total - idle
    except (OSError, ValueError, IndexError):
        pass
    tick = os.sysconf("SC_CLK_TCK")
    per_pid = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            per_pid[pid] = (int(rest[11]) + int(rest[12])) / tick  # utime + stime, every thread
        except (OSError, ValueError, IndexError):
            pass
    return busy, total, per_pid


def cpu_during(a, b, seconds, worker_pids, daemon_pid):
    """Where the machine's CPU went between two snapshots: the cores busy in all, those of the client
    processes and those of tandemd (cores = CPU seconds per wall second)."""
    out = {"cores": os.cpu_count()}
    if b[1] > a[1]:
        out["machine_busy_fraction"] = round((b[0] - a[0]) / (b[1] - a[1]), 3)
    if seconds > 0:
        out["workers_cores"] = round(sum(b[2].get(p, 0.0) - a[2].get(p, 0.0) for p in worker_pids) / seconds, 2)
        if daemon_pid is not None:
            out["tandemd_cores"] = round((b[2].get(daemon_pid, 0.0) - a[2].get(daemon_pid, 0.0)) / seconds, 2)
    return out


def probe_seconds(args, n):
    """Wall seconds one probe of n models may take (start delay, window, grace, collection)."""
    return START_DELAY_S + 0.002 * n + args.warmup_s + args.duration_s + args.grace_s + 0.5


def run_probe(n, pool, args, stats_client, device):
    started = time.monotonic()
    before = daemon_stats.snapshot(stats_client)
    start_at = time.time() + START_DELAY_S + 0.002 * n  # every worker has its command by then
    cmd = {"cmd": "go", "start_at": start_at, "warmup_s": args.warmup_s, "duration_s": args.duration_s,
           "rate": args.rate, "grace_s": args.grace_s, "seed": args.seed + n, "slow_ms": args.p99_ms}
    mem = {}

    def sample_memory():  # once, in the middle of the timed window
        delay = start_at + args.warmup_s + args.duration_s / 2 - time.time()
        if delay > 0:
            time.sleep(delay)
        used = gpu_memory_mib()
        if used:
            mem["gpu_mem_used_mib"] = used[0]

    # The CPU over the timed window: is the machine (clients and daemon on the same cores) the limit?
    worker_pids = [w.proc.pid for w in pool.workers if w.state == "ready"]
    daemon_pid = before.get("pid") if before and "error" not in before else None
    pids = worker_pids + ([daemon_pid] if daemon_pid else [])
    cpu = {}

    def sample_cpu():
        for key, at in (("a", start_at + args.warmup_s), ("b", start_at + args.warmup_s + args.duration_s)):
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
            cpu[key] = _cpu_snapshot(pids)

    samplers = [threading.Thread(target=sample_cpu, daemon=True)]
    if device == "cuda":
        samplers.append(threading.Thread(target=sample_memory, daemon=True))
    for t in samplers:
        t.start()
    models = pool.go(n, cmd)
    for t in samplers:
        t.join(timeout=30)
    after = daemon_stats.snapshot(stats_client)
    out = summarize_probe(n, models, args, pool)
    out.update(mem)
    if "a" in cpu and "b" in cpu:
        out["cpu"] = cpu_during(cpu["a"], cpu["b"], args.duration_s, worker_pids, daemon_pid)
    window = daemon_stats.delta(before, after)
    if window is not None:
        events = window.pop("events")
        out["tandemd"] = {"persistent_mib": round(after["persistent_bytes"] / 2**20, 1),
                          "lane_mib": round(after["lane_bytes"] / 2**20, 1),
                          "warm_steps_total": after.get("warm_steps"), **window}
        window_start = start_at + args.warmup_s
        # The whole timed window's journal, per kind (the JSON keeps the events themselves beside stalls only).
        out["tandemd"]["journal"] = daemon_stats.summarize(
            daemon_stats.near(events, window_start, window_start + args.duration_s))
        # What tandemd did around each stall: its journal on the clock of the timed window.
        stalls = (out.get("stalls") or {}).get("top", [])
        stall_times = [window_start + b["at_s"] for b in stalls]
        for b, t in zip(stalls, stall_times):
            b["tandemd"] = daemon_stats.summarize(daemon_stats.near(events, *event_window(t)))
        out["tandemd"]["events"] = [{"at_s": round(e["t"] - window_start, 4),
                                     **{k: v for k, v in e.items() if k != "t"}}
                                    for e in probe_events(events, window_start, args.duration_s, stall_times)]
    out["wall_s"] = round(time.monotonic() - started, 2)
    return out


def log_probe(r, note=""):
    if "error" in r:
        bc.log(f"  N={r['n']:3d}: FAILED: {r['error']}{note}")
        return
    p99 = "unbounded" if r["p99_ms_max"] is None else f"{r['p99_ms_max']:.2f} ms"
    bg = f", {r['background_starting']} worker(s) starting meanwhile" if r.get("background_starting") else ""
    c = r.get("cpu", {})
    cpu = ""
    if "machine_busy_fraction" in c:
        cpu = (f"; CPU {c['machine_busy_fraction']:.0%} of {c['cores']} cores, clients {c.get('workers_cores')}"
               + (f", tandemd {c['tandemd_cores']}" if "tandemd_cores" in c else ""))
    bc.log(f"  N={r['n']:3d}: {'pass' if r['pass'] else 'FAIL'}  worst p99 {p99}, median p50 "
           f"{r['p50_ms_median']} ms, {r['models_over_target']} over target, {r['failures']} failed, "
           f"{r['dropped']} unsent, {r['served_rps']:.0f}/{r['offered_rps']:.0f} req/s{cpu} "
           f"({r['wall_s']} s{bg}){note}")
    st = r.get("stalls") or {}
    if st.get("slow_requests"):
        def around(b):  # tandemd's journal near the bin: e.g. "capture 2 (lanes 3,5; 6.1 ms)"
            d = b.get("tandemd")
            if not d:
                return ""
            return " [" + "; ".join(f"{k} {v['n']} (lanes {','.join(map(str, v['lanes']))}; {v['ms']} ms)"
                                    for k, v in d.items()) + "]"

        tops = ", ".join(f"{b['at_s']}s: {b['requests']} in {b['models']} models of {b.get('processes', '?')} "
                         f"processes{around(b)}" for b in st["top"][:3])
        bc.log(f"         {st['slow_requests']} requests over target in {st['bins']} bins of {STALL_BIN_S}s; "
               f"most models at once: {tops}")
    d = r.get("tandemd", {})
    if "loop_busy_s" in d:  # tandem: the daemon's side of the same probe
        lanes = ", ".join(f"{x.get('jobs', '?')}: {x['busy_s']:.2f}/{x['occupied_s']:.2f}"
                          for x in d.get("per_lane", []))
        parts = ", ".join(f"{x['name']} {x['mean_us']}" for x in d.get("loop_sections", []))
        items = ", ".join(f"{x['name']} {x['mean_us']} (wait {x.get('mean_wait_us', '-')})"
                          for x in d.get("loop_top", [])[:3])
        longest = max(d.get("loop_new_max_ms", {}).items(), key=lambda kv: kv[1], default=None)
        bc.log(f"         loop busy {d['loop_busy_s']} s"
               + (f" (longest item {longest[1]} ms, {longest[0]})" if longest else "")
               + f"; items us: {items or '-'}; parts us: {parts or '-'}; "
               f"lanes jobs: kernel/occupied s: {lanes or '-'}; lane moves {d.get('lane_moves', '-')}, "
               f"graph captures {d.get('graph_captures', '-')}, arena moves {d.get('arena_moves', '-')}, "
               f"staging allocations {d.get('staging_allocations', '-')}, warm steps {d.get('warm_steps', '-')} "
               f"({d.get('warm_steps_total', '-')} since start); "
               f"journal {d.get('event_counts', '-')}"
               + (f" ({d['events_dropped']} dropped)" if d.get("events_dropped") else ""))


# ---- the tandem mode's check of each kind ----

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


# ---- modes ----

def spawned_first(args, cap_count, steps, prespawn):
    """The count whose workers start before the first probe."""
    if args.counts:
        return min(args.counts[0], cap_count)
    if prespawn:
        return cap_count
    return ahead_of(min(args.start, cap_count), cap_count, steps)


def stall_events(probe):
    """The probe's journal events that its stall bins summarize (event_window of each bin)."""
    windows = [event_window(b["at_s"]) for b in (probe.get("stalls") or {}).get("top", [])]
    return [e for e in probe.get("tandemd", {}).get("events", [])
            if any(lo <= e["at_s"] <= hi for lo, hi in windows)]


def trim_models(out):
    """Keeps every model's numbers and all journal events only in the probes at the hosted and the first failing
    count (the others keep their worst model, and the events beside their stalls): the JSON stays small at
    hundreds of models."""
    keep = {out.get("hosted"), out.get("first_failing")}
    for p in out.get("probes", []):
        if p.get("n") not in keep or p.get("discarded"):
            p.pop("models", None)
            if "events" in p.get("tandemd", {}):
                p["tandemd"]["events"] = stall_events(p)


def run_mode(mode, args, state, result, deadline, save):
    """Searches how many models `mode` hosts, probing only while time.monotonic() + a probe < `deadline`."""
    out = result["modes"][mode] = {"probes": []}
    probes = out["probes"]
    began = time.monotonic()
    daemon = mps = pool = stats_client = watch = None
    idle = args.idle_start and can_start_idle()
    out["background_start"] = "SCHED_IDLE" if idle else "normal"
    static_cap = min(args.max_count, args.mps_max_clients if mode == "mps" else args.max_count)
    steps = args.spawn_ahead if args.spawn_ahead is not None else SPAWN_AHEAD[mode]
    out["spawn_ahead"] = steps
    prespawn = not args.counts and (args.prespawn or PRESPAWN[mode])
    out["prespawn"] = prespawn

    def new_pool(backend, **kw):
        p = Pool(backend, args, state["specs"], idle=idle, **kw)
        for k, c in enumerate(ladder(min(args.start, static_cap), spawned_first(args, static_cap, steps, prespawn))):
            p.spawn(c, idle=k > 0)  # one spawn per count: the first probe waits only for its own workers
        return p

    try:
        if mode == "tandem":
            # Many small request streams per lane: iterations of several of
            # them wait on a lane's stream behind the running one, hiding
            # the turnaround between iterations (docs/scheduling.md).
            flags = ["--session_timeout=600", *args.tandemd_flags]
            for flag, value in TANDEMD_DEFAULTS.items():
                if not any(f.startswith(flag) for f in flags):
                    flags.append(f"{flag}={value}")
            daemon = bc.Daemon(bc.find_tandemd(args.tandemd), args.device, args.tandem_policy, flags,
                               log_dir=args.log_dir, name="tandemd-hosting").start()
            out["tandemd_flags"] = daemon.flags
            out["models_per_proc"] = args.models_per_proc
            pool = new_pool("tandem", endpoint=daemon.endpoint, per_proc=args.models_per_proc)
            if not args.no_preflight:  # while the workers start
                kinds = preflight(args, daemon.endpoint, state["kinds"], result)
                if kinds != state["kinds"]:  # the mix changes for every mode: start again with it
                    pool.close()
                    state["kinds"] = kinds
                    state["specs"] = inference_models.slot_specs(args.max_count, kinds, args.batches, args.seed)
                    result["config"]["kinds"] = kinds
                    pool = new_pool("tandem", endpoint=daemon.endpoint, per_proc=args.models_per_proc)
            import tandem
            stats_client = tandem.Client(endpoint=daemon.endpoint, name="hosting-stats")
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
            if mode == "mps":
                mps = Mps(args.mps_dir or tempfile.mkdtemp(prefix="tandem-bench-mps-"))
                mps.start()
                env = mps.env
                out["mps_max_clients"] = args.mps_max_clients
            watch = MemoryWatch(gpu=args.device == "cuda")
            if watch.base.get("gpu"):
                out["gpu_mem_used_before_mib"] = watch.base["gpu"][0]
            pool = new_pool("torch", env=env, mps=mode == "mps")
        out["specs"] = state["specs"]
        if prespawn:  # every worker ready before the first probe (see PRESPAWN)
            watch_registration = RegistrationWatch(stats_client) if stats_client is not None else None
            try:
                waited = pool.wait_ready(static_cap, deadline - probe_seconds(args, min(args.start, static_cap)))
            finally:  # the stats client is the main thread's again
                registration = watch_registration.stop() if watch_registration is not None else None
            out["prespawn_wait"] = waited
            if registration is not None:
                out["registration"] = registration
        out["setup_s"] = round(time.monotonic() - began, 2)

        def cap():
            options = [(args.max_count, "max_count")]
            if mode == "mps":
                options.append((args.mps_max_clients, "mps_client_limit"))
            failed = pool.cap_from_failure()
            if failed:
                options.append(failed[:2])
            fits = watch.limit() if watch else None
            if fits:
                options.append((fits[0], "memory"))
            return min(options, key=lambda o: o[0])

        def attempt(n):
            background = len(pool.preparing())
            try:
                r = run_probe(n, pool, args, stats_client, args.device)
            except ProbeFailed as e:
                return {"n": n, "pass": False, "error": str(e)}
            r["background_starting"] = background
            return r

        def settling(r):
            """Whether tandemd rebalanced during the probe: lane moves (levelling after new models began their
            streams) and the graph captures that follow each move or a first request happen once, after which a
            moved job stays put for 10 s; the steady state after them is what a count is about."""
            d = r.get("tandemd", {})
            return mode == "tandem" and (d.get("lane_moves", 0) > 0 or d.get("graph_captures", 0) > 0)

        def probe(n, ahead):
            if daemon is not None and not daemon.alive():
                raise RuntimeError(f"tandemd exited: {daemon.log_tail(1500)}")
            need = probe_seconds(args, n)
            if time.monotonic() + need > deadline:
                bc.log(f"  N={n}: skipped (budget: {max(0.0, deadline - time.monotonic()):.1f} s left of this "
                       f"mode's share, a probe takes {need:.1f} s)")
                return BUDGET
            if ahead:
                for c in ladder(n, ahead):
                    pool.spawn(c)
            ready = pool.wait_ready(n, deadline - need)
            if ready == "capped":
                return CAPPED
            if ready == "budget":
                bc.log(f"  N={n}: skipped (budget: its workers were not ready within this mode's share)")
                out["budget_note"] = f"the workers of N={n} were not ready within this mode's share"
                return BUDGET
            if watch:
                watch.measure([w.proc.pid for w in pool.workers if w.state == "ready"], quiet=not pool.preparing())
            r = attempt(n)
            if not r["pass"] and r.get("background_starting") and time.monotonic() + need <= deadline:
                r["discarded"] = (f"failed while {r['background_starting']} worker(s) were starting; repeated "
                                  "with them paused")
                probes.append(r)
                log_probe(r, "  -> repeated with them paused")
                paused = pool.pause_preparing()
                try:
                    r = attempt(n)
                finally:
                    pool.resume(paused)
                r.update(repeat=True, background_paused=len(paused), background_starting=0)
            elif not r["pass"] and settling(r) and time.monotonic() + need <= deadline:
                moved, captured = r["tandemd"]["lane_moves"], r["tandemd"]["graph_captures"]
                r["discarded"] = (f"failed while tandemd moved {moved} job(s) between lanes and captured {captured} "
                                  "graph(s); repeated once")
                probes.append(r)
                log_probe(r, "  -> repeated once, the moves and captures behind it")
                r = attempt(n)
                r.update(repeat=True)
            probes.append(r)
            save()
            log_probe(r)
            if "error" in r:
                return CAPPED  # the pool marked the worker that failed: the cap is below n now
            if not r["pass"]:
                pool.kill_preparing()  # they host counts above a failing one: no probe needs them any more
            return PASS if r["pass"] else FAIL

        searched = time.monotonic()
        out.update(search(probe, cap, args.start, args.resolution, counts=args.counts,
                          ahead_steps=steps))
        out["search_s"] = round(time.monotonic() - searched, 2)
        count, reason = cap()
        out["cap"] = {"count": count, "reason": reason}
        if reason == "memory" and watch.limit():
            out["cap"]["detail"] = watch.limit()[1]
        bc.log(f"  {mode}: {out['search']}")
    finally:
        if pool is not None:
            out["workers"] = pool.summary()
            closing = time.monotonic()
            pool.close()
            out["close_s"] = round(time.monotonic() - closing, 2)
        if watch is not None:
            out["memory"] = watch.summary()
        if stats_client is not None:
            stats_client.close()
        if daemon is not None:
            if not daemon.alive():
                out["tandemd_log_tail"] = daemon.log_tail()
            daemon.stop()
        if mps is not None:
            out["mps_control_log_tail"] = mps.log_tail()
            mps.stop()
        trim_models(out)
        out["mode_s"] = round(time.monotonic() - began, 2)


def ratio_bound(tandem_lower, other_lower):
    """How a ratio tandem / other relates to the ratio of the capacities."""
    return {(False, False): "bracketed", (True, False): "lower_bound", (False, True): "upper_bound",
            (True, True): "unknown"}[(tandem_lower, other_lower)]


def summary(result):
    modes = result["modes"]
    hosted = {m: r.get("hosted") for m, r in modes.items() if r.get("hosted") is not None}
    at_cap = {m: bool(r.get("at_cap")) for m, r in modes.items()}
    lower = {m: bool(modes[m].get("lower_bound", True)) for m in hosted}
    s = {"noshare": 1, "hosted": hosted, "at_cap": at_cap, "hosted_is_lower_bound": lower,
         "stop_reason": {m: modes[m].get("stop_reason") for m in hosted}, "salus_reported": SALUS,
         "definitions": {"noshare": "one model per GPU at a time: 1 by definition",
                         "tandem_over_noshare": "tandem hosted count / 1 (Salus: 42x)",
                         "tandem_over_mps": "tandem hosted count / mps hosted count (Salus: 7x)",
                         "tandem_over_timeslice": "tandem hosted count / timeslice hosted count",
                         "hosted_is_lower_bound": "per mode: the search stopped without reaching the mode's "
                                                  "capacity (at --max_count, out of time, or a worker failed); "
                                                  "false when a failing count brackets it or the mode can host "
                                                  "no more (memory, MPS client limit)",
                         "lower_bound": "tandem's count is a lower bound (hosted_is_lower_bound of tandem)",
                         "ratio_bounds": "per ratio: bracketed (both counts bracketed, within --resolution), "
                                         "lower_bound (tandem's count is a lower bound), upper_bound (the "
                                         "other's is), unknown (both are)"}}
    for mode, r in modes.items():  # what the GPU held at the hosted count
        at = next((p for p in r.get("probes", []) if p.get("n") == r.get("hosted") and "error" not in p
                   and not p.get("discarded")), None)
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
        bounds = {"tandem_over_noshare": "lower_bound" if lower["tandem"] else "bracketed"}
        for other in ("mps", "timeslice"):
            if hosted.get(other):
                s[f"tandem_over_{other}"] = round(t / hosted[other], 3)
                bounds[f"tandem_over_{other}"] = ratio_bound(lower["tandem"], lower[other])
        s["ratio_bounds"] = bounds
        s["lower_bound"] = lower["tandem"]
    result["summary"] = s
    return s


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of tandem,timeslice,mps")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--small", action="store_true", help="tiny models and short probes (CPU smoke test)")
    p.add_argument("--kinds", default=None, help="model kinds, round-robin over slots (default mlp,cnn,resnet18; "
                                                 "--small: mlp,cnn)")
    p.add_argument("--batches", default="1,2,4,8,16", help="batch sizes each slot draws from")
    p.add_argument("--rate", type=float, default=40.0, help="requests/s per model")
    p.add_argument("--p99_ms", type=float, default=20.0, help="latency target of every model's p99")
    p.add_argument("--min_requests", type=int, default=100,
                   help="timed requests per model a probe's p99 rests on: --duration_s defaults to this / --rate")
    p.add_argument("--duration_s", type=float, default=None, help="timed seconds per probe (default: see above)")
    p.add_argument("--warmup_s", type=float, default=0.3, help="untimed seconds before")
    p.add_argument("--grace_s", type=float, default=1.0,
                   help="a request not yet sent this long after the window is counted as unsent (a failed probe)")
    p.add_argument("--start", type=int, default=4, help="first count probed")
    p.add_argument("--max_count", type=int, default=None, help="most models probed (default 512; --small 32)")
    # 0.1: on the H200 the 0.25 default stopped Tandem's search at 320 passing / 384 failing, and the
    # question (Salus's 7x over MPS's 48 clients) is 337 (bench/results/2026-12-01-h200-hosting-modes4.json).
    p.add_argument("--resolution", type=float, default=0.1,
                   help="stop bisecting when the bracket is within this fraction of the passing count (0: exact)")
    p.add_argument("--counts", default=None, help="probe exactly these counts instead of searching, e.g. 8,16,32")
    p.add_argument("--models_per_proc", type=int, default=16,
                   help="tandem mode: models per client process, one thread each (1: a process per model)")
    p.add_argument("--spawn_ahead", type=int, default=None,
                   help="growth steps whose workers start (in the background) while the current count is probed "
                        f"(default per mode: {', '.join(f'{m} {k}' for m, k in SPAWN_AHEAD.items())})")
    p.add_argument("--prespawn", action="store_true",
                   help="start the workers of every count up to the cap at once and wait for all of them before "
                        "the first probe (always so in tandem mode)")
    p.add_argument("--idle_start", action=argparse.BooleanOptionalAction, default=True,
                   help="start workers under SCHED_IDLE, back to normal once due or ready (only as root, who may "
                        "switch back)")
    p.add_argument("--mps_max_clients", type=int, default=48,
                   help="the MPS server's client limit per GPU (48 on Volta and later unless configured)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--tandem_policy", default="pack", help="tandemd's --policy")
    p.add_argument("--tandemd_flags", default="",
                   help='extra tandemd flags, space-separated, after an = sign: --tandemd_flags="--max_lanes=8" '
                        f'(without --max_inflight_per_lane or --max_lanes, {INFLIGHT_PER_LANE} and {LANES} are added)')
    p.add_argument("--no_preflight", action="store_true", help="skip the tandem mode's per-kind check")
    p.add_argument("--log_dir", default=None, help="where tandemd's log goes (default: a temporary folder)")
    p.add_argument("--mps_dir", default=None, help="MPS pipe/log folders go here (default: a new folder in /tmp)")
    p.add_argument("--budget_s", type=float, default=None,
                   help="total seconds, shared among the modes still to run (MODE_WEIGHT) (default 105; --small: none)")
    p.add_argument("--close_reserve_s", type=float, default=4.0,
                   help="seconds of each mode's share kept for stopping its workers and daemons")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--plot", default=None, help="PNG of p99 vs N per mode")
    args = p.parse_args(argv)
    small_or = lambda small, full: small if args.small else full  # noqa: E731
    args.kinds = [k for k in (args.kinds or small_or("mlp,cnn", "mlp,cnn,resnet18")).split(",") if k]
    for k in args.kinds:
        if k not in inference_models.KINDS:
            p.error(f"--kinds: unknown {k!r}; one of {', '.join(inference_models.KINDS)}")
    args.batches = [int(b) for b in args.batches.split(",") if b]
    if args.rate <= 0 or args.min_requests < 1:
        p.error("--rate and --min_requests must be positive")
    args.duration_s = args.duration_s if args.duration_s is not None else args.min_requests / args.rate
    args.max_count = args.max_count if args.max_count is not None else small_or(32, 512)
    args.budget_s = args.budget_s if args.budget_s is not None else small_or(0, 105)
    args.counts = sorted({int(c) for c in args.counts.split(",") if c}) if args.counts else None
    if args.counts:
        args.max_count = max(args.max_count, max(args.counts))
    args.tandemd_flags = [f for f in args.tandemd_flags.split() if f]
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            p.error(f"--modes: unknown {m!r}; one of {', '.join(MODES)}")
    args.modes = [m for m in MODES if m in modes]  # tandem first (its preflight sets the mix), MPS last
    if min(args.models_per_proc, args.start, args.max_count, args.mps_max_clients) < 1 or (args.spawn_ahead or 0) < 0:
        p.error("--models_per_proc, --start, --max_count and --mps_max_clients must be positive")
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
                   "min_requests": args.min_requests, "warmup_s": args.warmup_s, "duration_s": args.duration_s,
                   "grace_s": args.grace_s, "start": args.start, "max_count": args.max_count,
                   "resolution": args.resolution, "counts": args.counts, "spawn_ahead": args.spawn_ahead,
                   "prespawn": args.prespawn, "models_per_proc": args.models_per_proc,
                   "mps_max_clients": args.mps_max_clients, "seed": args.seed,
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
           f"{args.warmup_s:g}+{args.duration_s:g} s per probe, up to {args.max_count} models")
    status = 0
    runnable = list(args.modes)
    if "mps" in runnable and mps_unavailable_reason(args.device):
        reason = mps_unavailable_reason(args.device)
        result["modes"]["mps"] = {"skipped": reason}
        bc.log(f"== mps skipped: {reason}")
        runnable.remove("mps")
    try:
        for k, mode in enumerate(runnable):
            # A weighted share of what is left, so no mode starves: Tandem's search goes furthest (on the H200
            # one process per model stops at 16-64, MPS at its client limit) and gets more.
            rest = runnable[k:]
            share = budget.left() * MODE_WEIGHT.get(mode, 1.0) / sum(MODE_WEIGHT.get(m, 1.0) for m in rest)
            deadline = time.monotonic() + share - args.close_reserve_s
            bc.log(f"== {mode}" + (f" ({share:.0f} s)" if share != float("inf") else ""))
            try:
                run_mode(mode, args, state, result, deadline, save)
            except (Exception, KeyboardInterrupt, bc.Terminated) as e:
                result["modes"][mode]["error"] = f"{type(e).__name__}: {e}"
                result["modes"][mode].setdefault("stop_reason", "error")
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
        result["modes"] = {m: result["modes"][m] for m in args.modes if m in result["modes"]}
        s = summary(result)
        save()
    print_summary(result, s)
    if args.plot:
        try:
            from hosting_plot import plot  # matplotlib only where a plot is asked for

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
            count = f"{'>=' if r.get('lower_bound') else ''}{r['hosted']}"
            bc.log(f"{mode:11s} {count:>6s}   {r.get('search', '')} [{r.get('mode_s')} s]")
    for key in ("tandem_over_noshare", "tandem_over_mps", "tandem_over_timeslice"):
        if key in s:
            bound = s.get("ratio_bounds", {}).get(key, "")
            bc.log(f"{key}: {s[key]} ({bound})")


if __name__ == "__main__":
    sys.exit(main())
