#!/usr/bin/env python3
"""What a device fault and the snapshots that recover from it cost (docs/deploy.md, Device faults).

1. Snapshot cost: one training job of each model alone on tandemd, ms/iter without checkpoints, with
   checkpoints every CHECKPOINT_S seconds, and after every iteration (checkpoint_interval 0, the worst case:
   a device-to-host copy of every weight and optimizer state, and a file write, per iteration while none is in
   flight). Same daemon binary, one daemon per setting, in the same run.
2. Recovery: two training jobs of the model run side by side on a tandemd with --test_faults and a state_dir;
   a third job faults the device (tandem.torch.fault_injection; an illegal address on a GPU). tandemd restarts
   in place; the two jobs re-attach by themselves. Per job: the pause its client saw (the longest gap between
   two of its steps' completions around the fault, against its median step), the re-attach's own seconds
   (Recovery.pause_seconds: from noticing to registered again), the checkpoint step and the steps lost, and
   from tandemd's log the seconds from the fault to the end of the stop, to the devices ready and to
   listening again.

    python3 bench/models/fault_recovery.py --out /tmp/out/fault_recovery.json              # on the GPU machine
    python3 bench/models/fault_recovery.py --device cpu --small --out /tmp/fault.json      # plumbing only
"""

import argparse
import datetime
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc  # noqa: E402

import tandem.torch  # noqa: E402
from tandem.torch.fault_injection import FaultyJob  # noqa: E402

CHECKPOINT_S = 10


def train(endpoint, name, model_name, small, seed):
    model, loss_fn, make_batch = bc.build_model(model_name, small)
    batches = bc.make_batches(make_batch, 4, seed=seed)
    job = tandem.torch.train(model, loss_fn, bc.sgd(model.parameters()), batches[0], endpoint=endpoint, name=name,
                             reattach_timeout=120)
    return job, batches


def snapshot_cost(binary, device, model_name, small, steps):
    """ms/iter of one job per checkpoint setting (None: no state_dir)."""
    rows = []
    for interval in (None, CHECKPOINT_S, 0):
        state_dir = tempfile.mkdtemp(prefix="tandem-state-")
        flags = [] if interval is None else [f"--state_dir={state_dir}", f"--checkpoint_interval={interval}"]
        with bc.Daemon(binary, device, extra_flags=flags, name=f"snapshots-{interval}") as daemon:
            job, batches = train(daemon.endpoint, "snapshots", model_name, small, 1)
            with job:
                for i in range(5):
                    job.step(*batches[i % len(batches)])
                times = []
                for i in range(steps):
                    start = time.perf_counter()
                    job.step(*batches[i % len(batches)])
                    times.append(time.perf_counter() - start)
                persistent = int(job.registration.get("persistent_bytes", job.registration.get("persistentBytes", 0)))
        row = {"checkpoint_interval_s": interval, "median_ms": bc.ms(statistics.median(times)),
               "mean_ms": bc.ms(statistics.mean(times)), "snapshot_bytes": persistent}
        rows.append(row)
        bc.log(f"{model_name}: checkpoint_interval {interval}: {row['median_ms']} ms/iter median, "
               f"{row['mean_ms']} mean ({persistent / 2**20:.1f} MiB per snapshot)")
    base = rows[0]["mean_ms"]
    for row in rows:
        row["mean_vs_none"] = round(row["mean_ms"] / base, 4)
    return rows


def restart_phases(log_text):
    """From tandemd's log (info level): seconds from its first "device fault" line to the old process's last
    line before the exec ("starts again": the stop), to the new process's first line ("tandemd starting": the
    exec, the libraries' loading and their static initializers), to its "device ready" (the start up to its
    devices; that line's open_seconds and setup_seconds split it) and to its "started again" line
    (listening)."""
    def stamp(line):
        return datetime.datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")).timestamp()

    lines = log_text.splitlines()
    fault = next((i for i, line in enumerate(lines) if " device fault: " in line), None)
    if fault is None:
        return None
    phases = {}
    marks = (("stopped_s", " tandemd starts again after a device fault"), ("main_s", " tandemd starting "),
             ("devices_ready_s", " device ready "), ("listening_s", " started again after a device fault"))
    for key, text in marks:
        line = next((line for line in lines[fault:] if text in line), None)
        phases[key] = None if line is None else round(stamp(line) - stamp(lines[fault]), 3)
    ready = next((line for line in lines[fault:] if " device ready " in line), "")
    for field in ("open_seconds", "setup_seconds"):
        value = re.search(field + r"=([0-9.e-]+)", ready)
        phases["device_" + field.replace("_seconds", "_s")] = float(value.group(1)) if value else None
    return phases


def recovery(binary, device, model_name, small, interval, steady=15):
    """Two jobs beside a faulting one; each job's pause and loss."""
    state_dir = tempfile.mkdtemp(prefix="tandem-state-")
    flags = [f"--state_dir={state_dir}", f"--checkpoint_interval={interval}", "--test_faults=true", "--log_level=info"]
    with bc.Daemon(binary, device, extra_flags=flags, name="recovery") as daemon:
        jobs = {n: train(daemon.endpoint, n, model_name, small, seed) for seed, n in enumerate(("left", "right"))}
        faulty = FaultyJob(daemon.endpoint)
        faulty.run(0)
        stop = threading.Event()
        done_at = {n: [] for n in jobs}
        errors = []

        def loop(name):
            job, batches = jobs[name]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    i = 0
                    while not stop.is_set():
                        job.step(*batches[i % len(batches)])
                        done_at[name].append(time.monotonic())
                        i += 1
            except Exception as e:
                errors.append(f"{name}: {type(e).__name__}: {e}")

        def strides(after=None):
            """Until each job has done `steady` steps (after `after`, a monotonic time), at most 300 s."""
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not errors:
                if all(sum(1 for t in done_at[n] if after is None or t > after) >= steady for n in jobs):
                    return
                time.sleep(0.05)

        threads = [threading.Thread(target=loop, args=(n,)) for n in jobs]
        for t in threads:
            t.start()
        strides()
        fault_at = time.monotonic()
        # One fault, one restart: the faulting job does not come back (fault_until_blamed would fault a second
        # time when the first blamed nobody, and a re-attach in progress would then span both restarts: the
        # 2.7-3.0 s pauses measured before 2026-12-07 did).
        try:
            faulty.run(1)
            raise AssertionError("test_fault did not fault the device")
        except (tandem.IterationError, tandem.DaemonUnavailableError) as e:
            faults = 1
            blamed = isinstance(e, tandem.IterationError)
        faulty.close()
        strides(after=fault_at)
        stop.set()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError("; ".join(errors))
        result = {"model": model_name, "checkpoint_interval_s": interval, "faults": faults, "blamed": blamed,
                  "restart": restart_phases(daemon.log_tail(10 ** 7)), "jobs": {}}
        bc.log(f"tandemd after the fault, seconds: {result['restart']}")
        for name, (job, _) in jobs.items():
            times = done_at[name]
            before = [b - a for a, b in zip(times, times[1:]) if b < fault_at]
            around = [b - a for a, b in zip(times, times[1:]) if b > fault_at]
            row = {"steps": len(times), "median_step_ms": bc.ms(statistics.median(before) if before else None),
                   "longest_gap_ms": bc.ms(max(around) if around else None),
                   "recoveries": [r._asdict() for r in job.recoveries]}
            result["jobs"][name] = row
            bc.log(f"{name}: median step {row['median_step_ms']} ms, longest gap after the fault "
                   f"{row['longest_gap_ms']} ms, re-attaches {row['recoveries']}")
            job.close()
        return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", choices=bc.MODEL_NAMES)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--small", action="store_true", help="tiny models (CPU plumbing runs)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per checkpoint setting")
    parser.add_argument("--interval", type=float, default=0, help="checkpoint_interval of the recovery run")
    parser.add_argument("--tandemd")
    parser.add_argument("--out")
    args = parser.parse_args()
    bc.raise_on_signals()
    device = bc.torch_device(args.device)
    binary = bc.find_tandemd(args.tandemd)
    result = {"meta": bc.metadata(device)}
    try:
        result["snapshot_cost"] = snapshot_cost(binary, device, args.model, args.small, args.steps)
        bc.write_json(args.out, result)
        result["recovery"] = recovery(binary, device, args.model, args.small, args.interval)
    except BaseException as e:  # noqa: BLE001  (recorded, then the status says it)
        bc.write_json(args.out, result)
        return bc.stopped_early("fault_recovery", result, e)
    bc.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
