#!/usr/bin/env python3
"""Quality of service on a real device: a high-priority training job beside one and then two best-effort jobs.

Systems (in this order, --systems):
  tandem        the jobs through one tandemd started with --policy=priority: the high-priority job's hint is
                priority 1, the best-effort jobs' 0 (one lane per level; best effort fills the high-priority
                job's gaps);
  time_slicing  the same jobs as native PyTorch processes at once (the GPU's default sharing);
  mps           the same processes as clients of an MPS server started for the phase and always stopped.
Native processes have no priorities between them: the GPU cannot tell the jobs apart.

Method (the workers and the barrier of bench/pairs/pair_matrix.py, whose worker processes run the jobs): per
system, a best-effort job alone (2 in flight), then for each --hp_depths value d: the high-priority job alone
(d iterations in flight, at d = 1 --think_ms between iterations, timed for --solo_s after a warm-up), and the
high-priority job timed over the same number of iterations beside k = 1 .. --max_best_effort best-effort jobs
that run as fast as they can from the start until it has finished. d = 2 is how a training job runs (its next
iteration always waits behind the running one, so the priority policy never has a gap to fill); d = 1 leaves
the device a gap after each iteration (the round trip, plus --think_ms), which best effort fills, at iteration
granularity. Reported per d and k: the high-priority job's slowdown (ms per iteration beside them / alone in
the same system; the goal is within 5%), also against the native solo time, and the best-effort throughput
(their iterations per second together / one best-effort job's alone).

    python3 bench/traces/qos.py --out /tmp/out/qos.json                        # on the GPU machine, ~2 min
    python3 bench/traces/qos.py --device cpu --small --out /tmp/qos.json       # smoke test (no MPS)
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pairs"))

import trace_common as tc  # noqa: E402
import pair_matrix as pm  # noqa: E402  (its workers, barrier, Mps)
import daemon_stats  # noqa: E402  (bench/models, on the path through trace_common)

bc = tc.bc

SYSTEMS = ("tandem", "time_slicing", "mps")


class Slots:
    """pair_matrix worker processes (slots A, B, C, ...), started on first use; view(indices) gives run_config
    the ones a configuration uses (the high-priority job always in slot A, best effort in B, C, ...)."""

    def __init__(self, args, count, env=None):
        self.args, self.count, self.env = args, count, env
        self.procs = None

    def view(self, indices):
        slots = self

        class View:
            def get(self):
                if slots.procs is None:
                    slots.procs = [pm.WorkerProcess(chr(ord("A") + i), slots.args, slots.env)
                                   for i in range(slots.count)]
                return [slots.procs[i] for i in indices]

            def close(self):
                slots.close()

        return View()

    def close(self):
        if self.procs:
            for w in self.procs:
                w.close()
        self.procs = None


def measure_system(system, args, slots, result, endpoint=None, deadline=None):
    """Fills result["systems"][system]: the best-effort job alone, then per high-priority depth the
    high-priority job alone and beside 1 .. max_best_effort best-effort jobs."""
    kind = "tandem" if system == "tandem" else "native"
    out = result["systems"].setdefault(system, {"be_solo": None, "hp": []})
    hp, be = args.high, args.best_effort

    def job(model, **kw):
        return {"model": model, "system": kind, "endpoint": endpoint, **kw}

    stats_client = None
    if endpoint is not None:
        import tandem
        stats_client = tandem.Client(endpoint=endpoint, name="qos-stats")
    window = {}

    def run(what, indices, jobs):
        """run_config's results, or {"error": ...} (failed, or skipped when the system's share is spent).
        Through tandemd, window["tandemd"] is the daemon's account of the configuration (daemon_stats)."""
        window.clear()
        if deadline is not None and deadline - time.monotonic() < args.min_config_s:
            bc.log(f"  {system} {what}: skipped (budget spent)")
            return {"error": "skipped: budget spent"}
        before = daemon_stats.snapshot(stats_client)
        try:
            results = [_strip(r) for r in pm.run_config(slots.view(indices), jobs, args)]
        except pm.ConfigFailed as e:
            bc.log(f"  {system} {what}: FAILED: {e}")
            return {"error": str(e)}
        d = daemon_stats.delta(before, daemon_stats.snapshot(stats_client))
        if d is not None:
            window["tandemd"] = d
            log_daemon_window(d)
        return results

    r = run(f"{be} alone", [1], [job(be, timed_s=args.solo_s)])
    if isinstance(r, dict):
        out["be_solo"] = r
        return out
    be_solo = out["be_solo"] = r[0]
    be_solo_its = 1e3 / be_solo["ms_per_iter"]
    bc.log(f"  {system} {be} alone: {be_solo['ms_per_iter']:.3f} ms/iter ({be_solo_its:.1f} it/s)")
    for depth in args.hp_depths:
        # Think time only at depth 1: at depth 2 a pause longer than the iteration's device time minus the
        # round trip would leave the stream idle between iterations (a 2 ms pause beside fcn5's 2.2 ms did:
        # 2.64 ms per iteration alone, host-bound), which is not how a training job runs.
        think_ms = args.think_ms if depth == 1 else 0.0
        mode = {"hp_depth": depth, "think_ms": think_ms, "hp_solo": None, "shared": []}
        out["hp"].append(mode)

        def hp_job(**kw):
            return job(hp, priority=1, depth=depth, think_ms=think_ms, **kw)

        r = run(f"{hp} alone (depth {depth})", [0], [hp_job(timed_s=args.solo_s)])
        if isinstance(r, dict):
            mode["hp_solo"] = r
            continue
        hp_solo = mode["hp_solo"] = {**r[0], **window}
        bc.log(f"  {system} {hp} alone, depth {depth}: {hp_solo['ms_per_iter']:.3f} ms/iter")
        n = max(args.min_iters, int(hp_solo["iters"]))
        for k in range(1, args.max_best_effort + 1):
            r = run(f"{hp} (depth {depth}) + {k} x {be}", list(range(k + 1)),
                    [hp_job(iters=n)] + [job(be, priority=0, open_ended=True) for _ in range(k)])
            if isinstance(r, dict):
                mode["shared"].append({"best_effort_jobs": k, **r})
                continue
            hp_r, be_rs = r[0], r[1:]
            be_its = sum(x.get("its_per_s") or 0 for x in be_rs)
            entry = {"best_effort_jobs": k, "hp": hp_r, "best_effort": be_rs,
                     "hp_slowdown": round(hp_r["ms_per_iter"] / hp_solo["ms_per_iter"], 4),
                     "be_its_per_s": round(be_its, 4), "be_throughput": round(be_its / be_solo_its, 4), **window}
            mode["shared"].append(entry)
            bc.log(f"  {system} {hp} (depth {depth}) + {k} x {be}: high priority {hp_r['ms_per_iter']:.3f} "
                   f"ms/iter (slowdown {entry['hp_slowdown']:.3f}x), best effort {be_its:.1f} it/s "
                   f"({entry['be_throughput']:.2f} of one alone)")
    if stats_client is not None:
        stats_client.close()
    return out


def log_daemon_window(d):
    """One line of tandemd's side of a configuration: per lane kernel/occupied seconds, the loop's busy time and
    its work items' mean time and queue wait."""
    lanes = ", ".join(f"{x['lane']}: {x['busy_s']:.2f}/{x['occupied_s']:.2f}" for x in d["per_lane"])
    items = ", ".join(f"{x['name']} {x['count']} x {x['mean_us']} us (wait {x['mean_wait_us']})"
                      for x in d["loop_top"][:4])
    bc.log(f"    tandemd: lanes kernel/occupied s {lanes or '-'}; loop busy {d['loop_busy_s']} s: {items or '-'}")


def _strip(r):
    """The worker's event without the bulky registration details."""
    keep = ("iters", "wall_s", "ms_per_iter", "run_ms", "its_per_s", "extra_iters", "prepare_s", "stopped_by")
    out = {k: r[k] for k in keep if k in r}
    if "registration" in r:
        out["lane"] = int(r["registration"].get("lane", 0))
    return out


def _modes(system_result):
    return system_result.get("hp", []) if isinstance(system_result, dict) else []


def summarize(result):
    """Adds each shared entry's slowdown against the native solo time and whether it meets the 5% goal;
    prints a table."""
    systems = result["systems"]
    native = {m["hp_depth"]: (m.get("hp_solo") or {}).get("ms_per_iter")
              for m in _modes(systems.get("time_slicing"))}
    bc.log("system         depth  k  hp solo ms  hp shared ms  slowdown  vs native solo  be throughput")
    for name, s in systems.items():
        for mode in _modes(s):
            solo = (mode.get("hp_solo") or {}).get("ms_per_iter")
            for e in mode["shared"]:
                if "hp" not in e:
                    bc.log(f"{name:14s} {mode['hp_depth']:5d} {e['best_effort_jobs']:2d}  {e.get('error', '')}")
                    continue
                if native.get(mode["hp_depth"]):
                    e["hp_vs_native_solo"] = round(e["hp"]["ms_per_iter"] / native[mode["hp_depth"]], 4)
                e["within_5_percent"] = e["hp_slowdown"] <= 1.05
                vs_native = f"{e['hp_vs_native_solo']:.3f}x" if "hp_vs_native_solo" in e else "-"
                bc.log(f"{name:14s} {mode['hp_depth']:5d} {e['best_effort_jobs']:2d} {solo:11.3f} "
                       f"{e['hp']['ms_per_iter']:13.3f} {e['hp_slowdown']:8.3f}x "
                       f"{vs_native:>15s} {e['be_throughput']:14.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--small", action="store_true", help="tiny models (CPU smoke test)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="subset of tandem,time_slicing,mps")
    p.add_argument("--high", default="fcn5", help="the high-priority job's model")
    p.add_argument("--best_effort", default="resnet50", help="the best-effort jobs' model")
    p.add_argument("--max_best_effort", type=int, default=2, help="best-effort jobs beside it: 1 .. this")
    p.add_argument("--hp_depths", default="2,1",
                   help="iterations the high-priority job keeps in flight, one measurement per value: 2 is how a "
                        "training job runs (the next iteration waits behind the running one), 1 leaves the "
                        "device a gap after each iteration (the round trip, plus --think_ms)")
    p.add_argument("--think_ms", type=float, default=0.0,
                   help="pause of the high-priority job between iterations at depth 1 (none at depth 2 and more: "
                        "its next iteration is always queued)")
    p.add_argument("--preemption", choices=("iteration", "op"), default="op",
                   help="tandemd's --preemption: best-effort iterations pause only between iterations, or between "
                        "ranges of ops (the daemon's default; docs/scheduling.md)")
    p.add_argument("--stream_priorities", choices=("true", "false"), default="true",
                   help="tandemd's --stream_priorities: the high-priority job's lane runs on a higher CUDA stream "
                        "priority (its kernels' blocks are dispatched first), or all lanes at the default")
    p.add_argument("--solo_s", type=float, default=1.0, help="timed seconds of a solo run (sets the iterations)")
    p.add_argument("--warmup_s", type=float, default=0.5)
    p.add_argument("--min_iters", type=int, default=5)
    p.add_argument("--depth", type=int, default=2, help="iterations in flight of a best-effort job")
    p.add_argument("--tandemd", default=None)
    p.add_argument("--tandemd_flags", default="",
                   help='extra tandemd flags, space-separated, after an = sign: '
                        '--tandemd_flags="--preemption_segment_nodes=8"')
    p.add_argument("--log_dir", default=None)
    p.add_argument("--mps_dir", default=None, help="MPS pipe/log folders go here (default: a new folder in /tmp)")
    p.add_argument("--prepare_timeout", type=float, default=240)
    p.add_argument("--max_config_s", type=float, default=30)
    p.add_argument("--min_config_s", type=float, default=6)
    p.add_argument("--budget_s", type=float, default=0)
    p.add_argument("--out", default=None, help="JSON file to write (required unless --replot)")
    p.add_argument("--plot", default=None, help="PNG file to draw (default: --out with .png)")
    p.add_argument("--replot", default=None, metavar="JSON", help="only draw the plot of a JSON file written earlier")
    args = p.parse_args()
    if args.replot:
        return tc.replot(plot, args.replot, args.plot)
    if not args.out:
        p.error("--out is required")
    args.device = bc.torch_device(args.device)
    args.high = bc.parse_models(args.high)[0]
    args.best_effort = bc.parse_models(args.best_effort)[0]
    args.hp_depths = [int(x) for x in args.hp_depths.split(",") if x.strip()]
    if not args.hp_depths or min(args.hp_depths) < 1:
        p.error("--hp_depths: one or more numbers >= 1")
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            p.error(f"--systems: unknown {s!r}")
    bc.raise_on_signals()
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(args.device),
              "config": {"high": args.high, "best_effort": args.best_effort,
                         "descriptions": {m: bc.DESCRIPTIONS[m] for m in (args.high, args.best_effort)},
                         "max_best_effort": args.max_best_effort, "hp_depths": args.hp_depths,
                         "think_ms": args.think_ms, "be_depth": args.depth, "solo_s": args.solo_s,
                         "warmup_s": args.warmup_s, "min_iters": args.min_iters, "systems": systems,
                         "small": args.small, "tandem_policy": "priority", "preemption": args.preemption,
                         "tandemd_flags": args.tandemd_flags,
                         "stream_priorities": args.stream_priorities == "true",
                         "optimizer": f"SGD lr={bc.LR} momentum={bc.MOMENTUM}", **bc.numerics()},
              "systems": {}}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    mps_reason = pm.mps_unavailable_reason(args.device) if "mps" in systems else None
    runnable = [s for s in systems if not (s == "mps" and mps_reason)]

    def deadline(system):
        """This system's share of what is left of the budget: Tandem's counts double when its workers capture
        the models on the CPU before registering them (not when they register from the run's job specs)."""
        rest = runnable[runnable.index(system):]
        weight = {"tandem": 1.0 if os.environ.get("BENCH_SPEC_DIR") else 2.0}
        return time.monotonic() + budget.left() * weight.get(system, 1.0) / sum(weight.get(r, 1.0) for r in rest)

    slots = Slots(args, args.max_best_effort + 1)
    daemon = mps = None
    status = 0
    bc.log(f"QoS on {result['meta']['gpu']}: {args.high} (high priority) beside 1..{args.max_best_effort} x "
           f"{args.best_effort} (best effort); systems {', '.join(systems)}")
    try:
        if "tandem" in systems:
            bc.log("== tandem (policy priority)")
            extra = [f"--preemption={args.preemption}", f"--stream_priorities={args.stream_priorities}",
                     *args.tandemd_flags.split()]
            daemon = tc.start_daemon(args, "priority", "tandemd-qos", extra=extra)
            measure_system("tandem", args, slots, result, daemon.endpoint, deadline("tandem"))
            daemon.stop()
            daemon = None
            save()
        if "time_slicing" in systems:
            bc.log("== time-slicing (native PyTorch processes)")
            measure_system("time_slicing", args, slots, result, deadline=deadline("time_slicing"))
            save()
        slots.close()
        if "mps" in systems:
            if mps_reason:
                result["systems"]["mps"] = {"skipped": mps_reason}
                bc.log(f"== MPS skipped: {mps_reason}")
            else:
                bc.log("== MPS (native PyTorch processes as MPS clients)")
                mps = pm.Mps(args.mps_dir or tempfile.mkdtemp(prefix="tandem-bench-mps-"))
                mps.start()
                slots = Slots(args, args.max_best_effort + 1, env=mps.env)
                measure_system("mps", args, slots, result, deadline=deadline("mps"))
                slots.close()
                result["systems"]["mps"]["control_log_tail"] = mps.log_tail()
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        status = bc.stopped_early("qos", result, e)
    finally:
        slots.close()
        if daemon is not None:
            daemon.stop()
        if mps is not None:
            mps.stop()
        try:
            summarize(result)
        except Exception as e:  # the summary must not hide the measurements
            bc.log(f"summary failed: {e}")
        save()
    bc.log(f"wrote {args.out}")
    return max(status, tc.draw(plot, result, args.plot or os.path.splitext(args.out)[0] + ".png"))


def plot(result, path):
    plt = tc.pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    series = [(f"{name}, depth {m['hp_depth']}", m) for name, s in result["systems"].items() for m in _modes(s)
              if any("hp" in e for e in m["shared"])]
    kmax = result["config"]["max_best_effort"]
    width = 0.8 / max(1, len(series))
    for i, (label, m) in enumerate(series):
        done = [e for e in m["shared"] if "hp" in e]
        xs = [e["best_effort_jobs"] + (i - (len(series) - 1) / 2) * width for e in done]
        ax0.bar(xs, [e["hp_slowdown"] for e in done], width, label=label)
        ax1.bar(xs, [e["be_throughput"] for e in done], width, label=label)
    ax0.axhline(1.05, color="k", ls="--", lw=0.8, label="goal: 1.05")
    ax0.set_ylabel("high-priority ms/iter: beside them / alone")
    ax1.set_ylabel("best-effort it/s together / one alone")
    for ax in (ax0, ax1):
        ax.set_xticks(range(1, kmax + 1))
        ax.set_xlabel("best-effort jobs beside it")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    meta, cfg = result["meta"], result["config"]
    fig.suptitle(f"QoS: {cfg['high']} (high priority, think {cfg['think_ms']} ms at depth 1) beside "
                 f"{cfg['best_effort']} (best effort) - {meta['gpu']}, {(meta['date'] or '')[:10]}, "
                 f"{(meta['git_commit'] or '')[:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
