#!/usr/bin/env python3
"""A hyper-parameter sweep on a real device: --jobs short training jobs of one model, alike except for their
learning rate, run three ways against a fresh tandemd each:

  sequential   one at a time, each alone: a job is started when the one before it has ended (the baseline a
               user gets by running the sweep in a loop); fifo policy;
  pack         all submitted at once under --policy=pack (side by side while it pays);
  fifo         all submitted at once under --policy=fifo (no sharing: the daemon runs them one after another,
               but registrations and client gaps overlap), which separates what packing gains from what
               merely submitting everything at once gains.

Each job is a client process (trace_worker.py) started beforehand with the captured step in memory; at its
start it registers its job (uploading the weights), runs its iterations with 2 in flight and closes it. The
length of a job comes from a solo calibration (--target_s seconds of training at the solo rate).

Reported: each mode's makespan (first submission to the last job's last iteration), the speedup over
sequential, and the utilization = the sum of the jobs' solo device time (from the sequential run: each job's
device seconds while alone) / makespan; per job its learning rate, times, lane, device seconds and final loss.

    python3 bench/traces/sweep.py --out /tmp/out/sweep.json                        # on the GPU machine, ~1.5 min
    python3 bench/traces/sweep.py --device cpu --small --out /tmp/sweep.json       # smoke test
"""

import argparse
import sys
import tempfile

import trace_common as tc

bc = tc.bc

MODES = ("sequential", "pack", "fifo")
MODE_POLICY = {"sequential": "fifo", "pack": "pack", "fifo": "fifo"}
MIN_MODE_S = 10  # a mode's share below this completes too few jobs to compare


def learning_rates(count, low, high):
    """count rates spaced evenly on a log scale from low to high."""
    if count == 1:
        return [low]
    return [round(low * (high / low) ** (k / (count - 1)), 6) for k in range(count)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tc.add_common_flags(p)
    p.add_argument("--model", default="fcn5", help="the swept model")
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--target_s", type=float, default=None,
                   help="solo seconds of training per job (default 1.0; --small 0.4)")
    p.add_argument("--lr_range", default="0.001,0.1", help="lowest,highest learning rate (log-spaced)")
    p.add_argument("--modes", default=",".join(MODES), help="subset of sequential,pack,fifo, in order")
    p.add_argument("--depth", type=int, default=2, help="iterations each job keeps in flight")
    p.add_argument("--calibrate_s", type=float, default=1.0)
    p.add_argument("--max_mode_s", type=float, default=60, help="longest one mode may run")
    args = p.parse_args()
    if args.replot:
        return tc.replot(plot, args.replot, args.plot)
    if not args.out:
        p.error("--out is required")
    args.device = tc.device_of(args)
    model = bc.parse_models(args.model)[0]
    target_s = args.target_s or (0.4 if args.small else 1.0)
    low, high = (float(x) for x in args.lr_range.split(","))
    lrs = learning_rates(args.jobs, low, high)
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            p.error(f"--modes: unknown {m!r}")
    bc.raise_on_signals()
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(args.device),
              "config": {"model": model, "description": bc.DESCRIPTIONS.get(model), "jobs": args.jobs,
                         "target_s": target_s, "learning_rates": lrs, "modes": modes, "depth": args.depth,
                         "small": args.small, "calibrate_s": args.calibrate_s, "max_mode_s": args.max_mode_s,
                         "mode_share_weights": "sequential 1.5, others 1",
                         "optimizer": f"SGD momentum={bc.MOMENTUM}, lr per job"},
              "spec": None, "calibration": None, "modes": {}}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    spec_dir = args.spec_dir or tempfile.mkdtemp(prefix="tandem-trace-specs-")
    pool = daemon = None
    status = 0
    bc.log(f"sweep on {result['meta']['gpu']}: {args.jobs} x {model}, lr {low}..{high}; modes {', '.join(modes)}")
    try:
        spec, capture_s = tc.save_job_spec(spec_dir, model, args.small)
        result["spec"] = {"capture_s": None if capture_s is None else round(capture_s, 3),
                          "cached": capture_s is None}
        pool = tc.WorkerPool(args.jobs)
        pool.load({k: spec for k in range(args.jobs)})
        daemon = tc.start_daemon(args, "fifo", "tandemd-sweep-calibrate")
        cal = result["calibration"] = tc.calibrate(pool, 0, daemon.endpoint, spec, f"calibrate-{model}",
                                                   timed_s=args.calibrate_s, depth=args.depth)
        daemon.stop()
        daemon = None
        iterations = max(5, round(target_s * 1e3 / cal["wall_ms"]))
        # What the budget holds, the baseline (one job at a time) and PACK first.
        run = tc.fitting(modes, ("sequential", "pack", "fifo"), budget.left(), MIN_MODE_S, at_least=2)
        for mode in modes:
            if mode not in run:
                result["modes"][mode] = {"error": f"skipped: the budget holds {', '.join(run)}"}
                bc.log(f"== {mode}: skipped (the budget holds {', '.join(run)})")
        modes = run
        # The sequential run, the longest, gets its share (weights: sequential 1.5, the others 1) and must fit it.
        weights = [1.5 if m == "sequential" else 1.0 for m in modes]
        if "sequential" in modes and args.budget_s:
            allowed = budget.left() * 1.5 / sum(weights) - 6
            fixed = cal["register_s"] + cal["first_iteration_s"]
            fit = int((allowed / args.jobs - fixed) * 1e3 / cal["wall_ms"])
            if fit < iterations:
                bc.log(f"  {iterations} iterations per job would not fit one job at a time into {allowed:.0f} s: "
                       f"{max(5, fit)}")
                result["config"]["iterations_cut_from"] = iterations
                iterations = max(5, fit)
        result["config"]["iterations"] = iterations
        bc.log(f"  calibration: {cal['wall_ms']:.3f} ms/iter wall, {cal['run_ms']:.3f} ms device, registration "
               f"{cal['register_s']:.2f} s, first iteration {cal['first_iteration_s']:.2f} s -> {iterations} "
               f"iterations per job")
        save()

        for n, mode in enumerate(modes):
            share = min(args.max_mode_s, budget.left() * weights[n] / sum(weights[n:]) - 6)
            if share < 5:
                result["modes"][mode] = {"error": "skipped: budget spent"}
                bc.log(f"== {mode}: skipped (budget spent)")
                continue
            bc.log(f"== {mode} (policy {MODE_POLICY[mode]}, deadline {share:.0f} s)")
            daemon = tc.start_daemon(args, MODE_POLICY[mode], f"tandemd-sweep-{mode}")
            jobs = [{"worker": k, "spec": spec, "name": f"{mode}-lr{lr:g}", "iterations": iterations,
                     "arrival_s": 0.0, "lr": lr, "depth": args.depth} for k, lr in enumerate(lrs)]
            results, _ = tc.replay(pool, daemon, jobs, share, sequential=(mode == "sequential"))
            daemon.stop()
            daemon = None
            result["modes"][mode] = summarize_mode(mode, lrs, results, iterations)
            save()
        compare(result)
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        status = bc.stopped_early("sweep", result, e)
    finally:
        tc.release(daemon, pool, None if args.spec_dir else spec_dir)
        save()
    bc.log(f"wrote {args.out}")
    return max(status, tc.draw(plot, result, tc.plot_path(args)))


def summarize_mode(mode, lrs, results, iterations):
    jobs = [{"lr": lr, **(r or {"error": "no result"})} for lr, r in zip(lrs, results)]
    complete = [j for j in jobs if "finish_s" in j and not j.get("stopped")]
    out = {"policy": MODE_POLICY[mode], "completed": len(complete), "jobs": jobs}
    if len(complete) == len(jobs):
        out["makespan_s"] = round(max(j["finish_s"] for j in jobs) - min(j["arrival_s"] for j in jobs), 4)
        out["device_s"] = round(sum(j["device_s"] for j in jobs), 4)
        out["lanes"] = sorted({j["lane"] for j in jobs})
        out["devices"] = sorted({j["device"] for j in jobs})
        out["register_s_total"] = round(sum(j["register_s"] for j in jobs), 4)
        bc.log(f"  {mode}: makespan {out['makespan_s']:.2f} s ({len(jobs)} jobs x {iterations} iterations), "
               f"lanes {out['lanes']} on {', '.join(out['devices'])}")
    else:
        bc.log(f"  {mode}: only {len(complete)}/{len(jobs)} jobs completed")
    return out


def compare(result):
    """Speedup over sequential and utilization, from the sequential run's solo device seconds (else the
    calibration's device time per iteration)."""
    modes = result["modes"]
    seq = modes.get("sequential", {})
    iterations = result["config"].get("iterations", 0)
    if seq.get("makespan_s"):
        solo_device = seq["device_s"]
        source = "sequential run"
    else:
        solo_device = result["calibration"]["run_ms"] / 1e3 * iterations * result["config"]["jobs"]
        source = "calibration"
    result["solo_device_s"] = round(solo_device, 4)
    result["solo_device_source"] = source
    bc.log(f"mode          makespan  speedup  utilization   (solo device time {solo_device:.2f} s, from the {source})")
    for name, m in modes.items():
        if not m.get("makespan_s"):
            bc.log(f"{name:12s}  {m.get('error', 'incomplete')}")
            continue
        m["utilization"] = round(solo_device / m["makespan_s"], 4)
        if seq.get("makespan_s"):
            m["speedup_vs_sequential"] = round(seq["makespan_s"] / m["makespan_s"], 4)
        speedup = f"{m['speedup_vs_sequential']:.2f}x" if "speedup_vs_sequential" in m else "-"
        bc.log(f"{name:12s} {m['makespan_s']:9.2f} {speedup:>9s} {m['utilization']:11.2f}")
    losses = [(j["lr"], j.get("last_loss")) for j in (modes.get("pack") or seq).get("jobs", [])
              if j.get("last_loss") is not None]
    if losses:
        best = min(losses, key=lambda x: x[1])
        result["best_lr"] = {"lr": best[0], "final_loss": best[1]}
        bc.log(f"lowest final loss: lr {best[0]:g} ({best[1]:.4g})")


def plot(result, path):
    plt = tc.pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 2]})
    names = [n for n, m in result["modes"].items() if m.get("makespan_s")]
    bars = ax0.bar(names, [result["modes"][n]["makespan_s"] for n in names], color="tab:blue")
    for b, n in zip(bars, names):
        m = result["modes"][n]
        note = f"util {m.get('utilization', 0):.2f}"
        if "speedup_vs_sequential" in m:
            note += f"\n{m['speedup_vs_sequential']:.2f}x"
        ax0.annotate(note, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax0.set_ylabel("makespan (s)")
    ax0.grid(axis="y", alpha=0.3)
    colors = {"sequential": "tab:gray", "pack": "tab:green", "fifo": "tab:orange"}
    row = 0
    ticks, labels = [], []
    for n, m in result["modes"].items():
        for k, j in enumerate(m.get("jobs", [])):
            if "finish_s" not in j:
                continue
            ax1.plot([j["arrival_s"], j["registered_s"]], [row, row], color=colors.get(n, "k"), alpha=0.35, lw=4)
            ax1.plot([j["registered_s"], j["finish_s"]], [row, row], color=colors.get(n, "k"), lw=4,
                     label=n if k == 0 else None)
            ticks.append(row)
            labels.append(f"{n[:4]} lr {j['lr']:g}")
            row += 1
        row += 1
    ax1.set_yticks(ticks)
    ax1.set_yticklabels(labels, fontsize=6)
    ax1.invert_yaxis()
    ax1.set_xlabel("seconds from the first submission (light: registration)")
    ax1.grid(axis="x", alpha=0.3)
    if ticks:
        ax1.legend(fontsize=8, loc="lower right")
    meta, cfg = result["meta"], result["config"]
    fig.suptitle(f"sweep: {cfg['jobs']} x {cfg['model']}, {cfg.get('iterations', '?')} iterations each - "
                 f"{meta['gpu']}, {(meta['date'] or '')[:10]}, {(meta['git_commit'] or '')[:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
