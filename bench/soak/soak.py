"""Load and soak: many clients training small jobs against one tandemd for a bounded time.

    /usr/bin/python3 bench/soak/soak.py [--clients 200] [--minutes 60] [--kill-fraction 0.1] [--out soak.json]

Starts a CPU tandemd (or uses --endpoint with --tandemd-pid), then keeps --clients client processes busy until
the deadline: each runs build/examples/mlp_train jobs of --iterations small iterations back to back (a new
process, session and job each time); a --kill-fraction of the jobs is killed (SIGKILL) at a random moment, as a
crashing client would be. Every --sample-seconds it records the daemon's RSS, open file descriptors, threads,
sessions and jobs (tandemctl stats). At the end it checks what the fault-tolerance issue asks of a soak:
the daemon never crashed, RSS and descriptors are flat after the warm-up (last quarter's mean within
--rss-growth of the second quarter's), and no client starved (each finished jobs; the slowest client's
count against the median). Failed jobs are counted by their last line of standard error (numbers taken out) and
exit status. Writes JSON (--out) and prints a summary.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def binary(name, sub):
    for build in ("build", "build-release"):
        path = os.path.join(REPO, build, sub, name)
        if os.path.exists(path):
            return path
    sys.exit(f"soak: {name} not built (ninja -C build {name})")


def proc_stats(pid):
    stats = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                stats[key] = int(value.split()[0])
    stats["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return stats


def daemon_stats(tandemctl, endpoint):
    try:
        out = subprocess.run([tandemctl, f"--endpoint={endpoint}", "--json", "status"], capture_output=True,
                             text=True, timeout=10)
        data = json.loads(out.stdout)
        return {"sessions": int(data.get("sessions", 0)), "jobs": int(data.get("jobs", 0)),
                "worker_pid": int(data.get("worker_pid", 0))}
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--kill-fraction", type=float, default=0.1)
    ap.add_argument("--sample-seconds", type=float, default=10)
    ap.add_argument("--rss-growth", type=float, default=0.10)
    ap.add_argument("--endpoint", default="")
    ap.add_argument("--tandemd-pid", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="tandem-soak-")
    mlp_train = binary("mlp_train", "examples")
    tandemctl = binary("tandemctl", "client/tandemctl")
    daemon = None
    endpoint, pid = args.endpoint, args.tandemd_pid
    if not endpoint:
        endpoint = f"ipc://{tmp}/tandemd.sock"
        log = open(os.path.join(tmp, "tandemd.log"), "wb")
        daemon = subprocess.Popen([binary("tandemd", "server"), "--device=cpu", f"--endpoint={endpoint}",
                                   "--log_level=warning", "--max_jobs_per_session=4",
                                   "--cpu_memory_mib=4096"], stdout=log, stderr=subprocess.STDOUT)
        pid = daemon.pid
        for _ in range(200):
            if os.path.exists(endpoint[len("ipc://"):]):
                break
            time.sleep(0.05)
    # Under a keeper (server/standby.h) the process that serves is the keeper's child: measure that one.
    pid = daemon_stats(tandemctl, endpoint).get("worker_pid") or pid

    deadline = time.monotonic() + args.minutes * 60
    running = {}  # client index -> (Popen, kill_at or None)
    finished = [0] * args.clients
    failed = [0] * args.clients
    killed = 0
    samples = []
    next_sample = time.monotonic()
    start = time.monotonic()

    # Each client's standard error (its latest job's), read back when the
    # job fails: why jobs fail, by message with the numbers taken out.
    err_dir = tempfile.mkdtemp(prefix="soak-clients-")
    reasons = collections.Counter()
    exit_codes = collections.Counter()

    def failure_reason(i):
        try:
            with open(os.path.join(err_dir, f"client-{i}.err"), errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            return "(no stderr)"
        return re.sub(r"\d+", "#", lines[-1])[:300] if lines else "(empty stderr)"

    def launch(i):
        cmd = [mlp_train, f"--endpoint={endpoint}", "--inputs=16", "--hidden=32", "--layers=1", "--classes=4",
               "--batch=16", f"--iterations={args.iterations}", "--print_every=0", "--eval_samples=0",
               f"--seed={rng.randrange(1 << 30)}", f"--name=soak-{i}"]
        with open(os.path.join(err_dir, f"client-{i}.err"), "wb") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        kill_at = time.monotonic() + rng.uniform(0.05, 2.0) if rng.random() < args.kill_fraction else None
        running[i] = (p, kill_at)

    for i in range(args.clients):
        launch(i)
    crashed = False
    while time.monotonic() < deadline:
        now = time.monotonic()
        for i, (p, kill_at) in list(running.items()):
            rc = p.poll()
            if rc is None and kill_at is not None and now >= kill_at:
                p.send_signal(signal.SIGKILL)
                p.wait()
                killed += 1
                rc = "killed"
            if rc is None:
                continue
            if rc == 0:
                finished[i] += 1
            elif rc != "killed":
                failed[i] += 1
                exit_codes[rc] += 1
                reasons[failure_reason(i)] += 1
            launch(i)
        if daemon is not None and daemon.poll() is not None:
            crashed = True
            break
        if now >= next_sample:
            s = {"t": round(now - start, 1)}
            try:
                s.update(proc_stats(pid))
            except OSError:
                crashed = True
                break
            s.update(daemon_stats(tandemctl, endpoint))
            samples.append(s)
            print(json.dumps(s), flush=True)
            next_sample = now + args.sample_seconds
        time.sleep(0.02)
    for p, _ in running.values():
        p.send_signal(signal.SIGKILL)
        p.wait()
    shutil.rmtree(err_dir, ignore_errors=True)
    time.sleep(2)  # the daemon notices the last clients' deaths
    final = proc_stats(pid) if not crashed else {}
    final.update(daemon_stats(tandemctl, endpoint) if not crashed else {})
    if daemon is not None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()

    quarter = max(1, len(samples) // 4)
    second = samples[quarter:2 * quarter] or samples
    last = samples[-quarter:] or samples
    rss2 = statistics.mean(s["VmRSS"] for s in second) if second else 0
    rss4 = statistics.mean(s["VmRSS"] for s in last) if last else 0
    fd2 = max(s["fds"] for s in second) if second else 0
    fd4 = max(s["fds"] for s in last) if last else 0
    median_jobs = statistics.median(finished) if finished else 0
    result = {
        "clients": args.clients, "minutes": args.minutes, "iterations_per_job": args.iterations,
        "kill_fraction": args.kill_fraction, "seed": args.seed,
        "daemon_crashed": crashed, "jobs_finished": sum(finished), "jobs_killed": killed,
        "jobs_failed": sum(failed),
        "failure_reasons": [[reason, count] for reason, count in reasons.most_common(10)],
        "failure_exit_codes": {str(code): count for code, count in exit_codes.items()},
        "jobs_per_client": {"min": min(finished), "median": median_jobs, "max": max(finished)},
        "rss_kib": {"second_quarter_mean": round(rss2), "last_quarter_mean": round(rss4),
                    "max": max((s["VmRSS"] for s in samples), default=0), "after_clients_gone": final.get("VmRSS")},
        "fds": {"second_quarter_max": fd2, "last_quarter_max": fd4, "after_clients_gone": final.get("fds")},
        "after_clients_gone": final,
        "samples": samples,
    }
    checks = {
        "no crash": not crashed,
        "rss flat": rss2 > 0 and rss4 <= rss2 * (1 + args.rss_growth),
        "fds flat": fd4 <= fd2 + 8,
        "no client starved": min(finished) > 0 and min(finished) >= 0.25 * median_jobs,
        "no failed job": sum(failed) == 0,
    }
    result["checks"] = checks
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
