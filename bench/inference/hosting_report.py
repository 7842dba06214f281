#!/usr/bin/env python3
"""What a hosting search's JSON says about Tandem's probes, one line each, without a GPU.

    /usr/bin/python3 bench/inference/hosting_report.py bench/results/2026-12-02-h200-hosting-modes14.json

First, where a search prespawned its models, how they sat in the lanes while they registered. Then per probe
of the tandem mode: the count, pass or fail, the worst p99, the models over the target, tandemd's lane
moves, graph captures and arena moves in the window, the fewest and most jobs and kernel time of a lane, where the slow
requests' time went (behind / queue / run / other, ms) and the whole window's captures and slow waits; under a
failing probe its top stall bins, each with the models and client processes it spans and what tandemd's journal
shows beside it (per kind: how many, on which lanes, ms; a capture's longest and its run and graph parts). Last,
the probes' captures that took longest (from the events the JSON kept), with the parts: the kernel-by-kernel
run, the graph (record, instantiate or update, upload) and the rest (releasing the job's graphs on its other
lanes).
"""

import argparse
import json
import sys


def probe_line(p):
    d = p.get("tandemd") or {}
    slow = (p.get("latency_split_ms") or {}).get("slow") or {}
    split = "/".join(f"{slow.get(k, 0):.1f}" for k in ("behind", "queue", "run", "other")) if slow else "-"
    verdict = "pass" if p["pass"] else "FAIL"
    p99 = f"{p['p99_ms_max']:8.2f}" if isinstance(p.get("p99_ms_max"), (int, float)) else f"{'-':>8}"
    return (f"N={p['n']:4d} {verdict}  p99 {p99} ms  over {p.get('models_over_target', '-'):>3}"
            f"  moves {d.get('lane_moves', '-'):>3}  captures {d.get('graph_captures', '-'):>3}"
            f"  arena {d.get('arena_moves', '-'):>2}{lanes_text(d.get('per_lane'))}  slow b/q/r/o ms {split}"
            f"{journal_text(d.get('journal'))}")


def lanes_text(per_lane):
    """The fewest and most jobs a lane held after the probe, and the least and most kernel time a lane ran in it
    (PACK levels lane loads, not job counts): "  lane jobs 25-100, busy 0.80-1.65 s"."""
    jobs = [x.get("jobs", 0) for x in per_lane or []]
    if not jobs:
        return ""
    busy = [x["busy_s"] for x in per_lane if isinstance(x.get("busy_s"), (int, float))]
    return f"  lane jobs {min(jobs)}-{max(jobs)}" + (f", busy {min(busy):.2f}-{max(busy):.2f} s" if busy else "")


def journal_text(journal):
    """The whole window's captures and slow waits (files since the journal summary): "; capture longest 23.1 ms
    (run 19.0 of 41.2 ms in all), slow_wait 12 longest 14.2 ms"."""
    if not journal:
        return ""
    parts = []
    if "capture" in journal:
        c = journal["capture"]
        parts.append(f"capture longest {c.get('max_ms', 0.0):.1f} ms (run {c['run_ms']:.1f}, graph "
                     f"{c['graph_ms']:.1f} of {c['ms']:.1f} ms in all)")
    if "slow_wait" in journal:
        w = journal["slow_wait"]
        parts.append(f"slow_wait {w['n']} longest {w.get('max_ms', 0.0):.1f} ms")
    return "; " + ", ".join(parts) if parts else ""


def bin_line(b):
    parts = []
    for kind, v in sorted((b.get("tandemd") or {}).items()):
        text = f"{kind} {v['n']} on {v.get('lanes', '?')} {v.get('ms', 0.0):.1f} ms"
        if "run_ms" in v:
            text += f" (longest {v['max_ms']:.1f}, run {v['run_ms']:.1f}, graph {v['graph_ms']:.1f})"
        elif "max_ms" in v:
            text += f" (longest {v['max_ms']:.1f})"
        parts.append(text)
    # Files older than a field show "?" for it.
    return (f"    at {b['at_s']:.2f} s: {b.get('requests', '?')} requests, {b.get('models', '?')} models, "
            f"{b.get('processes', '?')} processes; "
            + ("; ".join(parts) or "nothing journaled"))


def longest_captures(probes, top):
    caps = []
    for p in probes:
        for e in (p.get("tandemd") or {}).get("events") or []:
            if e.get("kind") == "capture":
                caps.append((e.get("seconds", 0.0), e.get("run_seconds", 0.0), e.get("graph_seconds", 0.0),
                             e.get("job"), e.get("lane"), p["n"], e.get("at_s")))
    caps.sort(reverse=True)
    return caps[:top]


def registration_line(r, samples=8):
    """While the prespawned models registered: the jobs per lane at the end, the lane moves, and the fullest lane
    over time: "registration: lane jobs 33-99, 4 moves; fullest lane (s: jobs/moves) 1: 5/0, 2: 40/0, ..."."""
    jobs = r.get("lane_jobs") or [0]
    fullest = r.get("fullest") or []
    step = max(1, -(-len(fullest) // samples))  # at most `samples` of them, the last always
    shown = fullest[::step] + ([fullest[-1]] if fullest and (len(fullest) - 1) % step else [])
    over_time = ", ".join(f"{t:g}: {most}/{moves}" for t, most, moves in shown)
    return (f"registration: lane jobs {min(jobs)}-{max(jobs)}, {r.get('lane_moves', 0)} moves; "
            f"fullest lane (s: jobs/moves) {over_time}")


def report(result, bins=3, top=10):
    mode = (result.get("modes") or {}).get("tandem")
    if not mode:
        return ["no tandem mode in this file"]
    lines = [f"tandem hosted {mode.get('hosted')} (first failing {mode.get('first_failing')})"]
    if mode.get("registration"):
        lines.append(registration_line(mode["registration"]))
    for p in mode.get("probes", []):
        lines.append(probe_line(p))
        if not p["pass"]:
            lines += [bin_line(b) for b in ((p.get("stalls") or {}).get("top") or [])[:bins]]
    caps = longest_captures(mode.get("probes", []), top)
    if caps:
        # The rest of a capture's time released the job's graphs on its other lanes (cudaGraphExecDestroy).
        lines.append("longest captures kept (ms: whole, run, graph, rest; job, lane, probe, at_s):")
        lines += [f"    {s * 1e3:7.2f} {r * 1e3:7.2f} {g * 1e3:7.2f} {max(0.0, s - r - g) * 1e3:7.2f}"
                  f"  job {j} lane {lane} N={n} at {at}" for s, r, g, j, lane, n, at in caps]
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="a hosting.json (bench/inference/hosting.py --out)")
    p.add_argument("--bins", type=int, default=3, help="stall bins shown per failing probe")
    p.add_argument("--top", type=int, default=10, help="longest captures listed")
    args = p.parse_args(argv)
    with open(args.json) as f:
        result = json.load(f)
    print("\n".join(report(result, args.bins, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
