"""The pair matrix as one plot: per pair, one stacked bar per system, each job's share of the pair's absolute
throughput in compiled solo units (1.0 = one torch.compile'd job alone on the GPU; the derived figures of
pair_report.py). A pair whose models have no compiled solo time is drawn in eager solo units (a PyTorch process
alone: time_slicing's, else mps's solo time), and its label says so; one with neither in each system's own.

    python3 bench/pairs/pair_plot.py bench/results/FILE.json --out FILE.png
"""

import argparse
import json

import pair_report

COLORS = {"tandem": "#1f77b4", "time_slicing": "#bbbbbb", "time_slicing_compiled": "#7f7f7f", "mps": "#ffbb78",
          "mps_compiled": "#ff7f0e"}


def _unit_ms(systems, models):
    """("compiled" | "eager", [solo ms per model]) of the first unit every model has, else ("own", None)."""
    compiled = [pair_report.compiled_solo_ms(systems, m)[0] for m in models]
    if all(compiled):
        return "compiled", compiled
    for name in ("time_slicing", "mps"):
        eager = [pair_report.solo_ms(systems, name, m) for m in models]
        if all(eager):
            return "eager", eager
    return "own", None


def segments(result):
    """[(pair, units, {system: (job A's part, job B's part)})] in the order of config.pairs: each job's solo
    time in `units` ("compiled", "eager", or "own": its solo time in the same system) over its shared time."""
    systems = result["systems"]
    out = []
    for names in result["config"]["pairs"]:
        pair = "+".join(names)
        units, unit_ms = _unit_ms(systems, names)
        parts = {}
        for s in pair_report.system_order(result):
            entry = pair_report.pair_entry(systems[s], pair)
            if entry is None or "jobs" not in entry:
                continue
            jobs = entry["jobs"]
            parts[s] = tuple(u / j["shared_ms"] for u, j in zip(unit_ms, jobs)) if unit_ms else tuple(
                j["rate"] for j in jobs)
        out.append((pair, units, parts))
    return out


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = segments(result)
    systems = [s for s in COLORS if any(s in parts for _, _, parts in rows)]
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows) * max(len(systems), 1) / 3), 4.2))
    for k, s in enumerate(systems):
        xs = [i + (k - (len(systems) - 1) / 2) * width for i in range(len(rows))]
        a = [parts.get(s, (0, 0))[0] for _, _, parts in rows]
        b = [parts.get(s, (0, 0))[1] for _, _, parts in rows]
        ax.bar(xs, a, width * 0.95, color=COLORS[s], label=s, edgecolor="white")
        ax.bar(xs, b, width * 0.95, bottom=a, color=COLORS[s], alpha=0.55, edgecolor="white")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([p if u == "compiled" else f"{p}\n({u} solo units)" for p, u, _ in rows], fontsize=8)
    unit = "compiled solo units" if all(u == "compiled" for _, u, _ in rows) else "solo units (see pair)"
    ax.set_ylabel(f"pair throughput, {unit}\n(lower part: job A, upper: job B)")
    meta = result.get("meta", {})
    ax.set_title(f"Two training jobs on one {meta.get('gpu', 'GPU')}", fontsize=10)
    ax.legend(fontsize=8, ncol=min(len(systems), 5), loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("result")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with open(args.result) as f:
        plot(json.load(f), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
