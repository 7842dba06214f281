"""Capture time of zoo models: each alone, then two at once (two processes), per model.

    python3 bench/models/capture_bench.py [--models a,b | --set ci|all] [--size full|small] [--out capture.json]

The goal (docs/pytorch.md): every zoo model captured in under 5 s, and two captures at once no slower than one.
Capture is tandem.torch.capture_training_job (trace and lowering, no daemon) with SGD and momentum; each
measurement is a fresh process, so nothing is cached between them. Prints a table and writes JSON.
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
import sys, time, json
sys.path[:0] = [{root!r}, {root!r} + "/adaptor/pytorch", {root!r} + "/client/python"]
import torch, tandem.torch
from zoo import catalog
torch.manual_seed(0)
model, loss_fn, make_batch = catalog.entry({name!r}).build({size!r})
batch = make_batch(torch.Generator().manual_seed(1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
start = time.perf_counter()
_, lowered = tandem.torch.capture_training_job(model, loss_fn, opt, batch)
print(json.dumps({{"seconds": time.perf_counter() - start, "nodes": len(lowered.graph["nodes"])}}))
"""


def capture(name, size, copies):
    """Seconds of each of `copies` captures of `name` run at once, each in its own process."""
    code = _CHILD.format(root=ROOT, name=name, size=size)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(copies)]
    results = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            return {"error": err.strip().splitlines()[-1][:300] if err.strip() else f"exit {p.returncode}"}
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {"seconds": [round(r["seconds"], 2) for r in results], "nodes": results[0]["nodes"]}


def main():
    sys.path.insert(0, ROOT)
    from zoo import catalog
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="")
    parser.add_argument("--set", default="ci", choices=("ci", "all"))
    parser.add_argument("--size", default="full", choices=("full", "small"))
    parser.add_argument("--budget", type=float, default=300)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or (
        list(catalog.CI_NAMES) if args.set == "ci" else [e.name for e in catalog.ENTRIES])
    deadline = time.monotonic() + args.budget
    rows = []
    for name in names:
        if time.monotonic() > deadline:
            rows.append({"model": name, "skipped": "not reached within the budget"})
            continue
        alone = capture(name, args.size, 1)
        pair = capture(name, args.size, 2) if "error" not in alone else {}
        rows.append({"model": name, "alone": alone, "two_at_once": pair})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| model | nodes | capture s alone | two at once (each) | slowdown |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        if "alone" not in r or "error" in r["alone"]:
            print(f"| {r['model']} | | {r.get('skipped') or r['alone'].get('error', '')[:60]} | | |")
            continue
        a = r["alone"]["seconds"][0]
        two = r["two_at_once"].get("seconds", [])
        slow = f"{max(two) / a:.2f}x" if two and a > 0 else ""
        print(f"| {r['model']} | {r['alone']['nodes']} | {a} | {', '.join(map(str, two))} | {slow} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"size": args.size, "torch": __import__("torch").__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
