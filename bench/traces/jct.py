#!/usr/bin/env python3
"""Job completion time on a real device: a seeded trace of training jobs arriving over time, replayed against
one tandemd per policy (fifo: one job at a time, the no-sharing baseline; fair; pack; srtf).

The trace (Salus's JCT experiment, scaled to minutes): --jobs jobs whose models are drawn from --models (the
reference models of bench/models/bench_common.py) and whose lengths are drawn from three classes, short /
medium / long, given as seconds of solo training (--lengths, weights --length_weights, each job's length
jittered by +-25%). Arrivals are a Poisson process whose rate gives the offered load --load (the mean solo
length over the mean gap between arrivals; the default 1.5 makes the ten jobs a busy period in which work
queues up, which is where policies differ); the first job arrives at 0.

Each job is a client process (trace_worker.py) started before the trace's clock runs, holding its captured
training step in memory: at its arrival it connects, registers the job (uploading its weights), runs its
iterations with 2 in flight and closes the job, as a training program would. Under srtf each job declares its
iteration count (hints.expected_iterations); the other policies get no hints. Before the trace, each model is
run alone on a fifo daemon of its own (calibration) to turn the lengths into iteration counts and to give each
job's solo time (registration + first iteration + the others at the solo rate), the baseline of its slowdown.
A model that fails there, or whose iteration takes more than a tenth of a short job, is left out of the trace
(recorded in the JSON).

Reported per policy and job: arrival, registration, first and last iteration, JCT (arrival to the last
iteration's result), device seconds, lane; per policy the mean / median / p90 / max JCT, the mean slowdown
(JCT / solo time) and the makespan, and FIFO's mean JCT over each policy's. The plot shows the CDF of JCT and
of slowdown per policy.

    python3 bench/traces/jct.py --out /tmp/out/jct.json                        # on the GPU machine, ~3 min
    python3 bench/traces/jct.py --device cpu --small --out /tmp/jct.json       # smoke test
"""

import argparse
import random
import sys
import tempfile

import trace_common as tc

bc = tc.bc

POLICIES = ("fifo", "fair", "pack", "srtf", "srtf_pack")
# Which policies a short budget keeps: FIFO, the baseline of every comparison, and SRTF, Salus's.
IMPORTANCE = ("fifo", "srtf", "pack", "fair", "srtf_pack", "priority")
MIN_POLICY_S = 20
LENGTH_CLASSES = ("short", "medium", "long")


def make_trace(seed, count, models, lengths, weights, load):
    """[{id, model, length_class, target_s, arrival_s}] and the arrival rate: seeded, platform-independent
    (Python's Mersenne Twister)."""
    rng = random.Random(seed)
    total_w = sum(weights)
    mean_len = sum(s * w for s, w in zip(lengths, weights)) / total_w
    rate = load / mean_len
    jobs, t = [], 0.0
    for k in range(count):
        if k:
            t += rng.expovariate(rate)
        model = models[rng.randrange(len(models))]
        u, c = rng.random() * total_w, 0
        while c < len(weights) - 1 and u >= weights[c]:
            u -= weights[c]
            c += 1
        target = lengths[c] * rng.uniform(0.75, 1.25)
        jobs.append({"id": k, "model": model, "length_class": LENGTH_CLASSES[c], "target_s": round(target, 3),
                     "arrival_s": round(t, 3)})
    return jobs, rate


def set_iterations(trace, calibration, min_iters):
    """Each job's iteration count (its target length at the model's solo rate) and solo time (registration,
    first iteration, the others at the solo rate)."""
    for j in trace:
        cal = calibration[j["model"]]
        j["iterations"] = max(min_iters, round(j["target_s"] * 1e3 / cal["wall_ms"]))
        j["solo_s"] = round(cal["register_s"] + cal["first_iteration_s"] +
                            (j["iterations"] - 1) * cal["wall_ms"] / 1e3, 4)


def fit_to(trace, calibration, allowed_s):
    """The factor (at most 1, at least 0.2) by which the training part of every job must shrink for the sum of
    the solo times to fit allowed_s; registrations and first iterations do not shrink."""
    fixed = sum(calibration[j["model"]]["register_s"] + calibration[j["model"]]["first_iteration_s"] for j in trace)
    training = sum(j["solo_s"] for j in trace) - fixed
    if fixed + training <= allowed_s or training <= 0:
        return 1.0
    return max(0.2, (allowed_s - fixed) / training)


def floats(text):
    return [float(x) for x in text.split(",") if x.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tc.add_common_flags(p)
    p.add_argument("--policies", default=",".join(POLICIES), help="policies to replay, in order")
    p.add_argument("--models", default=None, help="models of the trace (default fcn5,resnet50)")
    p.add_argument("--jobs", type=int, default=None, help="jobs in the trace (default 10; --small 8)")
    p.add_argument("--lengths", default=None,
                   help="solo seconds of a short,medium,long job (default 1,2.5,6; --small 0.25,0.6,1.5)")
    p.add_argument("--length_weights", default="0.5,0.3,0.2", help="how often each length class is drawn")
    p.add_argument("--load", type=float, default=1.5,
                   help="offered load: mean solo length / mean gap between arrivals (above 1: a busy period "
                        "in which work arrives faster than one job at a time can do it)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--depth", type=int, default=2, help="iterations each job keeps in flight")
    p.add_argument("--min_iters", type=int, default=3, help="fewest iterations of a job")
    p.add_argument("--calibrate_s", type=float, default=1.0, help="timed seconds of each model's solo run")
    p.add_argument("--max_trace_s", type=float, default=90, help="longest one policy's replay may run")
    args = p.parse_args()
    if args.replot:
        return tc.replot(plot, args.replot, args.plot)
    if not args.out:
        p.error("--out is required")
    args.device = tc.device_of(args)
    models = bc.parse_models(args.models or "fcn5,resnet50")
    count = args.jobs or (8 if args.small else 10)
    lengths = floats(args.lengths or ("0.25,0.6,1.5" if args.small else "1,2.5,6"))
    weights = floats(args.length_weights)
    if len(lengths) != 3 or len(weights) != 3 or min(lengths) <= 0 or min(weights) < 0 or sum(weights) <= 0:
        p.error("--lengths and --length_weights take three numbers (short, medium, long)")
    policies = [x for x in args.policies.split(",") if x]
    for x in policies:
        if x not in POLICIES + ("priority",):
            p.error(f"--policies: unknown {x!r}")
    bc.raise_on_signals()
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(args.device),
              "config": {"policies": policies, "models": models, "jobs": count, "lengths_s": lengths,
                         "length_weights": weights, "load": args.load, "seed": args.seed, "depth": args.depth,
                         "min_iters": args.min_iters, "small": args.small, "calibrate_s": args.calibrate_s,
                         "max_trace_s": args.max_trace_s, "hints": "srtf: expected_iterations; others: none",
                         "optimizer": f"SGD lr={bc.LR} momentum={bc.MOMENTUM}"},
              "specs": {}, "calibration": {}, "trace": None, "policies": {}}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    spec_dir = args.spec_dir or tempfile.mkdtemp(prefix="tandem-trace-specs-")
    pool = daemon = None
    status = 0
    bc.log(f"JCT trace on {result['meta']['gpu']}: {count} jobs of {','.join(models)}, load {args.load}, "
           f"seed {args.seed}; policies {', '.join(policies)}")
    try:
        specs = {}
        for m in models:
            folder, capture_s = tc.save_job_spec(spec_dir, m, args.small)
            specs[m] = folder
            result["specs"][m] = {"capture_s": None if capture_s is None else round(capture_s, 3),
                                  "cached": capture_s is None}
            bc.log(f"  spec {m}: {'cached' if capture_s is None else f'captured in {capture_s:.1f} s'}")
        pool = tc.WorkerPool(count)

        # Each model alone, on a fifo daemon of its own.
        daemon = tc.start_daemon(args, "fifo", "tandemd-jct-calibrate")
        for m in models:
            try:
                pool.load({0: specs[m]})
                cal = tc.calibrate(pool, 0, daemon.endpoint, specs[m], f"calibrate-{m}", timed_s=args.calibrate_s,
                                   depth=args.depth)
            except (RuntimeError, tc.WorkerFailed) as e:
                result["calibration"][m] = {"error": str(e)}
                bc.log(f"  calibration {m}: FAILED ({e}); dropped from the trace")
                if isinstance(e, tc.WorkerFailed):
                    pool.restart(0)
                continue
            result["calibration"][m] = cal
            bc.log(f"  calibration {m}: {cal['wall_ms']:.3f} ms/iter wall, {cal['run_ms']:.3f} ms device, "
                   f"registration {cal['register_s']:.2f} s, first iteration {cal['first_iteration_s']:.2f} s")
            if cal["wall_ms"] > lengths[0] * 1e3 / 10:
                cal["dropped"] = f"slower than a tenth of a short job ({lengths[0]} s) per iteration"
                bc.log(f"  {m}: dropped from the trace ({cal['dropped']})")
        daemon.stop()
        daemon = None
        usable = [m for m in models if "wall_ms" in result["calibration"][m] and
                  "dropped" not in result["calibration"][m]]
        if not usable:
            raise RuntimeError("no model could be calibrated")

        trace, rate = make_trace(args.seed, count, usable, lengths, weights, args.load)
        set_iterations(trace, result["calibration"], args.min_iters)
        # What the budget holds, the baseline (FIFO) and the Salus comparison (SRTF) first: a policy's share
        # below MIN_POLICY_S completes too few jobs to compare.
        run = tc.fitting(policies, IMPORTANCE, budget.left(), MIN_POLICY_S)
        for policy in policies:
            if policy not in run:
                result["policies"][policy] = {"error": f"skipped: the budget holds {len(run)} of {len(policies)} "
                                                       f"policies ({', '.join(run)})"}
                bc.log(f"== {policy}: skipped (the budget holds {', '.join(run)})")
        # One policy's share of the budget must hold the jobs run one after another (fifo).
        allowed = min(args.max_trace_s, budget.left() / len(run) - 10)
        scale = fit_to(trace, result["calibration"], allowed)
        if scale < 1:
            for j in trace:
                j["target_s"] = round(j["target_s"] * scale, 3)
                j["arrival_s"] = round(j["arrival_s"] * scale, 3)
            set_iterations(trace, result["calibration"], args.min_iters)
            rate /= scale
            bc.log(f"  lengths and arrival times scaled by {scale:.2f} so that one job at a time fits "
                   f"{allowed:.0f} s")
        result["trace"] = {"rate_per_s": round(rate, 4), "models_used": usable, "scaled_by": round(scale, 4),
                           "solo_sum_s": round(sum(j["solo_s"] for j in trace), 3), "jobs": trace}
        bc.log("  trace: " + ", ".join(f"{j['id']}:{j['model']}/{j['length_class']} {j['iterations']} it "
                                       f"@{j['arrival_s']:.1f}s" for j in trace))
        pool.load({j["id"]: specs[j["model"]] for j in trace})
        save()

        for n, policy in enumerate(run):
            left = budget.left()
            share = min(args.max_trace_s, left / (len(run) - n) - 8)
            if share < 5:
                result["policies"][policy] = {"error": "skipped: budget spent"}
                bc.log(f"== {policy}: skipped (budget spent)")
                continue
            bc.log(f"== {policy} (deadline {share:.0f} s)")
            daemon = tc.start_daemon(args, policy, f"tandemd-jct-{policy}")
            jobs = []
            for j in trace:
                hints = {"expected_iterations": str(j["iterations"])} if policy.startswith("srtf") else {}
                jobs.append({"worker": j["id"], "spec": specs[j["model"]], "name": f"{policy}-{j['id']}-{j['model']}",
                             "iterations": j["iterations"], "arrival_s": j["arrival_s"], "hints": hints,
                             "depth": args.depth})
            results, _ = tc.replay(pool, daemon, jobs, share)
            daemon.stop()
            daemon = None
            result["policies"][policy] = summarize_policy(trace, results)
            s = result["policies"][policy]
            if s.get("jct"):
                bc.log(f"  {policy}: mean JCT {s['jct']['mean']:.2f} s, p90 {s['jct']['p90']:.2f} s, "
                       f"max {s['jct']['max']:.2f} s, mean slowdown {s['slowdown']['mean']:.2f}, "
                       f"makespan {s['makespan_s']:.1f} s, {s['completed']}/{len(trace)} completed")
            save()
        compare(result)
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        status = bc.stopped_early("jct", result, e)
    finally:
        tc.release(daemon, pool, None if args.spec_dir else spec_dir)
        save()
    bc.log(f"wrote {args.out}")
    return max(status, tc.draw(plot, result, tc.plot_path(args)))


def summarize_policy(trace, results):
    jobs = []
    for j, r in zip(trace, results):
        row = {"id": j["id"], "model": j["model"], "length_class": j["length_class"], "iterations": j["iterations"],
               "solo_s": j["solo_s"], **(r or {"error": "no result"})}
        if "jct_s" in row and not row.get("stopped"):
            row["slowdown"] = round(row["jct_s"] / j["solo_s"], 4)
        jobs.append(row)
    complete = [r for r in jobs if "slowdown" in r]
    out = {"completed": len(complete), "jobs": jobs,
           "jct": tc.summary([r["jct_s"] for r in complete]),
           "slowdown": tc.summary([r["slowdown"] for r in complete])}
    out["devices"] = sorted({r["device"] for r in jobs if r.get("device")})
    if complete:
        out["makespan_s"] = round(max(r["finish_s"] for r in complete) - min(r["arrival_s"] for r in jobs
                                                                             if "arrival_s" in r), 4)
        by_class = {}
        for c in LENGTH_CLASSES:
            s = tc.summary([r["jct_s"] for r in complete if r["length_class"] == c])
            if s:
                by_class[c] = s
        out["jct_by_length"] = by_class
    return out


def compare(result):
    """FIFO's mean JCT over each policy's (only when both completed every job), and a table."""
    pol = result["policies"]
    base = pol.get("fifo", {})
    n = len(result["trace"]["jobs"]) if result.get("trace") else 0
    rows = []
    for name, s in pol.items():
        if not s.get("jct"):
            rows.append(f"{name:8s} {s.get('error', 'no result')}")
            continue
        if base.get("jct") and base["completed"] == n and s["completed"] == n:
            s["fifo_mean_jct_over_this"] = round(base["jct"]["mean"] / s["jct"]["mean"], 4)
        ratio = s.get("fifo_mean_jct_over_this")
        rows.append(f"{name:8s} {s['jct']['mean']:9.2f} {s['jct']['median']:9.2f} {s['jct']['p90']:9.2f} "
                    f"{s['jct']['max']:9.2f} {s['slowdown']['mean']:9.2f} {s.get('makespan_s', 0):9.1f} "
                    f"{s['completed']:>3d}/{n:<3d} {'' if ratio is None else f'{ratio:.2f}x'}")
    bc.log("policy    mean JCT    median       p90       max  slowdown  makespan  done  FIFO/this")
    for r in rows:
        bc.log(r)


def plot(result, path):
    plt = tc.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, s in result["policies"].items():
        complete = [r for r in s.get("jobs", []) if "slowdown" in r]
        if not complete:
            continue
        for ax, key in zip(axes, ("jct_s", "slowdown")):
            v = sorted(r[key] for r in complete)
            ys = [(k + 1) / len(result["trace"]["jobs"]) for k in range(len(v))]
            label = f"{name} (mean {sum(v) / len(v):.2f})"
            ax.step(v, ys, where="post", label=label)
    axes[0].set_xlabel("job completion time (s)")
    axes[1].set_xlabel("slowdown: JCT / solo time")
    axes[1].set_xscale("log")
    from matplotlib.ticker import ScalarFormatter
    axes[1].xaxis.set_major_formatter(ScalarFormatter())
    axes[1].xaxis.set_minor_formatter(ScalarFormatter())
    axes[1].tick_params(axis="x", which="minor", labelsize=7)
    for ax in axes:
        ax.set_ylabel("fraction of jobs")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    meta = result["meta"]
    tr = result.get("trace") or {}
    fig.suptitle(f"JCT, {len(tr.get('jobs', []))} jobs ({','.join(tr.get('models_used', []))}), load "
                 f"{result['config']['load']}, seed {result['config']['seed']} - {meta['gpu']}, "
                 f"{(meta['date'] or '')[:10]}, {(meta['git_commit'] or '')[:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
