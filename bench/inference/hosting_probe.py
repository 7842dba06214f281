"""One probe of a hosting mode: n models' request streams at once for --warmup_s + --duration_s, through the
mode's pool (hosting_pool.Pool or hosting_server.ServerHost), with the machine's CPU, the GPU's memory and
tandemd's account of the window beside it (hosting_stats); and its line in the log.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import bench_common as bc  # noqa: E402
import daemon_stats  # noqa: E402

from hosting_memory import gpu_memory_mib  # noqa: E402
from hosting_stats import STALL_BIN_S, cpu_during, cpu_snapshot, daemon_window, summarize_probe  # noqa: E402

# Seconds from a probe's start to its streams' start: every host has its command by then (plus 2 ms a model).
START_DELAY_S = 0.3


def probe_seconds(args, n):
    """Wall seconds one probe of n models may take (start delay, window, grace, collection)."""
    return START_DELAY_S + 0.002 * n + args.warmup_s + args.duration_s + args.grace_s + 0.5


def run_probe(n, pool, args, stats_client, device):
    """Runs slots 0..n-1 of `pool` once (their hosts ready) and returns hosting_stats.summarize_probe of it with
    the GPU's memory in use mid-window (CUDA), the CPU over the window, the pool's go_notes() and, with a
    `stats_client` of tandemd, daemon_window(). ProbeFailed when a host it needs died or did not answer."""
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
    worker_pids = pool.ready_pids()
    # The process that serves (under a keeper, server/standby.h, the keeper's child).
    daemon_pid = (before.get("worker_pid") or before.get("pid")) if before and "error" not in before else None
    pids = worker_pids + ([daemon_pid] if daemon_pid else [])
    cpu = {}

    def sample_cpu():
        for key, at in (("a", start_at + args.warmup_s), ("b", start_at + args.warmup_s + args.duration_s)):
            delay = at - time.time()
            if delay > 0:
                time.sleep(delay)
            cpu[key] = cpu_snapshot(pids)

    samplers = [threading.Thread(target=sample_cpu, daemon=True)]
    if device == "cuda":
        samplers.append(threading.Thread(target=sample_memory, daemon=True))
    for t in samplers:
        t.start()
    models = pool.go(n, cmd)
    for t in samplers:
        t.join(timeout=30)
    after = daemon_stats.snapshot(stats_client)
    out = summarize_probe(n, models, args, pool.solo_ms)
    out.update(mem)
    out.update(pool.go_notes())
    if "a" in cpu and "b" in cpu:
        out["cpu"] = cpu_during(cpu["a"], cpu["b"], args.duration_s, worker_pids, daemon_pid)
    tandemd = daemon_window(before, after, start_at + args.warmup_s, args.duration_s,
                            (out.get("stalls") or {}).get("top", []))
    if tandemd is not None:
        out["tandemd"] = tandemd
    out["wall_s"] = round(time.monotonic() - started, 2)
    return out


def log_probe(r, note=""):
    """Logs a probe's result: a line of numbers, then its stalls, the server's load generator or tandemd's loop."""
    if "error" in r:
        bc.log(f"  N={r['n']:3d}: FAILED: {r['error']}{note}")
        return
    p99 = "unbounded" if r["p99_ms_max"] is None else f"{r['p99_ms_max']:.2f} ms"
    bg = f", {r['background_starting']} worker(s) starting meanwhile" if r.get("background_starting") else ""
    c = r.get("cpu", {})
    cpu = ""
    if "machine_busy_fraction" in c:
        hosts = "server" if r.get("server") else "clients"
        cpu = (f"; CPU {c['machine_busy_fraction']:.0%} of {c['cores']} cores, {hosts} {c.get('workers_cores')}"
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
    srv = r.get("server")
    if srv:  # the server mode: did its in-process load generator keep up?
        late = srv.get("generator_late_ms") or {}
        bc.log(f"         server: {srv.get('threads')} threads, {srv.get('execution')}; generator late p50/p99/max "
               f"{late.get('p50')}/{late.get('p99')}/{late.get('max')} ms")
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
