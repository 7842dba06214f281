"""The ops each zoo model's training step lowers to, as Tandem's capture sees them.

    python3 -m zoo.census [--size small] [--only a,b] [--jobs N] [--out census.json]

For each zoo entry: build it, capture one training step (SGD with momentum)
with tandem.torch's capture (no daemon), and record the ops of the lowered
graph, the capture's seconds, or the error. Prints one line per model and
the union of ops with the number of models that use each; --out writes it
all as JSON. Run it under each PyTorch a user may have (1.13 here, 2.x on
the GPU machine): their decompositions differ.
"""

import argparse
import collections
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (ROOT, os.path.join(ROOT, "client", "python"), os.path.join(ROOT, "adaptor", "pytorch")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402

import tandem.torch  # noqa: E402
from zoo import catalog  # noqa: E402


def census_of(entry, size):
    torch.manual_seed(0)
    model, loss_fn, make_batch = entry.build(size)
    batch = make_batch(torch.Generator().manual_seed(0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = time.perf_counter()
    _, lowered = tandem.torch.capture_training_job(model, loss_fn, optimizer, batch)
    seconds = time.perf_counter() - start
    ops = collections.Counter(node["op"] for node in lowered.graph["nodes"])
    return {"ops": dict(sorted(ops.items())), "capture_seconds": round(seconds, 3),
            "parameters": sum(p.numel() for p in model.parameters())}


def _one(work):
    name, size = work
    torch.set_num_threads(1)
    try:
        record = census_of(catalog.entry(name), size)
        print(f"{name}: {len(record['ops'])} ops, captured in {record['capture_seconds']} s", flush=True)
    except Exception as e:  # a model the capture cannot take: recorded, the census goes on
        record = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]}
        print(f"{name}: FAILED {record['error']}", flush=True)
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("small", "full"))
    parser.add_argument("--only", default="", help="comma-separated zoo names (default: every entry)")
    parser.add_argument("--out", default="", help="write the census as JSON here")
    parser.add_argument("--jobs", type=int, default=1, help="models captured at once (processes)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or [e.name for e in catalog.ENTRIES]
    result = {"torch": torch.__version__, "size": args.size, "models": {}}
    work = [(name, args.size) for name in names]
    if args.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            records = pool.map(_one, work, chunksize=1)
    else:
        records = [_one(w) for w in work]
    for name, record in zip(names, records):
        result["models"][name] = record
    uses = collections.Counter()
    for record in result["models"].values():
        uses.update(record.get("ops", {}).keys())
    result["ops"] = dict(sorted(uses.items()))
    print(f"{len(uses)} distinct ops over {len(names)} models")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
