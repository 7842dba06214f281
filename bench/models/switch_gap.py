#!/usr/bin/env python3
"""The switch gap: idle device time between two jobs' iterations taking turns in one lane of tandemd.

Two fcn5-sized MLP jobs (examples/mlp_train: 784-4096x4-10, batch 256, two iterations in flight each) share one
lane (--max_lanes=1, FAIR, so they alternate iteration by iteration). tandemd measures, on the lane's stream, the
time between one iteration's last kernel and the next iteration's first copy whenever the next one was already
waiting behind it (metrics tandem_lane_switch_gap_seconds and tandem_lane_same_job_gap_seconds); this program reads
them back. Run twice in the same call: with lookahead (max_inflight_per_lane=2, the default: the next iteration is
enqueued behind the running one) and without (max_inflight_per_lane=1: the next iteration is only enqueued after the
control loop saw the previous one finish, so each gap includes the completion round trip: the daemon's own
baseline). The figure to compare with is PipeSwitch-style process switching: 5-35 ms per switch.

    python3 bench/models/switch_gap.py --out /tmp/out/switch_gap.json            # on the GPU machine
    python3 bench/models/switch_gap.py --device cpu --small --out /tmp/gap.json  # plumbing only
"""

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        samples[name] = float(value)
    return samples


def histogram(samples, family):
    """count, mean, and the bucket bounds under which 50% and 99% of the observations fall."""
    prefix = family + "_bucket{"
    buckets = []
    for key, value in samples.items():
        if key.startswith(prefix):
            le = key.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), value))
    buckets.sort()
    count = next((v for k, v in samples.items() if k.startswith(family + "_count")), 0.0)
    total = next((v for k, v in samples.items() if k.startswith(family + "_sum")), 0.0)

    def quantile(q):
        for bound, cumulative in buckets:
            if count and cumulative >= q * count:
                return bound
        return None

    return {"count": int(count), "mean_us": (total / count * 1e6) if count else None,
            "p50_le_us": None if quantile(0.5) is None else quantile(0.5) * 1e6,
            "p99_le_us": None if quantile(0.99) is None else quantile(0.99) * 1e6}


def run_once(args, device, inflight_per_lane):
    port = free_port()
    daemon = bc.Daemon(bc.find_tandemd(args.tandemd), device, policy="fair",
                       extra_flags=[*bc.daemon_flags_for_large_models(), "--max_lanes=1",
                                    f"--max_inflight_per_lane={inflight_per_lane}", f"--metrics_port={port}"],
                       name=f"tandemd-gap{inflight_per_lane}")
    shape = (["--inputs=16", "--hidden=32", "--layers=1", "--classes=4", "--batch=32"] if args.small else
             ["--inputs=784", "--hidden=4096", "--layers=4", "--classes=10", "--batch=256"])
    trainers = []
    try:
        daemon.start()
        mlp_train = bc.find_binary("mlp_train", "MLP_TRAIN", "examples", args.mlp_train)
        start = time.monotonic()
        for k in range(2):
            log = open(os.path.join(daemon.dir, f"job{k}.log"), "wb")
            p = subprocess.Popen([mlp_train, f"--endpoint={daemon.endpoint}", f"--name=job{k}",
                                  f"--iterations={args.iterations}", "--inflight=2", "--print_every=1000000",
                                  "--eval_samples=0",
                                  *shape], stdout=log, stderr=subprocess.STDOUT)
            bc.record_pid(p.pid, f"mlp_train job{k}")
            trainers.append(p)
        for p in trainers:
            if p.wait(timeout=args.timeout_s) != 0:
                raise RuntimeError(f"mlp_train exited with {p.returncode}: {daemon.log_tail()}")
            bc.forget_pid(p.pid)
        wall = time.monotonic() - start
        samples = scrape(port)
    finally:
        for p in trainers:
            if p.poll() is None:
                p.kill()
        daemon.stop()
    label = f'{{device="{"cuda:0" if device == "cuda" else "cpu"}"}}'
    busy = samples.get("tandem_device_busy_seconds_total" + label, 0.0)
    iterations = samples.get("tandem_device_iterations_total" + label, 0.0)
    out = {"max_inflight_per_lane": inflight_per_lane, "iterations": int(iterations), "wall_s": wall,
           "device_busy_s": busy, "busy_fraction_of_wall": busy / wall if wall else None,
           "switch_gap": histogram(samples, "tandem_lane_switch_gap_seconds"),
           "same_job_gap": histogram(samples, "tandem_lane_same_job_gap_seconds")}
    s = out["switch_gap"]
    bc.log(f"  max_inflight_per_lane={inflight_per_lane}: {int(iterations)} iterations in {wall:.2f} s, device busy "
           f"{busy:.2f} s; switch gaps: {s['count']}, mean {s['mean_us']} us, p50 <= {s['p50_le_us']} us, "
           f"p99 <= {s['p99_le_us']} us; same-job gaps: {out['same_job_gap']}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--small", action="store_true", help="a tiny MLP (CPU smoke test)")
    p.add_argument("--iterations", type=int, default=300, help="iterations per job")
    p.add_argument("--tandemd", default=None)
    p.add_argument("--mlp_train", default=None)
    p.add_argument("--timeout_s", type=float, default=120)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    bc.raise_on_signals()
    device = bc.torch_device(args.device)
    result = {"meta": bc.metadata(device),
              "config": {"jobs": "2 x mlp_train " + ("16-32-4 b32" if args.small else "784-4096x4-10 b256"),
                         "iterations_per_job": args.iterations, "policy": "fair", "max_lanes": 1,
                         "inflight_per_job": 2},
              "runs": []}
    for inflight in (2, 1):
        result["runs"].append(run_once(args, device, inflight))
    bc.write_json(args.out, result)


if __name__ == "__main__":
    main()
