"""tandemd's own account of a measured window, for the benchmarks that run jobs through it.

    before = daemon_stats.snapshot(client)      # a tandem.Client on the daemon's endpoint
    ... the window ...
    window = daemon_stats.delta(before, daemon_stats.snapshot(client))

delta() gives what the window did on the first device (iterations, kernel seconds, lane moves, graph replays
and captures, per lane its jobs, iterations, kernel and occupied seconds) and where the control loop (one
thread) spent it: busy seconds, the work items that took most of it with their mean time and their mean wait
in the queue behind other items, and the sections of a work item ("Handler/part"); and per thread that
enqueues the lanes' device work its items, busy seconds and mean wait. The device's journal
(server/device_journal.h: lane moves, lane arenas that moved, iterations that captured a graph, iterations that
waited 5 ms or more in the daemon, each with its wall-clock time) comes with each snapshot; delta() keeps the
window's events and counts them, and near() and summarize() line them up with a client's slow requests.
"""

import time

# staging_allocations: page-locked staging buffers allocated (each one a point where the device synchronizes);
# arena_moves: lane arenas that moved to other addresses (each job of the lane then captures its graphs again).
# warm_steps: lane warm-up steps (tandemd --warm_lanes: a node of a job readied on another lane's stream).
COUNTERS = ("lane_moves", "graph_launches", "op_by_op_runs", "graph_captures", "staging_allocations", "arena_moves",
            "warm_steps")


def snapshot(client):
    """The first device's counters and the loop's work items from tandemd's stats (protobuf JSON: 64-bit
    integers come as strings); None without a client, {"error": ...} when the stats cannot be had."""
    if client is None:
        return None
    try:
        stats = client.stats()
    except Exception as e:  # stats are extra information; a measurement does not fail for them
        return {"error": str(e)}
    dev = stats.get("devices", [{}])[0]
    keys = ("persistent_bytes", "lane_bytes", "reserve_bytes", "capacity_bytes", "iterations", "lanes") + COUNTERS
    out = {k: int(dev.get(k, 0)) for k in keys}
    out["at"] = time.time()  # the journal's clock (tandemd runs on this machine)
    out["pid"] = int(stats.get("pid", 0)) or None
    out["busy_seconds"] = float(dev.get("busy_seconds", 0.0))
    out["per_lane"] = {int(lane.get("lane", 0)): {"jobs": len(lane.get("jobs", [])),
                                                  "iterations": int(lane.get("iterations", 0)),
                                                  "busy_s": float(lane.get("busy_seconds", 0.0)),
                                                  "occupied_s": float(lane.get("occupied_seconds", 0.0))}
                       for lane in dev.get("lane_info", [])}
    # Per kind of work item: (count, seconds run, seconds waited in the queue).
    out["loop"] = {h["name"]: (int(h.get("count", 0)), float(h.get("total_seconds", 0.0)),
                               float(h.get("wait_seconds", 0.0)))
                   for h in stats.get("loop_handlers", [])}
    out["loop_max"] = {h["name"]: float(h.get("max_seconds", 0.0)) for h in stats.get("loop_handlers", [])}
    # The threads that enqueue the lanes' work: (items, seconds run, seconds waited).
    out["executors"] = {e["name"]: (int(e.get("items", 0)), float(e.get("busy_seconds", 0.0)),
                                    float(e.get("wait_seconds", 0.0)))
                        for e in dev.get("executors", [])}
    # Protobuf JSON leaves out fields at their defaults (lane 0, from_lane 0).
    out["events"] = [{"t": float(e.get("unix_seconds", 0.0)), "kind": e.get("kind", ""), "job": int(e.get("job", 0)),
                      "lane": int(e.get("lane", 0)), "from_lane": int(e.get("from_lane", 0)),
                      "seconds": float(e.get("seconds", 0.0)), "run_seconds": float(e.get("run_seconds", 0.0)),
                      "graph_seconds": float(e.get("graph_seconds", 0.0)), "pauses": int(e.get("pauses", 0))}
                     for e in dev.get("events", [])]
    out["events_dropped"] = int(dev.get("events_dropped", 0))
    return out


def near(events, t0, t1):
    """The events with t0 <= t < t1."""
    return [e for e in events if t0 <= e["t"] < t1]


def summarize(events):
    """Per kind, how many, on which lanes, their summed seconds in ms and the longest, max_ms (a capture's: the host
    time it held its lane's thread, with its parts run_ms and graph_ms; a slow wait's: the wait; a segmented
    iteration's: from its first segment to its end, with its device time run_ms and its pauses):
    {"capture": {"n": 2, "lanes": [1, 4], "ms": 6.1, "max_ms": 5.0, "run_ms": 0.9, "graph_ms": 4.8}, ...}."""
    out = {}
    for e in events:
        k = out.setdefault(e["kind"], {"n": 0, "lanes": set(), "s": 0.0, "max": 0.0, "run": 0.0, "graph": 0.0,
                                       "pauses": 0})
        k["n"] += 1
        k["lanes"].add(e["lane"])
        k["s"] += e.get("seconds", 0.0)
        k["max"] = max(k["max"], e.get("seconds", 0.0))
        k["run"] += e.get("run_seconds", 0.0)
        k["graph"] += e.get("graph_seconds", 0.0)
        k["pauses"] += e.get("pauses", 0)
    summary = {}
    for kind, v in sorted(out.items()):
        summary[kind] = {"n": v["n"], "lanes": sorted(v["lanes"]), "ms": round(v["s"] * 1e3, 3)}
        if v["max"] > 0:
            summary[kind]["max_ms"] = round(v["max"] * 1e3, 3)
        if kind == "capture":
            summary[kind].update(run_ms=round(v["run"] * 1e3, 3), graph_ms=round(v["graph"] * 1e3, 3))
        if kind == "segmented":
            summary[kind].update(run_ms=round(v["run"] * 1e3, 3), pauses=v["pauses"])
    return summary


def usable(*snapshots):
    return all(s and "error" not in s for s in snapshots)


def delta(before, after, top=6):
    """What happened between two snapshots (None unless both are usable)."""
    if not usable(before, after):
        return None
    out = {"lanes": after["lanes"], "iterations": after["iterations"] - before["iterations"],
           "busy_s": round(after["busy_seconds"] - before["busy_seconds"], 3)}
    # Moves between lanes, graph replays against kernel-by-kernel runs, and captures.
    for k in COUNTERS:
        out[k] = after[k] - before[k]

    # occupied_s: wall seconds with an iteration enqueued on the lane (busy_s counts only its kernels).
    def lane_delta(lane, now):
        was = before["per_lane"].get(lane, {})
        return {"lane": lane, "jobs": now["jobs"], "iterations": now["iterations"] - was.get("iterations", 0),
                **{k: round(now[k] - was.get(k, 0.0), 3) for k in ("busy_s", "occupied_s")}}

    out["per_lane"] = [lane_delta(lane, now) for lane, now in sorted(after["per_lane"].items())]
    zero = (0, 0.0, 0.0)
    loop = {name: tuple(a - b for a, b in zip(now, before["loop"].get(name, zero)))
            for name, now in after["loop"].items()}

    # Names with a '/' are sections of a work item (its time includes theirs): kept apart, all of them.
    def rows(items, waits):
        return [{"name": name, "count": count, "mean_us": round(1e6 * secs / count, 1), "seconds": round(secs, 3),
                 **({"mean_wait_us": round(1e6 * wait / count, 1)} if waits else {})}
                for name, (count, secs, wait) in sorted(items, key=lambda kv: -kv[1][1]) if count > 0]

    handlers = [(k, v) for k, v in loop.items() if "/" not in k]
    out["loop_busy_s"] = round(sum(v[1] for _, v in handlers), 3)
    out["loop_top"] = rows(handlers, True)[:top]
    out["loop_sections"] = rows([(k, v) for k, v in loop.items() if "/" in k], False)
    # The longest single work item seen so far, where the window raised it (a stall of the loop itself).
    new_max = {name: round(mx * 1e3, 3) for name, mx in after.get("loop_max", {}).items()
               if mx > before.get("loop_max", {}).get(name, 0.0)}
    out["loop_new_max_ms"] = {name: mx for name, mx in new_max.items() if "/" not in name}
    # The same for the sections: which part of a handler the stall was.
    out["loop_sections_new_max_ms"] = {name: mx for name, mx in new_max.items() if "/" in name}
    # The enqueuing threads: a thread busy for most of the window is where its lanes' iterations queue.
    out["executors"] = [{"name": name, "items": items, "busy_s": round(busy, 3),
                         "mean_us": round(1e6 * busy / items, 1), "mean_wait_us": round(1e6 * wait / items, 1)}
                        for name, (items, busy, wait) in (
                            (name, tuple(a - b for a, b in zip(now, before.get("executors", {}).get(name, zero))))
                            for name, now in sorted(after.get("executors", {}).items()))
                        if items > 0]
    # The journal's events of the window (a snapshot's events are the journal's last 1024; events_dropped says
    # whether the window lost some to newer ones).
    out["events"] = near(after.get("events", []), before.get("at", 0.0), after.get("at", float("inf")))
    out["event_counts"] = {kind: v["n"] for kind, v in summarize(out["events"]).items()}
    out["events_dropped"] = after.get("events_dropped", 0) - before.get("events_dropped", 0)
    return out
