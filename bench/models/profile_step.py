#!/usr/bin/env python3
"""Where one training step's GPU time goes inside tandemd, per op kind and per node.

Starts its own tandemd with TANDEM_PROFILE_KERNELS=1 (docs/gpu.md: every iteration runs op by op with an event
before each node, and the daemon logs the profile when the job closes), trains each model a few steps through
the PyTorch adaptor, and reads the profile back from the daemon's log. The totals are op-by-op device time
(no CUDA-graph replay, no overlap between iterations), so they are an upper bound of a replayed iteration's
kernel time; the shares say which kernels to speed up.

    python3 bench/models/profile_step.py --models resnet50 --out /tmp/out/profile.json   # on the GPU machine
    python3 bench/models/profile_step.py --small --device cpu --models fcn5 --out /tmp/p.json  # plumbing only
"""

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc  # noqa: E402

import torch  # noqa: E402

import tandem  # noqa: E402
import tandem.torch  # noqa: E402,F401

sys.path.insert(0, bc.REPO_ROOT)
from zoo import catalog  # noqa: E402

_FIELD = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\S+))')
_MESSAGES = ("kernel profile: op", "kernel profile: node", "kernel profile")


def parse_log_line(line):
    """(message, {key: value}) of one of the daemon's structured log lines, or None."""
    parts = line.split(" ", 2)
    if len(parts) < 3:
        return None
    rest = parts[2]
    for message in _MESSAGES:
        if rest.startswith(message + " "):
            fields = {}
            for m in _FIELD.finditer(rest[len(message):]):
                value = m.group(2) if m.group(2) is not None else m.group(3)
                fields[m.group(1)] = value.replace('\\"', '"').replace("\\\\", "\\")
            return message, fields
    return None


def read_profile(log_path, start_offset):
    """The last profile the daemon logged after start_offset: {summary, ops, nodes}."""
    with open(log_path, "rb") as f:
        f.seek(start_offset)
        text = f.read().decode("utf-8", "replace")
    profile = None
    for line in text.splitlines():
        parsed = parse_log_line(line)
        if parsed is None:
            continue
        message, fields = parsed
        if message == "kernel profile":
            profile = {"summary": fields, "ops": [], "nodes": []}
        elif profile is not None and message == "kernel profile: op":
            profile["ops"].append(fields)
        elif profile is not None and message == "kernel profile: node":
            profile["nodes"].append(fields)
    return profile


def build(name, small):
    """A reference model (bench_common) or a zoo model (zoo/catalog.py), at the small or the full size."""
    if name in bc.MODEL_NAMES:
        return bc.build_model(name, small)
    entry = catalog.entry(name)
    torch.manual_seed(0)
    model, loss_fn, make_batch = entry.builder("small" if small else "full")
    catalog._without_randomness(model)
    return model, loss_fn, make_batch


def profile_model(name, args, device, daemon):
    model, loss_fn, make_batch = build(name, args.small)
    batches = bc.make_batches(make_batch, 2)
    offset = os.path.getsize(daemon.log_path)
    job = tandem.torch.train(model, loss_fn, bc.sgd(model.parameters()), batches[0], endpoint=daemon.endpoint,
                             name=f"profile-{name}", device=device)
    try:
        losses = [job.step(*batches[i % 2]) for i in range(args.steps)]
    finally:
        job.close()
    deadline = time.monotonic() + 10
    profile = None
    while time.monotonic() < deadline:
        profile = read_profile(daemon.log_path, offset)
        if profile is not None and profile["ops"]:
            break
        time.sleep(0.2)
    out = {"steps": args.steps, "losses": losses, "profile": profile}
    if profile is None:
        bc.log(f"  [{name}] no kernel profile in the daemon's log (a CPU device has none)")
        return out
    s = profile["summary"]
    bc.log(f"  [{name}] {s.get('ms_per_iteration')} ms of kernels per op-by-op iteration, {s.get('nodes')} nodes, "
           f"{s.get('iterations')} iterations timed")
    for op in profile["ops"]:
        bc.log(f"    {op['op']:<40} {int(op['nodes']):5d} nodes {float(op['ms_per_iteration']):9.3f} ms "
               f"{float(op['percent']):5.1f}%")
    bc.log("    slowest nodes:")
    for node in profile["nodes"]:
        bc.log(f"    {float(node['ms_per_iteration']):9.3f} ms  {node['node']}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50", help="comma-separated reference or zoo models (zoo/catalog.py)")
    p.add_argument("--small", action="store_true", help="the tiny versions of the models (CPU smoke test)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--steps", type=int, default=6, help="training steps per model (the first is not timed)")
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--log_dir", default=None, help="where tandemd's log goes (default: a temporary folder)")
    p.add_argument("--daemon_flags", default="", help="extra tandemd flags, space-separated")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args()
    if args.steps < 2:
        p.error("--steps must be at least 2 (the first iteration is not timed)")
    bc.raise_on_signals()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in bc.MODEL_NAMES and n not in {e.name for e in catalog.ENTRIES}:
            p.error(f"unknown model {n!r}: a reference model ({', '.join(bc.MODEL_NAMES)}) or a zoo model")
    device = bc.torch_device(args.device)
    bc.like_for_like_numerics()
    result = {"meta": bc.metadata(device), "config": {"models": names, "small": args.small, "steps": args.steps,
                                                      "daemon_flags": args.daemon_flags, **bc.numerics()},
              "models": {}}
    os.environ["TANDEM_PROFILE_KERNELS"] = "1"
    flags = [*bc.daemon_flags_for_large_models(), "--log_level=info", *args.daemon_flags.split()]
    daemon = bc.Daemon(bc.find_tandemd(args.tandemd), device, extra_flags=flags, log_dir=args.log_dir,
                       name="tandemd-profile")
    try:
        daemon.start()
        for name in names:
            bc.log(f"profile: {name}")
            result["models"][name] = profile_model(name, args, device, daemon)
    finally:
        daemon.stop()
    bc.write_json(args.out, result)


if __name__ == "__main__":
    main()
