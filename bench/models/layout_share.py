"""Which zoo models the channels-last layout pays for: each model's relayout share (compiler/channels_last.h,
ChannelsLastRelayoutShare: the bytes the layout's permutes move for activations over the bytes its convolutions
read and write), read from the "channels-last layout" log line of a tandemd that registers it with
--channels_last=true. Registration only: no step runs, so a CPU daemon gives the GPU's answer (the pass is the
same; the share hardly depends on the input size).

    python3 bench/models/layout_share.py [--models a,b | --set ci|all] [--size small|full] [--budget 600]
                                         [--out layout_share.json]

A model above the daemon's limit for `channels_last = auto` (0.1, server/service_jobs.cc) stays channels-first
there. Writes JSON (--out) and prints one line per model.
"""

import argparse
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402  (puts the adaptor on sys.path)

import torch  # noqa: E402

import tandem.torch  # noqa: E402

sys.path.insert(0, bc.REPO_ROOT)
from zoo import catalog  # noqa: E402

AUTO_LIMIT = 0.1  # kAutoMaxRelayoutShare in server/service_jobs.cc
# "channels-last layout ... relayout_share=S" when the pass ran; "channels-last layout not used ..." when the
# graph has no 2-D float convolution (with --channels_last=true there is no limit to decline by).
SHARE = re.compile(r"channels-last layout( not used)?.*?relayout_share=([0-9.eE+-]+)")


def _log_since(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return text, offset + len(text.encode())


def measure(entry, args, daemon, offset):
    row = {"model": entry.name, "family": entry.family}
    torch.manual_seed(0)
    model, loss_fn, make_batch = entry.build(args.size)
    batch = make_batch(torch.Generator().manual_seed(1))
    try:
        capture, lowered = tandem.torch.capture_training_job(model, loss_fn, bc.sgd(model.parameters()), batch)
        job = tandem.torch.TrainingJob(capture, lowered, daemon.endpoint, f"layout-{entry.name}", {})
        job.close()
    except Exception as e:  # the model still gets its row
        row["error"] = f"{type(e).__name__}: {e}"[:300]
        return row, offset
    text, offset = _log_since(daemon.log_path, offset)
    found = SHARE.findall(text)
    if found and not found[-1][0]:
        share = float(found[-1][1])
        row["relayout_share"] = round(share, 4)
        row["auto_keeps_channels_first"] = share > AUTO_LIMIT
    else:
        row["relayout_share"] = None  # no 2-D float convolution: the pass changes nothing
    return row, offset


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="")
    parser.add_argument("--set", default="all", choices=["ci", "all"])
    parser.add_argument("--size", default="small", choices=["small", "full"])
    parser.add_argument("--budget", type=float, default=600.0)
    parser.add_argument("--tandemd", default=None)
    parser.add_argument("--out", default="layout_share.json")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or (
        list(catalog.CI_NAMES) if args.set == "ci" else [e.name for e in catalog.ENTRIES])
    budget = bc.Budget(args.budget)
    rows = []
    flags = ("--channels_last=true", "--log_level=info", "--cpu_memory_mib=12288")
    with bc.Daemon(bc.find_tandemd(args.tandemd), "cpu", extra_flags=flags) as daemon:
        offset = 0
        for name in names:
            if budget.left() <= 0:
                rows.append({"model": name, "not_reached": True})
                continue
            start = time.perf_counter()
            row, offset = measure(catalog.entry(name), args, daemon, offset)
            row["wall_s"] = round(time.perf_counter() - start, 1)
            rows.append(row)
            share = row.get("relayout_share")
            verdict = ("error: " + row["error"]) if "error" in row else (
                "no 2-D convolution" if share is None else
                ("auto keeps it channels-first" if share > AUTO_LIMIT else "channels-last"))
            print(f"{name:32s} {'' if share is None else f'{share:8.4f}'} {verdict}", flush=True)
    bc.write_json(args.out, {"meta": bc.metadata("cpu"), "auto_limit": AUTO_LIMIT, "size": args.size, "rows": rows})


if __name__ == "__main__":
    main()
