"""What a probe measured, in numbers: the summary of its models' stats, their stalls and latency split, the
machine's CPU over the window, and the daemon's journal lined up with the stalls; and what a mode's JSON keeps
of its probes (trim_models). Pure functions of their arguments, except the /proc reads of cpu_snapshot, so the
tests need neither a GPU nor a daemon.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import daemon_stats  # noqa: E402

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


def summarize_probe(n, models, args, solo_ms):
    """A probe of n models from their stats (worker.StreamRecord.stats, in slot order): whether it passed
    (every one of the n models reported, none failed or left a request unsent, every p99 <= --p99_ms), the
    worst and typical latencies, the stalls, the latency split and each model's numbers (with `solo_ms`, by id:
    its latency alone)."""
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
                                          "p99_ms", "max_ms", "mean_ms")} | {"solo_ms": solo_ms.get(m["id"])}
                   for m in models],
    }


# tandemd's --max_inflight_per_lane for hosting: with 4, a lane's stream


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


def cpu_snapshot(pids):
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


def daemon_window(before, after, window_start, duration_s, stalls):
    """tandemd's account of a probe from daemon_stats snapshots before and after it (None unless both are
    usable): its memory, the window's counters and loop, the whole timed window's journal per kind, and the
    events the JSON keeps (probe_events, as seconds into the window). Each stall bin of `stalls` (stall_bins'
    "top", seconds into the window) gets what the journal shows beside it, as "tandemd"."""
    window = daemon_stats.delta(before, after)
    if window is None:
        return None
    events = window.pop("events")
    out = {"persistent_mib": round(after["persistent_bytes"] / 2**20, 1),
           "lane_mib": round(after["lane_bytes"] / 2**20, 1),
           "warm_steps_total": after.get("warm_steps"), **window}
    out["journal"] = daemon_stats.summarize(daemon_stats.near(events, window_start, window_start + duration_s))
    stall_times = [window_start + b["at_s"] for b in stalls]
    for b, t in zip(stalls, stall_times):
        b["tandemd"] = daemon_stats.summarize(daemon_stats.near(events, *event_window(t)))
    out["events"] = [{"at_s": round(e["t"] - window_start, 4), **{k: v for k, v in e.items() if k != "t"}}
                     for e in probe_events(events, window_start, duration_s, stall_times)]
    return out
