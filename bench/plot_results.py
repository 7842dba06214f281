#!/usr/bin/env python3
"""Plots the GPU benchmark suite's results as PNG files (matplotlib, Agg backend).

Inputs: JSON files written by bench/models/overhead.py, bench/pairs/pair_matrix.py and
bench/memory/planner_quality.py, or one combined file {"overhead": ..., "pairs": ..., "memory": ...} as
bench/run_gpu_suite.sh writes it (bench/results/<date>-<gpu>.json). Each file's kind is recognized from its
content. Outputs, in --out_dir:
  overhead.png  per model: PyTorch eager, CUDA-graph replay, Tandem wall-clock and the daemon's device time
                (ms/iter), and Tandem's time relative to graph replay;
  pairs.png     per system: heat maps of r (rows: pairs, columns: the two jobs) and the aggregate throughput,
                plus the priority mode (high-priority slowdown, best-effort throughput);
  memory.png    per model: planned ephemeral peak vs PyTorch's vs no-reuse (MiB, log scale), and jobs per GPU
                through tandemd vs PyTorch processes.

    python3 bench/plot_results.py bench/results/2026-11-30-h200.json --out_dir /tmp/out
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def kind_of(doc):
    if "systems" in doc:
        return "pairs"
    models = doc.get("models", {})
    if any("eager_ms" in m or "tandem_ms" in m or "eager_losses" in m for m in models.values()):
        return "overhead"
    if any("density" in m or "torch" in m for m in models.values()):
        return "memory"
    return None


def load(paths):
    docs = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if all(k in doc for k in ("overhead", "pairs", "memory")) or "suite" in doc:
            for k in ("overhead", "pairs", "memory"):
                if isinstance(doc.get(k), dict):
                    docs[k] = doc[k]
            continue
        kind = kind_of(doc)
        if kind is None:
            print(f"plot_results: {path}: not a result of the suite; skipped", file=sys.stderr)
            continue
        docs[kind] = doc
    return docs


def title(doc, what):
    meta = doc.get("meta", {})
    return f"{what} — {meta.get('gpu', '?')}, torch {meta.get('torch', '?')}, {meta.get('date', '')[:10]}"


def num(v):
    return v if isinstance(v, (int, float)) else np.nan


def plot_overhead(doc, path):
    models = [m for m, v in doc["models"].items() if "skipped" not in v]
    if not models:
        return False
    series = [("PyTorch eager", "eager_ms"), ("PyTorch graph replay", "graph_replay_ms"),
              ("Tandem wall", "tandem_ms"), ("Tandem device time", "device_ms")]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    x = np.arange(len(models))
    width = 0.8 / len(series)
    for k, (label, key) in enumerate(series):
        values = [num(doc["models"][m].get(key)) for m in models]
        bars = ax.bar(x + (k - (len(series) - 1) / 2) * width, values, width, label=label)
        for b, v in zip(bars, values):
            if not np.isnan(v):
                ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=6)
    ax.set_xticks(x)
    ax.set_xticklabels(models)
    ax.set_ylabel("ms per iteration")
    ax.legend(fontsize=8)
    depth = doc["models"][models[0]].get("tandem_depth", doc.get("config", {}).get("report_depth"))
    ax.set_title(f"one job alone (Tandem: {depth} iterations in flight)", fontsize=9)

    rel = [("Tandem wall / graph replay", "tandem_over_graph_replay"),
           ("Tandem device / graph replay", "device_over_graph_replay"),
           ("Tandem wall / eager", "tandem_over_eager")]
    width = 0.8 / len(rel)
    for k, (label, key) in enumerate(rel):
        values = [num(doc["models"][m].get("ratios", {}).get(key)) for m in models]
        ax2.bar(x + (k - (len(rel) - 1) / 2) * width, values, width, label=label)
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax2.set_xticks(x)
    ax2.set_xticklabels(models)
    ax2.set_ylabel("ratio (1 = same)")
    ax2.legend(fontsize=8)
    ax2.set_title("relative to PyTorch", fontsize=9)
    fig.suptitle(title(doc, "Tandem overhead"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_pairs(doc, path):
    systems = [s for s, v in doc["systems"].items() if v.get("pairs")]
    if not systems:
        return False
    pairs = ["+".join(p) for p in doc.get("config", {}).get("pairs", [])]
    if not pairs:
        pairs = sorted({p["pair"] for s in systems for p in doc["systems"][s]["pairs"]})
    with_priority = [s for s, v in doc["systems"].items() if isinstance(v.get("priority"), dict)
                     and "hp_slowdown" in v["priority"]]
    cols = len(systems) + 1
    fig, axes = plt.subplots(1, cols, figsize=(3.3 * cols + 1, 0.45 * len(pairs) + 2.6), squeeze=False)
    axes = axes[0]
    vmax = 3.0
    for ax, system in zip(axes, systems):
        grid = np.full((len(pairs), 3), np.nan)
        for i, name in enumerate(pairs):
            entry = next((p for p in doc["systems"][system]["pairs"] if p["pair"] == name), None)
            if entry and "jobs" in entry:
                grid[i, 0] = entry["jobs"][0]["r"]
                grid[i, 1] = entry["jobs"][1]["r"]
                grid[i, 2] = entry["aggregate"]
        ax.imshow(np.clip(grid[:, :2], 0, vmax), cmap="RdYlGn_r", vmin=0.5, vmax=vmax, aspect="auto",
                  extent=(-0.5, 1.5, len(pairs) - 0.5, -0.5))
        ax.imshow(np.clip(grid[:, 2:], 0, 2), cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto",
                  extent=(1.5, 2.5, len(pairs) - 0.5, -0.5))
        for i in range(len(pairs)):
            for j in range(3):
                v = grid[i, j]
                ax.text(j, i, "-" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xlim(-0.5, 2.5)
        ax.set_xticks([0, 1, 2])
        ax.set_xticklabels(["r(A)", "r(B)", "aggregate"], fontsize=8)
        ax.set_yticks(range(len(pairs)))
        ax.set_yticklabels(pairs if ax is axes[0] else [""] * len(pairs), fontsize=8)
        extra = doc["systems"][system].get("policy")
        ax.set_title(system.replace("_", "-") + (f" ({extra})" if extra else ""), fontsize=9)
    ax = axes[-1]
    if with_priority:
        x = np.arange(len(with_priority))
        slow = [doc["systems"][s]["priority"]["hp_slowdown"] for s in with_priority]
        thr = [doc["systems"][s]["priority"]["be_throughput"] for s in with_priority]
        ax.bar(x - 0.2, slow, 0.4, label="high-priority slowdown")
        ax.bar(x + 0.2, thr, 0.4, label="best-effort throughput / solo")
        for xi, (a, b) in enumerate(zip(slow, thr)):
            ax.annotate(f"{a:.2f}", (xi - 0.2, a), ha="center", va="bottom", fontsize=7)
            ax.annotate(f"{b:.2f}", (xi + 0.2, b), ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylim(0, max(slow + thr + [1.0]) * 1.35)
        ax.set_xticks(x)
        ax.set_xticklabels([s.replace("_", "-") for s in with_priority], fontsize=8)
        p = doc["systems"][with_priority[0]]["priority"]
        ax.set_title(f"priority: {p['high']} (high) + {p['best_effort']} (best effort)", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.axis("off")
    fig.suptitle(title(doc, "Two jobs on one GPU: r = shared/solo time, aggregate = sum solo/shared"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_memory(doc, path):
    models = list(doc["models"])
    if not models:
        return False
    mib = 2.0 ** 20
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    series = [("Tandem planned peak", lambda m: m.get("tandem", {}).get("ephemeral_peak_bytes")),
              ("PyTorch step peak - start", lambda m: m.get("torch", {}).get("ephemeral_peak_bytes")),
              ("no reuse (sum of sizes)", lambda m: m.get("tandem", {}).get("no_reuse_bytes")),
              ("persistent (Tandem)", lambda m: m.get("tandem", {}).get("persistent_bytes"))]
    x = np.arange(len(models))
    width = 0.8 / len(series)
    for k, (label, get) in enumerate(series):
        values = [num(get(doc["models"][m])) / mib for m in models]
        bars = ax.bar(x + (k - (len(series) - 1) / 2) * width, values, width, label=label)
        for b, v in zip(bars, values):
            if not np.isnan(v) and v > 0:
                ax.annotate(f"{v:.0f}" if v >= 10 else f"{v:.2f}", (b.get_x() + b.get_width() / 2, v),
                            ha="center", va="bottom", fontsize=6)
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(models)
    ax.set_ylabel("MiB")
    ax.legend(fontsize=8)
    ax.set_title("memory of one training step", fontsize=9)

    tandem = [num(doc["models"][m].get("density", {}).get("tandem_count")) for m in models]
    procs = [num(doc["models"][m].get("torch", {}).get("processes_fit")) for m in models]
    b1 = ax2.bar(x - 0.2, tandem, 0.4, label="jobs in one tandemd")
    b2 = ax2.bar(x + 0.2, procs, 0.4, label="PyTorch processes (estimate)")
    for m, b, v in zip(models, b1, tandem):
        if not np.isnan(v):
            star = "*" if doc["models"][m].get("density", {}).get("extrapolated") else ""
            ax2.annotate(f"{v:.0f}{star}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    for b, v in zip(b2, procs):
        if not np.isnan(v):
            ax2.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax2.set_xticks(x)
    ax2.set_xticklabels(models)
    ax2.set_ylabel("copies of the job on one GPU")
    ax2.legend(fontsize=8)
    ax2.set_title("density (* = completed from the daemon's free memory)", fontsize=9)
    fig.suptitle(title(doc, "Memory planning"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", help="result JSON files")
    p.add_argument("--out_dir", default=".")
    args = p.parse_args()
    docs = load(args.inputs)
    os.makedirs(args.out_dir, exist_ok=True)
    plotters = {"overhead": plot_overhead, "pairs": plot_pairs, "memory": plot_memory}
    status = 0
    for kind, doc in docs.items():
        path = os.path.join(args.out_dir, f"{kind}.png")
        try:
            if plotters[kind](doc, path):
                print(f"wrote {path}")
            else:
                print(f"plot_results: nothing to plot for {kind}")
        except Exception as e:  # one broken plot must not cost the others
            print(f"plot_results: {kind}: {type(e).__name__}: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
