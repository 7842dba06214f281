#!/usr/bin/env python3
"""Combines the suite's per-stage JSON files into one, named for bench/results/<date>-<gpu>.json.

    python3 bench/suite_combine.py OUT_DIR

Reads OUT_DIR/{overhead,pairs,memory,jct,sweep,qos,switch_gap,hosting}.json (whichever exist), and writes
OUT_DIR/<date>-<gpu>.json: {"suite": {date, gpu, gpus, git_commit, command, elapsed_s, stages}, <stage>: ...}.
The suite script passes the command, the GPU count and the elapsed time in SUITE_COMMAND, SUITE_GPUS, SUITE_S.
"""

import json
import os
import re
import sys

STAGES = ("overhead", "pairs", "memory", "jct", "sweep", "qos", "switch_gap", "hosting")


def result_name(meta):
    gpu = re.sub(r"[^a-z0-9]+", "-", (meta.get("gpu") or "unknown").lower()).strip("-")
    gpu = re.sub(r"^nvidia-", "", gpu)
    return f"{(meta.get('date') or '')[:10]}-{gpu}.json"


def main():
    out = sys.argv[1]
    combined, meta = {}, {}
    for kind in STAGES:
        path = os.path.join(out, f"{kind}.json")
        if not os.path.exists(path):
            continue
        try:
            with open(path) as f:
                combined[kind] = json.load(f)
        except ValueError as e:
            print(f"suite: {path} is not JSON ({e}); left out")
            continue
        meta = meta or combined[kind].get("meta") or {}
    if not combined:
        sys.exit("suite: no results to combine")
    suite = {"date": meta.get("date"), "gpu": meta.get("gpu"), "gpus": int(os.environ.get("SUITE_GPUS", "0") or 0),
             "git_commit": meta.get("git_commit"), "command": os.environ.get("SUITE_COMMAND", ""),
             "elapsed_s": int(os.environ.get("SUITE_S", "0") or 0), "stages": list(combined)}
    path = os.path.join(out, result_name(meta))
    with open(path, "w") as f:
        json.dump({"suite": suite, **combined}, f, indent=1)
        f.write("\n")
    print(f"suite: wrote {path} ({', '.join(combined)}; copy it to bench/results/)")


if __name__ == "__main__":
    main()
