#!/usr/bin/env python3
"""Inference hosting: how many small inference models one GPU serves while every one meets a p99 latency target.

Each hosted model (slot i: a small MLP, a small CNN or ResNet-18 at 64x64, batch drawn from 1-16; see
inference_models.py) gets an open-loop Poisson request stream of --rate requests/s; a request's latency is the
wall time from its scheduled arrival to its result on the host. A probe runs N models at once for
--warmup_s + --duration_s (default: --min_requests / --rate, so that each model's p99 rests on about 100
requests) and passes when every model's p99 over the timed window is <= --p99_ms and no request failed or was
left unsent. Modes:

  tandem     one tandemd; N tandem.torch.ServedModels, each its own job with its own weights, --models_per_proc
             (16) per client process, one thread each; a process captures each distinct (kind, batch) once
  server     ONE PyTorch process holding all N models, as Triton's PyTorch backend or TorchServe would: each
             model a CUDA graph of its forward at its batch (on the CPU the eager forward under inference_mode,
             as the mode's JSON says), every model's requests served by --server_threads (8) threads that take
             them from one FIFO queue, each thread with its own CUDA stream, one request per model at a time;
             the request streams are generated inside that process
  timeslice  N PyTorch processes, one model each, eager on the GPU, no MPS (the GPU's time-slicing)
  mps        the same N processes as clients of an MPS control daemon the program starts (pipe and log folders
             under --mps_dir) and always stops, also on errors and signals; at most --mps_max_clients (48)

Per mode the largest N that passes is searched (hosting_search.py): 4, 16, 64, then doubling up to
--max_count, each clipped to the mode's cap (memory, the MPS client limit), then bisection until the bracket is
within --resolution of the passing count (or exactly the counts of --counts). Tandem's workers all start
(up to the cap) before its first probe, which waits until every one is ready; the server loads a count's models
into its process before that count's probe, never during one; the one-process-per-model modes' workers of the
next --spawn_ahead counts start in the background (SCHED_IDLE) while a probe runs; a probe that fails while
workers were starting is repeated once with them paused (SIGSTOP), and only the repeat counts; so is a Tandem probe
that failed while tandemd moved jobs between lanes or captured graphs (once per move or first request: at one
H200's first probe of 256 models, 9 moves and 41 captures, the slow requests 0.6-1.05 s into it). Each mode gets a share
of what is left of --budget_s (Tandem's and the server's weigh 1.5, the others 1), so one slow mode cannot starve
the others; the JSON says per mode why its search stopped (stop_reason) and whether its count is only a lower
bound. A model alone is the "no sharing" baseline: one model per GPU, count 1 by definition; the JSON reports
Salus's two ratios, tandem / 1 and tandem / mps (Salus: 42x and 7x), tandem / timeslice, and tandem / server,
the issue's goal: Tandem hosts at least 1.5x the models of the one-process server at the same p99.

    python3 bench/inference/hosting.py --out /tmp/out/hosting.json --plot /tmp/out/hosting.png   # GPU, ~2 min
    python3 bench/inference/hosting.py --device cpu --small --modes tandem,server --out /tmp/h.json

The pieces: this file parses the flags and runs the modes in turn; hosting_mode.py drives one mode's search
(hosting_search.py) over hosting_tandem.py (with worker.py --backend tandem), hosting_server.py (with
model_server.py) or hosting_processes.py (with worker.py --backend torch); hosting_pool.py starts worker
processes, hosting_memory.py says what memory is left, hosting_probe.py runs a probe and hosting_stats.py
digests it; hosting_summary.py computes the ratios; hosting_report.py and hosting_plot.py read the JSON.
"""

import argparse
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "pairs"))
sys.path.insert(0, os.path.join(BENCH, "models"))
sys.path.insert(0, HERE)

import bench_common as bc  # noqa: E402
import torch  # noqa: E402,F401  (bench_common's numerics; imported before the workers start)

import inference_models  # noqa: E402
from hosting_mode import run_mode  # noqa: E402
from hosting_processes import MpsMode, TimesliceMode  # noqa: E402
from hosting_server import ServerMode  # noqa: E402
from hosting_summary import print_summary, summary  # noqa: E402
from hosting_tandem import INFLIGHT_PER_LANE, LANES, TandemMode  # noqa: E402
from pair_matrix import Mps, mps_unavailable_reason  # noqa: E402

# In the order they run: tandem first (its preflight sets the mix of kinds), MPS last.
MODES = {m.name: m for m in (TandemMode, ServerMode, TimesliceMode, MpsMode)}


def make_mode(name, args, state, result):
    """The mode `name`; MPS's with pair_matrix's MPS control daemon."""
    if name == "mps":
        return MpsMode(args, state, result, Mps)
    return MODES[name](args, state, result)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
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
    p.add_argument("--server_threads", type=int, default=8,
                   help="server mode: serving threads taking requests from the one queue, each with its own stream")
    p.add_argument("--spawn_ahead", type=int, default=None,
                   help="growth steps whose workers start (in the background) while the current count is probed "
                        f"(default per mode: {', '.join(f'{m} {c.spawn_ahead}' for m, c in MODES.items())})")
    p.add_argument("--prespawn", action="store_true",
                   help="start the workers of every count up to the cap at once and wait for all of them before "
                        "the first probe (always so in tandem mode; the server loads every model up to the cap)")
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
                   help="total seconds, shared among the modes still to run (Mode.weight) (default 105; --small: none)")
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
    args.modes = [m for m in MODES if m in modes]
    if (min(args.models_per_proc, args.server_threads, args.start, args.max_count, args.mps_max_clients) < 1
            or (args.spawn_ahead or 0) < 0):
        p.error("--models_per_proc, --server_threads, --start, --max_count and --mps_max_clients must be positive")
    return args


def main():
    """Runs the modes' searches in turn, writes the JSON (after each probe too) and the plot; 1 if a mode failed."""
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
                   "server_threads": args.server_threads,
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
            # A weighted share of what is left, so no mode starves: Tandem's and the server's searches go
            # furthest (on the H200 one process per model stops at 16-64, MPS at its client limit) and get more.
            rest = runnable[k:]
            share = budget.left() * MODES[mode].weight / sum(MODES[m].weight for m in rest)
            deadline = time.monotonic() + share - args.close_reserve_s
            bc.log(f"== {mode}" + (f" ({share:.0f} s)" if share != float("inf") else ""))
            try:
                run_mode(make_mode(mode, args, state, result), args, result, deadline, save)
            except (Exception, KeyboardInterrupt, bc.Terminated) as e:
                out = result["modes"].setdefault(mode, {"probes": []})
                out["error"] = f"{type(e).__name__}: {e}"
                out.setdefault("stop_reason", "error")
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


if __name__ == "__main__":
    sys.exit(main())
