#!/usr/bin/env python3
"""A job joining does not hold the running ones up (docs/scheduling.md, Joining).

Per pair RUNNING+NEWCOMER: a training job of RUNNING trains on tandemd (the daemon's defaults: PACK); once it has
run STEADY steps, a job of NEWCOMER is captured, registers and trains for NEWCOMER_STEPS steps beside it (its
first iteration captures its graph, then PACK's solo probes measure it). The running job's step-completion gaps:
its median over the STEADY steps before the join; over the joining window (from the newcomer's registration to
the end of its WARMUP-th step: its first iteration, which captures its graph, and its solo probes) the p99 and the
longest; and its median while the two share the device afterwards. Ratios are against the median before, and
against the shared median (what the running job's steps take once the newcomer is in). Goals (the sharing issue):
p99 <= 1.2x, longest <= 3x. The newcomer's own step times are recorded too.

    python3 bench/models/join_bench.py --out /tmp/out/join.json                        # on the GPU machine
    python3 bench/models/join_bench.py --device cpu --small --pairs fcn5+lstm --out /tmp/join.json   # plumbing
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pairs"))

import bench_common as bc  # noqa: E402
import daemon_stats  # noqa: E402
import pair_models  # noqa: E402

import tandem.torch  # noqa: E402

DEFAULT_PAIRS = "resnet18+densenet121,resnet18+resnet50,densenet121+resnet18"
STEADY = 40
NEWCOMER_STEPS = 30
WARMUP = 6


def newcomer_main(endpoint, model_name, small, conn):
    """The newcomer, in a process of its own as a user's would be (its capture holds no lock of the running
    job's process): captures, registers, trains, and sends its times (time.monotonic, which processes share)."""
    import tandem.torch as tt
    from tandem.torch.job import TrainingJob
    try:
        model, loss_fn, make_batch = pair_models.build(model_name, small)
        batches = bc.make_batches(make_batch, 4, seed=2)
        capture_start = time.monotonic()
        capture, lowered = tt.capture_training_job(model, loss_fn, bc.sgd(model.parameters()), batches[0])
        registering = time.monotonic()
        job = TrainingJob(capture, lowered, endpoint, "newcomer", tt._hints(0, 0, None), [], None, None, None)
        registered = time.monotonic()
        steps, ends = [], []
        with job:
            for i in range(NEWCOMER_STEPS):
                t = time.monotonic()
                job.step(*batches[i % len(batches)])
                ends.append(time.monotonic())
                steps.append(ends[-1] - t)
        conn.send({"capture_start": capture_start, "registering": registering, "registered": registered,
                   "steps": steps, "step_ends": ends, "end": time.monotonic()})
    except BaseException as e:  # noqa: BLE001  (sent to the parent)
        conn.send({"error": f"{type(e).__name__}: {e}"})


def start_job(endpoint, name, model_name, small, seed):
    model, loss_fn, make_batch = pair_models.build(model_name, small)
    batches = bc.make_batches(make_batch, 4, seed=seed)
    job = tandem.torch.train(model, loss_fn, bc.sgd(model.parameters()), batches[0], endpoint=endpoint, name=name)
    return job, batches


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def join(binary, device, running_name, newcomer_name, small):
    flags = os.environ.get("JOIN_TANDEMD_FLAGS", "").split()  # e.g. --log_level=debug
    with bc.Daemon(binary, device, extra_flags=flags, log_dir=os.environ.get("JOIN_LOG_DIR"),
                   name=f"join-{running_name}-{newcomer_name}") as daemon:
        running, batches = start_job(daemon.endpoint, "running", running_name, small, 1)
        done_at, done_wall = [], []  # monotonic (for gaps), wall clock (the daemon's journal's)
        # Per step, the daemon's account (seconds waiting for its turn, on the device): the rest of a gap is
        # the client's and the transport's.
        waits = []
        stop = threading.Event()
        errors = []

        def loop():
            try:
                i = 0
                while not stop.is_set():
                    handle = running.step_async(*batches[i % len(batches)])
                    handle.result()
                    done_at.append(time.monotonic())
                    waits.append((handle.queue_seconds, handle.run_seconds))
                    done_wall.append(time.time())
                    i += 1
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(f"{type(e).__name__}: {e}")

        thread = threading.Thread(target=loop)
        thread.start()
        try:
            deadline = time.monotonic() + 300
            while len(done_at) < STEADY + 5 and not errors and time.monotonic() < deadline:
                time.sleep(0.05)
            if errors:
                raise RuntimeError("; ".join(errors))
            steady_from = len(done_at) - STEADY
            stats_client = tandem.Client(endpoint=daemon.endpoint)
            stats_before = daemon_stats.snapshot(stats_client)
            context = multiprocessing.get_context("spawn")
            receive, send = context.Pipe(duplex=False)
            child = context.Process(target=newcomer_main, args=(daemon.endpoint, newcomer_name, small, send))
            child.start()
            times = receive.recv() if receive.poll(600) else {"error": "the newcomer sent nothing in 600 s"}
            child.join(60)
            stats_after = daemon_stats.snapshot(stats_client)
            stats_client.close()
            if "error" in times:
                raise RuntimeError(f"newcomer {newcomer_name}: {times['error']}")
        finally:
            stop.set()
            thread.join()
            running.close()
        if errors:
            raise RuntimeError("; ".join(errors))
        joined_at, warm_at, window_end = times["registering"], times["step_ends"][WARMUP - 1], times["end"]
        registered_at, first_step_end = times["registered"], times["step_ends"][0]
        gaps = list(zip(done_at, done_at[1:]))
        before = [b - a for a, b in gaps[steady_from:] if b <= times["capture_start"]]
        in_window = [k for k, (a, b) in enumerate(gaps) if joined_at < b <= warm_at]  # indices into gaps
        window = [gaps[k][1] - gaps[k][0] for k in in_window]

        def in_first_step(k):
            return gaps[k][1] > registered_at and gaps[k][0] < first_step_end

        shared = [b - a for a, b in gaps if warm_at < b <= window_end]
        newcomer_steps = times["steps"]
        median = statistics.median(before)
        shared_median = statistics.median(shared) if shared else None
        row = {
            "running": running_name, "newcomer": newcomer_name,
            "running_median_ms": bc.ms(median),
            "window_steps": len(window),
            "window_p99_ms": bc.ms(percentile(window, 0.99)) if window else None,
            "window_max_ms": bc.ms(max(window)) if window else None,
            "p99_over_median": round(percentile(window, 0.99) / median, 3) if window else None,
            "max_over_median": round(max(window) / median, 3) if window else None,
            "shared_median_ms": bc.ms(shared_median),
            "p99_over_shared_median": round(percentile(window, 0.99) / shared_median, 3) if window and shared else None,
            "max_over_shared_median": round(max(window) / shared_median, 3) if window and shared else None,
            "newcomer_capture_s": round(times["registering"] - times["capture_start"], 3),
            "newcomer_registration_s": round(times["registered"] - times["registering"], 3),
            "newcomer_first_step_ms": bc.ms(newcomer_steps[0]),
            # Seconds from the newcomer's registration to its first step's end (longest_gap_events' ended_s).
            "newcomer_first_step_ended_s": round(first_step_end - joined_at, 3),
            "newcomer_median_step_ms": bc.ms(statistics.median(newcomer_steps[1:])),
            "longest_gaps_ms": [bc.ms(g) for g in sorted(window, reverse=True)[:5]],
            # The window's gaps over 3x the median before: how many, and how many of them ended during the
            # newcomer's first step (its op-by-op run, cuDNN's searches, its graph's capture).
            "gaps_over_3x": sum(1 for g in window if g > 3 * median),
            "gaps_over_3x_in_first_step": sum(1 for g, k in zip(window, in_window)
                                              if g > 3 * median and in_first_step(k)),
            "daemon": daemon_stats.delta(stats_before, stats_after),
        }
        # The five longest gaps of the joining window: the step's wait for its turn and its device time in the
        # daemon, the rest (client, transport, the control loop), and what the daemon's journal says happened.
        events = stats_after.get("events", []) if daemon_stats.usable(stats_after) else []
        row["longest_gap_events"] = [
            {"gap_ms": bc.ms(g), "ended_s": round(gaps[k][1] - joined_at, 3), "during_first_step": in_first_step(k),
             "queue_ms": bc.ms(waits[k + 1][0]), "run_ms": bc.ms(waits[k + 1][1]),
             "rest_ms": bc.ms(g - waits[k + 1][0] - waits[k + 1][1]),
             "events": daemon_stats.summarize(daemon_stats.near(events, done_wall[k], done_wall[k + 1]))}
            for g, k in sorted(zip(window, in_window), reverse=True)[:5]]
        bc.log(f"{running_name} joined by {newcomer_name}: median {row['running_median_ms']} ms before, "
               f"{row['shared_median_ms']} ms shared after; while joining ({row['window_steps']} steps) p99 "
               f"{row['p99_over_median']}x / {row['p99_over_shared_median']}x, longest {row['max_over_median']}x / "
               f"{row['max_over_shared_median']}x (before / shared; goals 1.2x, 3x); newcomer registered in "
               f"{row['newcomer_registration_s']} s, first step {row['newcomer_first_step_ms']} ms")
        return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=DEFAULT_PAIRS, help="RUNNING+NEWCOMER, comma-separated")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--small", action="store_true", help="tiny models (CPU plumbing runs)")
    parser.add_argument("--tandemd")
    parser.add_argument("--out")
    args = parser.parse_args()
    bc.raise_on_signals()
    device = bc.torch_device(args.device)
    binary = bc.find_tandemd(args.tandemd)
    result = {"meta": bc.metadata(device), "steady_steps": STEADY, "newcomer_steps": NEWCOMER_STEPS,
              "warmup_steps": WARMUP, "pairs": []}
    try:
        for running_name, newcomer_name in pair_models.parse_pairs(args.pairs):
            result["pairs"].append(join(binary, device, running_name, newcomer_name, args.small))
            bc.write_json(args.out, result)
    except BaseException as e:  # noqa: BLE001  (recorded, then the status says it)
        bc.write_json(args.out, result)
        return bc.stopped_early("join_bench", result, e)
    bc.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
