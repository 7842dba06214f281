"""The summary of a hosting result: per mode the count it hosts and whether that is only a lower bound, what the
GPU held at that count, and the ratios of Tandem's count to the others' with how each ratio relates to the ratio
of the capacities (ratio_bound): over no sharing (1 model) and MPS (Salus's two ratios), over time-slicing, and
over the one-process server (the issue's goal: SERVER_GOAL).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import bench_common as bc  # noqa: E402

SALUS = {"over_noshare": 42, "over_mps": 7}
# Tandem should host at least this many times the models that the one-process server hosts at the same p99.
SERVER_GOAL = 1.5
RATIOS = ("tandem_over_noshare", "tandem_over_server", "tandem_over_mps", "tandem_over_timeslice")


def ratio_bound(tandem_lower, other_lower):
    """How a ratio tandem / other relates to the ratio of the capacities."""
    return {(False, False): "bracketed", (True, False): "lower_bound", (False, True): "upper_bound",
            (True, True): "unknown"}[(tandem_lower, other_lower)]


def goal_met(ratio, bound, goal=SERVER_GOAL):
    """Whether a ratio with this ratio_bound shows the goal met (True), missed (False), or neither (None): a ratio
    over the goal counts when it may only be larger (bracketed, lower_bound), one under it when it may only be
    smaller (bracketed, upper_bound)."""
    if ratio >= goal:
        return True if bound in ("bracketed", "lower_bound") else None
    return False if bound in ("bracketed", "upper_bound") else None


def summary(result):
    """result["summary"] (set and returned) from result["modes"]."""
    modes = result["modes"]
    hosted = {m: r.get("hosted") for m, r in modes.items() if r.get("hosted") is not None}
    at_cap = {m: bool(r.get("at_cap")) for m, r in modes.items()}
    lower = {m: bool(modes[m].get("lower_bound", True)) for m in hosted}
    s = {"noshare": 1, "hosted": hosted, "at_cap": at_cap, "hosted_is_lower_bound": lower,
         "stop_reason": {m: modes[m].get("stop_reason") for m in hosted}, "salus_reported": SALUS,
         "definitions": {"noshare": "one model per GPU at a time: 1 by definition",
                         "tandem_over_noshare": "tandem hosted count / 1 (Salus: 42x)",
                         "tandem_over_mps": "tandem hosted count / mps hosted count (Salus: 7x)",
                         "tandem_over_timeslice": "tandem hosted count / timeslice hosted count",
                         "tandem_over_server": "tandem hosted count / server hosted count (one PyTorch process "
                                               "serving every model, CUDA graphs, a thread pool; goal: >= "
                                               f"{SERVER_GOAL:g})",
                         "server_goal": "met: tandem_over_server >= the goal and may only be larger; missed: "
                                        "below it and may only be smaller; null: the bounds do not tell",
                         "hosted_is_lower_bound": "per mode: the search stopped without reaching the mode's "
                                                  "capacity (at --max_count, out of time, or a worker failed); "
                                                  "false when a failing count brackets it or the mode can host "
                                                  "no more (memory, MPS client limit)",
                         "lower_bound": "tandem's count is a lower bound (hosted_is_lower_bound of tandem)",
                         "ratio_bounds": "per ratio: bracketed (both counts bracketed, within --resolution), "
                                         "lower_bound (tandem's count is a lower bound), upper_bound (the "
                                         "other's is), unknown (both are)"}}
    for mode, r in modes.items():  # what the GPU held at the hosted count
        at = next((p for p in r.get("probes", []) if p.get("n") == r.get("hosted") and "error" not in p
                   and not p.get("discarded")), None)
        if at is None:
            continue
        if "tandemd" in at:
            s.setdefault("memory_at_hosted", {})[mode] = {
                "tandemd_jobs_mib": round(at["tandemd"]["persistent_mib"] + at["tandemd"]["lane_mib"], 1),
                "what": "tandemd's persistent tensors + lane arenas (the daemon itself holds the whole GPU)"}
        elif at.get("gpu_mem_used_mib") is not None and r.get("gpu_mem_used_before_mib") is not None:
            s.setdefault("memory_at_hosted", {})[mode] = {
                "processes_mib": at["gpu_mem_used_mib"] - r["gpu_mem_used_before_mib"],
                "what": "nvidia-smi memory.used during the probe minus before the mode started"}
    t = hosted.get("tandem")
    if t is not None:
        s["tandem_over_noshare"] = t
        bounds = {"tandem_over_noshare": "lower_bound" if lower["tandem"] else "bracketed"}
        for other in ("server", "mps", "timeslice"):
            if hosted.get(other):
                s[f"tandem_over_{other}"] = round(t / hosted[other], 3)
                bounds[f"tandem_over_{other}"] = ratio_bound(lower["tandem"], lower[other])
        s["ratio_bounds"] = bounds
        s["lower_bound"] = lower["tandem"]
        if "tandem_over_server" in s:
            s["server_goal"] = {"ratio": SERVER_GOAL,
                                "met": goal_met(s["tandem_over_server"], bounds["tandem_over_server"])}
    result["summary"] = s
    return s


def print_summary(result, s):
    """Logs the hosted count of every mode and the ratios."""
    target = result["config"]["p99_target_ms"]
    bc.log(f"mode        hosted   (p99 target {target:g} ms, {result['config']['rate_per_model']:g} req/s per model)")
    bc.log(f"noshare     {1:6d}   (one model per GPU, by definition)")
    for mode, r in result["modes"].items():
        if "skipped" in r:
            bc.log(f"{mode:11s} {'-':>6s}   skipped: {r['skipped']}")
        elif r.get("hosted") is None:
            bc.log(f"{mode:11s} {'-':>6s}   {r.get('error', 'no result')}")
        else:
            count = f"{'>=' if r.get('lower_bound') else ''}{r['hosted']}"
            bc.log(f"{mode:11s} {count:>6s}   {r.get('search', '')} [{r.get('mode_s')} s]")
    for key in RATIOS:
        if key in s:
            bound = s.get("ratio_bounds", {}).get(key, "")
            goal = ""
            if key == "tandem_over_server":
                met = s["server_goal"]["met"]
                goal = f"; goal >= {SERVER_GOAL:g}: {'unknown' if met is None else 'met' if met else 'missed'}"
            bc.log(f"{key}: {s[key]} ({bound}{goal})")
