"""Capture time of zoo models: each alone, then two at once (two processes), per model.

    python3 bench/models/capture_bench.py [--models a,b | --set ci|all] [--size full|small] [--out capture.json]
                                          [--profile DIR]

The goal (docs/pytorch.md): every zoo model captured in under 5 s, and two captures at once no slower than one.
Capture is tandem.torch.capture_training_job (trace and lowering, no daemon) with SGD and momentum; each
measurement is a fresh process, so nothing is cached between them; each reports its trace and lowering seconds
apart. Prints a table and writes JSON. --profile DIR runs one more capture of each model alone under cProfile
and writes DIR/<model>.txt: the functions with the most own time and the most cumulative time.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

_CHILD = r"""
import cProfile, io, json, pstats, sys, time
sys.path[:0] = [{root!r}, {root!r} + "/adaptor/pytorch", {root!r} + "/client/python"]
import torch, tandem.torch
from zoo import catalog
torch.manual_seed(0)
model, loss_fn, make_batch = catalog.entry({name!r}).build({size!r})
batch = make_batch(torch.Generator().manual_seed(1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
times = {{}}
for function in ("capture_training_step", "lower"):  # the names capture_training_job calls
    def timed(*args, _f=getattr(tandem.torch, function), _key=function, **kwargs):
        begin = time.perf_counter()
        try:
            return _f(*args, **kwargs)
        finally:
            times[_key] = time.perf_counter() - begin
    setattr(tandem.torch, function, timed)
profile = cProfile.Profile() if {profile!r} else None
start = time.perf_counter()
if profile:
    profile.enable()
_, lowered = tandem.torch.capture_training_job(model, loss_fn, opt, batch)
seconds = time.perf_counter() - start
if profile:
    profile.disable()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(60)
    with open({profile!r}, "w") as f:
        f.write(text.getvalue())
print(json.dumps({{"seconds": seconds, "trace_seconds": times.get("capture_training_step"),
                  "lower_seconds": times.get("lower"), "nodes": len(lowered.graph["nodes"])}}))
"""


def capture(name, size, copies, profile="", env=None):
    """Seconds of each of `copies` captures of `name` run at once, each in its own process (under cProfile,
    writing its report to `profile`, where given; with `env` as the processes' environment)."""
    code = _CHILD.format(root=ROOT, name=name, size=size, profile=profile)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
             for _ in range(copies)]
    results = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            return {"error": err.strip().splitlines()[-1][:300] if err.strip() else f"exit {p.returncode}"}
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {"seconds": [round(r["seconds"], 2) for r in results], "nodes": results[0]["nodes"],
            "trace_seconds": [round(r["trace_seconds"] or 0, 2) for r in results],
            "lower_seconds": [round(r["lower_seconds"] or 0, 2) for r in results]}


def main():
    sys.path.insert(0, ROOT)
    from zoo import catalog
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="")
    parser.add_argument("--set", default="ci", choices=("ci", "all"))
    parser.add_argument("--size", default="full", choices=("full", "small"))
    parser.add_argument("--budget", type=float, default=300)
    parser.add_argument("--out", default="")
    parser.add_argument("--profile", default="", help="a folder for one cProfile report per model")
    parser.add_argument("--hide_gpus", action="store_true",
                        help="capture with CUDA_VISIBLE_DEVICES empty (does PyTorch's CUDA state slow captures "
                        "that run at once?)")
    parser.add_argument("--ab", default="", metavar="NAME=VALUE",
                        help="instead of two at once, each model alone again with this environment variable set "
                        "(e.g. TANDEM_STAMP_UPDATES=0), one after the other")
    args = parser.parse_args()
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="") if args.hide_gpus else None
    ab_env = None
    if args.ab:
        key, _, value = args.ab.partition("=")
        ab_env = dict(env or os.environ, **{key: value})
    names = [n for n in args.models.split(",") if n] or (
        list(catalog.CI_NAMES) if args.set == "ci" else [e.name for e in catalog.ENTRIES])
    deadline = time.monotonic() + args.budget
    rows = []
    for name in names:
        if time.monotonic() > deadline:
            rows.append({"model": name, "skipped": "not reached within the budget"})
            continue
        alone = capture(name, args.size, 1, env=env)
        if ab_env is not None:
            rows.append({"model": name, "alone": alone, "two_at_once": {},
                         "ab": {"env": args.ab, "alone": capture(name, args.size, 1, env=ab_env)}})
        else:
            pair = capture(name, args.size, 2, env=env) if "error" not in alone else {}
            rows.append({"model": name, "alone": alone, "two_at_once": pair})
        if args.profile and "error" not in alone:
            os.makedirs(args.profile, exist_ok=True)
            rows[-1]["profiled"] = capture(name, args.size, 1, os.path.join(args.profile, f"{name}.txt"), env)
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        write(args, rows)  # what is measured so far, should a limit stop the run
    print("| model | nodes | capture s alone (trace + lowering) | two at once (each) | slowdown |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        if "alone" not in r or "error" in r["alone"]:
            print(f"| {r['model']} | | {r.get('skipped') or r['alone'].get('error', '')[:60]} | | |")
            continue
        a = r["alone"]["seconds"][0]
        two = r["two_at_once"].get("seconds", [])
        slow = f"{max(two) / a:.2f}x" if two and a > 0 else ""
        parts = f"{r['alone']['trace_seconds'][0]} + {r['alone']['lower_seconds'][0]}"
        print(f"| {r['model']} | {r['alone']['nodes']} | {a} ({parts}) | {', '.join(map(str, two))} | {slow} |")
    write(args, rows)


def write(args, rows):
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"size": args.size, "torch": __import__("torch").__version__, "hide_gpus": args.hide_gpus,
                       "ab": args.ab, "commit": os.environ.get("TANDEM_GIT_COMMIT", ""), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
