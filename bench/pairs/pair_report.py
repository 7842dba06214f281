"""What the pair matrix derives from its measurements, and the table it prints.

Per pair and system (pair_systems.Matrix): each job's rate = solo / shared time per iteration in that system
(1 / r) and their sum (`aggregate`). Derived here, once every system has run:
  - `throughput_compiled_units`: the pair's absolute throughput, sum over its two jobs of shared iterations per
    second x compiled solo seconds per iteration. 1.0 is the work of one compiled job alone on the GPU, so
    systems whose solo times differ (eager, compiled, Tandem) are compared on one scale. The compiled solo time of
    a model is its time_slicing_compiled solo (a compiled process alone), else its mps_compiled one;
  - `tandem_over_mps_compiled` per pair: Tandem's throughput over MPS-compiled's, and its geometric mean over
    the pairs that have both;
  - for Tandem, `aggregate_vs_native_solo`: its rates against the eager solo times of time_slicing.
"""

import math

COMPILED_SOLO_SYSTEMS = ("time_slicing_compiled", "mps_compiled")


def solo_ms(systems, name, model):
    """`model`'s solo ms per iteration in system `name`, or None."""
    solo = systems.get(name, {}).get("solo", {}).get(model, {})
    return solo.get("ms_per_iter")


def compiled_solo_ms(systems, model):
    """(ms per iteration, system) of `model`'s compiled solo time, or (None, None) when none was measured."""
    for name in COMPILED_SOLO_SYSTEMS:
        ms = solo_ms(systems, name, model)
        if ms:
            return ms, name
    return None, None


def _measured_pairs(system):
    return [p for p in system.get("pairs", []) if "jobs" in p]


def derive(result):
    """Adds the derived figures to result (in place) and returns result["summary"]."""
    systems = result["systems"]
    for p in _measured_pairs(systems.get("tandem", {})):
        native = [solo_ms(systems, "time_slicing", j["model"]) for j in p["jobs"]]
        if all(native):
            p["aggregate_vs_native_solo"] = round(sum(n / j["shared_ms"] for n, j in zip(native, p["jobs"])), 4)
    for system in systems.values():
        for p in _measured_pairs(system):
            compiled = [compiled_solo_ms(systems, j["model"])[0] for j in p["jobs"]]
            if all(compiled):
                p["throughput_compiled_units"] = round(
                    sum(c / j["shared_ms"] for c, j in zip(compiled, p["jobs"])), 4)
    summary = {"compiled_solo_ms": {}, "pairs": []}
    for names in result["config"]["pairs"]:
        for model in names:
            ms, source = compiled_solo_ms(systems, model)
            if ms:
                summary["compiled_solo_ms"][model] = {"ms_per_iter": ms, "system": source}
    ratios = []
    for names in result["config"]["pairs"]:
        pair = "+".join(names)
        row = {"pair": pair, "throughput_compiled_units": {}}
        for s, system in systems.items():
            entry = pair_entry(system, pair)
            if entry is not None and "throughput_compiled_units" in entry:
                row["throughput_compiled_units"][s] = entry["throughput_compiled_units"]
        tandem, mps = (row["throughput_compiled_units"].get(s) for s in ("tandem", "mps_compiled"))
        row["tandem_over_mps_compiled"] = round(tandem / mps, 4) if tandem and mps else None
        if row["tandem_over_mps_compiled"]:
            ratios.append(row["tandem_over_mps_compiled"])
        summary["pairs"].append(row)
    summary["tandem_over_mps_compiled_geomean"] = geomean(ratios)
    summary["tandem_over_mps_compiled_pairs"] = len(ratios)
    missing = [f"{s}: {systems.get(s, {}).get('skipped', 'not run')}" for s in ("tandem", "mps_compiled")
               if "skipped" in systems.get(s, {"skipped": None})]
    if missing:
        summary["tandem_over_mps_compiled_missing"] = "; ".join(missing)
    summary["table"] = table(result, summary)
    result["summary"] = summary
    return summary


def geomean(values):
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 4) if values else None


def pair_entry(system, pair):
    """The system's result for `pair` ("a+b"), or None."""
    return next((p for p in system.get("pairs", []) if p["pair"] == pair), None)


def system_order(result):
    """The systems that ran, in the order config.systems gives them, then any others."""
    systems = result["systems"]
    order = result["config"].get("systems", [])
    return [s for s in order if s in systems] + [s for s in systems if s not in order]


def _cell(system, pair):
    """The cell "rate A + rate B = sum", or why the pair has none."""
    if "skipped" in system:
        return "skipped"
    entry = pair_entry(system, pair)
    if entry is None:
        return "-"
    if "jobs" not in entry:
        return "skipped" if entry.get("error", "").startswith("skipped") else "failed"
    a, b = (j["rate"] for j in entry["jobs"])
    return f"{a:.2f} + {b:.2f} = {entry['aggregate']:.2f}"


def _ratio(value):
    return "-" if value is None else f"{value:.2f}"


def table(result, summary):
    """Markdown: per pair and system each job's rate against its own solo rate in that system and their sum,
    and Tandem's absolute throughput over MPS-compiled's; then, where compiled solo times exist, each system's
    absolute throughput in compiled solo units."""
    systems = result["systems"]
    names = system_order(result)
    lines = ["| pair | " + " | ".join(f"{s}: A + B = sum" for s in names) + " | Tandem / MPS-compiled |",
             "| --- |" + " --- |" * (len(names) + 1)]
    for row in summary["pairs"]:
        cells = [_cell(systems[s], row["pair"]) for s in names]
        lines.append(f"| {row['pair']} | " + " | ".join(cells) + f" | {_ratio(row['tandem_over_mps_compiled'])} |")
    lines.append("| geometric mean | " + " | ".join("" for _ in names)
                 + f" | {_ratio(summary['tandem_over_mps_compiled_geomean'])} |")
    if "tandem_over_mps_compiled_missing" in summary:
        lines += ["", f"No Tandem / MPS-compiled: {summary['tandem_over_mps_compiled_missing']}."]
    units = [s for s in names if any(s in row["throughput_compiled_units"] for row in summary["pairs"])]
    if units:
        lines += ["", "Absolute throughput in compiled solo units (1.0 = one compiled job alone):", "",
                  "| pair | " + " | ".join(units) + " |", "| --- |" + " --- |" * len(units)]
        for row in summary["pairs"]:
            lines.append(f"| {row['pair']} | "
                         + " | ".join(_ratio(row["throughput_compiled_units"].get(s)) for s in units) + " |")
    return "\n".join(lines)
