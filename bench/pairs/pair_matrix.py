#!/usr/bin/env python3
"""The pair matrix of the empirical study of shared-GPU training: two jobs on one GPU under time-slicing, MPS,
their torch.compile'd variants, and Tandem.

Pairs: --pairs a+b,... (default fcn5+fcn5, lstm+lstm, resnet50+resnet50, fcn5+vgg19, vgg19+lstm, fcn5+lstm). A
member is a reference model (fcn5, lstm, resnet50, vgg19, transformer; captured once, or registered from
$BENCH_SPEC_DIR's job specs) or any model of the zoo (zoo/catalog.py: densenet121, resnet18, mobilenet_v2,
decoder_lm, bigru, ...; zoo:NAME where a reference model has the name), at its full size on the GPU or small with
--small; see pair_models.py. --random_pairs K --seed S draws K distinct pairs from the zoo (catalog.ENTRIES, or
catalog.CI_NAMES with --small) with random.Random(S) at run time, instead of the default pairs (beside --pairs
when given; --with_reference_pairs adds the default pairs too); the seed and the drawn pairs are in the JSON
(config.random_pairs). Every job trains with SGD(lr=0.01, momentum=0.9).

Systems (--systems, any subset; they run in this order):
  tandem                 two adaptor jobs (two processes, one session each) against one tandemd (--tandem_policy,
                         pack by default): tandem.torch.train(model, loss_fn, optimizer, batch, endpoint=...,
                         device=...) then job.step_async / .result() for zoo models;
  time_slicing           two PyTorch processes at once, eager (the GPU's default time-slicing): a zoo model as
                         bench/models/zoo_gpu.py times it (bench_common.eager_step on a batch on the GPU);
  time_slicing_compiled  the same with the model wrapped in torch.compile(model, mode="reduce-overhead");
  mps, mps_compiled      the same two (eager, compiled) as clients of an MPS server the program starts (pipe
                         and log folders under --mps_dir) and always stops (`echo quit | nvidia-cuda-mps-control`),
                         also on errors and signals.
A system that cannot run here is recorded as skipped with its reason: MPS without CUDA or
nvidia-cuda-mps-control, the compiled ones on a torch without torch.compile (before 2.0).

Reported per pair and system: each job's r = shared / solo time per iteration (the study's degradation
coefficient; solo = the job alone in the same system, so compiled for the compiled systems) and its rate 1 / r;
their sum `aggregate` (1.0: no gain, no loss against taking turns). Once all systems have run (pair_report.py):
the pair's absolute throughput in compiled solo units (sum of its jobs' shared iterations per second x their
compiled solo seconds per iteration, time_slicing_compiled's else mps_compiled's), summary.pairs[].
tandem_over_mps_compiled (Tandem's absolute throughput over MPS-compiled's) and its geometric mean over pairs,
Tandem's aggregate against the eager solo times, and a markdown table (pair | per system: job A rate + job B
rate = sum | Tandem / MPS-compiled), printed and kept in summary.table.

PRIORITY mode (--priority HIGH:BEST_EFFORT, default fcn5:vgg19; empty to skip): a high-priority job (one
iteration in flight, plus --think_ms between iterations) beside a best-effort job that runs as fast as it can.
Reported: the high-priority job's slowdown (shared / solo) and the best-effort job's throughput as a fraction of
its solo throughput, under Tandem (a second tandemd with --policy=priority, the job's priority hint) and each
native system (no priorities: the GPU cannot tell the processes apart).

Method. Two long-lived worker processes (slots A and B, pair_worker.py) take commands on a pipe. A
configuration is: each worker prepares its job (model on the GPU, or registration with tandemd) and runs its
first steps (3 when compiled: compilation and CUDA-graph recording happen in them); once both are ready the
coordinator sends both a "go" (the barrier); each warms up for at least 3 iterations and --warmup_s, then times
a fixed number of iterations (the number its model completed in --solo_s when measured alone in the same
system) with --depth iterations in flight, reports, and keeps running until every job of the configuration has
reported, so that each timed window is fully overlapped by the partner. The best-effort job of the priority
mode runs from "go" until the high-priority job has finished and counts its completed iterations. Each system
gets fresh workers; --budget_s is shared evenly among the systems still to run, and configurations that would
not fit their system's share are skipped (recorded as such).

Modules: pair_models (names, random draws), pair_worker (the worker process) and pair_runners (its training
steps), pair_coordinator (workers and the barrier, also used by bench/traces/qos.py), pair_systems (the systems,
MPS, the measurements), pair_report (derived figures and table), this file (the command line and the phases).

    python3 bench/pairs/pair_matrix.py --out /tmp/out/pairs.json                           # on the GPU machine
    python3 bench/pairs/pair_matrix.py --random_pairs 8 --seed 1 --with_reference_pairs --out /tmp/out/zoo.json
    python3 bench/pairs/pair_matrix.py --small --device cpu --systems tandem,time_slicing \\
        --pairs fcn5+lstm,resnet18+mobilenet_v2 --out /tmp/pairs.json                    # smoke test (no GPU)
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pair_models  # noqa: E402  (puts bench/models on sys.path)
import bench_common as bc  # noqa: E402
import pair_report  # noqa: E402
from pair_coordinator import ConfigFailed, WorkerProcess, Workers, run_config  # noqa: E402
from pair_systems import BY_NAME, DEFAULT_SYSTEMS, SYSTEMS, COMPILE_MODE, Matrix, Mps  # noqa: E402
from pair_systems import mps_unavailable_reason, unavailable_reason  # noqa: E402

# What bench/traces/qos.py and bench/inference/hosting.py take from here.
__all__ = ["ConfigFailed", "Mps", "WorkerProcess", "Workers", "mps_unavailable_reason", "run_config"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", default=None,
                   help=f"comma-separated pairs a+b (default, unless --random_pairs: {pair_models.DEFAULT_PAIRS})")
    p.add_argument("--random_pairs", type=int, default=0, metavar="K", help="draw K pairs of zoo models")
    p.add_argument("--seed", type=int, default=0, help="seed of random.Random for --random_pairs")
    p.add_argument("--with_reference_pairs", action="store_true",
                   help="with --random_pairs or --pairs: the default reference pairs too")
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"subset of {','.join(s.name for s in SYSTEMS)}")
    p.add_argument("--priority", default="fcn5:vgg19",
                   help="HIGH:BEST_EFFORT models of the priority mode; empty to skip it")
    p.add_argument("--think_ms", type=float, default=0.0, help="pause of the high-priority job between iterations")
    p.add_argument("--small", action="store_true", help="the tiny models (CPU smoke test)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--depth", type=int, default=2, help="iterations in flight per job")
    p.add_argument("--solo_s", type=float, default=1.0, help="timed seconds of a solo run (sets the iterations)")
    p.add_argument("--warmup_s", type=float, default=0.5)
    p.add_argument("--min_iters", type=int, default=5, help="fewest timed iterations")
    p.add_argument("--tandem_policy", default="pack", help="tandemd policy of the pair matrix (pack, fair, ...)")
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--log_dir", default=None, help="where tandemd's logs go (default: a temporary folder)")
    p.add_argument("--mps_dir", default=None, help="MPS pipe/log folders go here (default: a new folder in /tmp)")
    p.add_argument("--prepare_timeout", type=float, default=300,
                   help="s for a job to build or capture, register, compile and run its first steps")
    p.add_argument("--max_config_s", type=float, default=40, help="longest a configuration may run")
    p.add_argument("--min_config_s", type=float, default=8, help="skip configurations when less budget is left")
    p.add_argument("--budget_s", type=float, default=0, help="total budget; 0: none")
    p.add_argument("--out", default=None, help="JSON file to write")
    args = p.parse_args()
    if not args.out:
        p.error("--out is required")
    args.device = bc.torch_device(args.device)
    try:
        pairs = pair_models.parse_pairs(args.pairs or "")
        if args.with_reference_pairs or (args.pairs is None and not args.random_pairs):
            pairs = pair_models.parse_pairs(pair_models.DEFAULT_PAIRS) + pairs
        args.random_draw = None
        if args.random_pairs:
            drawn, args.random_draw = pair_models.draw_pairs(args.random_pairs, args.seed, args.small)
            pairs += drawn
        args.pairs = pair_models.without_repeats(pairs)
        args.priority = pair_models.parse_priority(args.priority)
    except ValueError as e:
        p.error(str(e))
    if not args.pairs and not args.priority:
        p.error("nothing to measure: no pairs and no priority mode")
    named = [s for s in args.systems.split(",") if s]
    for s in named:
        if s not in BY_NAME:
            p.error(f"--systems: unknown {s!r}; choose from {', '.join(BY_NAME)}")
    args.systems = [s for s in SYSTEMS if s.name in named]
    return args


def main():
    args = parse_args()
    bc.raise_on_signals()
    systems = args.systems
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(args.device),
              "config": {"pairs": args.pairs, "random_pairs": args.random_draw,
                         "systems": [s.name for s in systems], "priority": args.priority,
                         "think_ms": args.think_ms, "small": args.small, "depth": args.depth, "solo_s": args.solo_s,
                         "warmup_s": args.warmup_s, "min_iters": args.min_iters,
                         "tandem_policy": args.tandem_policy, "compile_mode": COMPILE_MODE,
                         "optimizer": f"SGD lr={bc.LR} momentum={bc.MOMENTUM}", **bc.numerics()},
              "systems": {}}

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    runnable = []
    for s in systems:
        reason = unavailable_reason(s, args.device)
        if reason:
            result["systems"][s.name] = {"skipped": reason}
            bc.log(f"== {s.name} skipped: {reason}")
        else:
            runnable.append(s)
    matrix = Matrix(args, result, save)
    bc.log(f"pair matrix on {result['meta']['gpu']}: systems {', '.join(s.name for s in runnable)}; pairs "
           f"{', '.join('+'.join(x) for x in args.pairs)}; priority {args.priority}")

    def deadline(system):
        """An equal share of what is left of the budget for this system and the ones after it."""
        rest = runnable[runnable.index(system):]
        return time.monotonic() + budget.left() / len(rest)

    held = {"workers": None, "daemon": None, "mps": None}  # what the finally: below stops
    try:
        for system in runnable:
            bc.log(f"== {system.name}: {system.description}")
            if system.kind == "tandem":
                run_tandem(args, matrix, system, deadline(system), held)
                continue
            if system.mps and held["mps"] is None:
                held["mps"] = Mps(args.mps_dir or tempfile.mkdtemp(prefix="tandem-bench-mps-"))
                held["mps"].start()
            held["workers"] = Workers(args, env=held["mps"].env if system.mps else None)
            matrix.run_system(system, held["workers"], deadline(system))
            held["workers"].close()
            if system.mps:
                result["systems"][system.name]["control_log_tail"] = held["mps"].log_tail()
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        bc.stopped_early("pair matrix", result, e)
    finally:
        if held["workers"] is not None:
            held["workers"].close()
        if held["daemon"] is not None:
            held["daemon"].stop()
        if held["mps"] is not None:
            held["mps"].stop()
        try:
            bc.log(pair_report.derive(result)["table"])
        except Exception as e:  # a summary must not hide the measurements
            bc.log(f"summary failed: {type(e).__name__}: {e}")
        save()
    bc.log(f"wrote {args.out}")
    return 1 if "error" in result else 0


def run_tandem(args, matrix, system, deadline, held):
    """The pairs against a tandemd of --tandem_policy, then the priority mode against one of policy priority;
    held["daemon"] and held["workers"] are the ones running, for the caller to stop when this raises."""
    flags = bc.daemon_flags_for_large_models()
    binary = bc.find_tandemd(args.tandemd)
    held["workers"] = Workers(args)
    held["daemon"] = bc.Daemon(binary, args.device, args.tandem_policy, flags, args.log_dir, "tandemd-pairs").start()
    matrix.out(system)["policy"] = args.tandem_policy
    matrix.run_system(system, held["workers"], deadline, held["daemon"].endpoint, priority=False)
    held["daemon"].stop()
    held["daemon"] = None
    if args.priority:
        bc.log("== tandem (policy priority): priority mode")
        held["daemon"] = bc.Daemon(binary, args.device, "priority", flags, args.log_dir, "tandemd-priority").start()
        matrix.out(system)["priority_policy"] = "priority"
        matrix.run_system(system, held["workers"], deadline, held["daemon"].endpoint, pairs=False)
        held["daemon"].stop()
        held["daemon"] = None
    held["workers"].close()


if __name__ == "__main__":
    sys.exit(main())
