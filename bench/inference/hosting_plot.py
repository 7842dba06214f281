#!/usr/bin/env python3
"""Plots a hosting.py result (matplotlib, Agg backend): per mode, the worst model's p99 latency against the
number of hosted models, with the target line (left; a probe with requests left unsent is drawn at the top
edge with an x; filled markers passed, open ones failed; a probe repeated because workers were starting
meanwhile is drawn once, as repeated), and the requests served per second against those offered (right). A
count that is only a lower bound of the mode's capacity is labelled ">=".

    python3 bench/inference/hosting_plot.py /tmp/out/hosting.json --out /tmp/out/hosting.png
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"tandem": "tab:green", "server": "tab:purple", "timeslice": "tab:red", "mps": "tab:blue"}


def plot(result, path):
    cfg, meta = result["config"], result.get("meta", {})
    target = cfg["p99_target_ms"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    probed = [p for r in result["modes"].values() for p in r.get("probes", [])
              if "n" in p and "error" not in p and not p.get("discarded")]
    finite = [p["p99_ms_max_bounded"] for p in probed if p.get("p99_ms_max_bounded") is not None]
    top = max(finite + [target]) * 3
    for mode, r in result["modes"].items():
        probes = sorted((p for p in r.get("probes", []) if "error" not in p and not p.get("discarded")),
                        key=lambda p: p["n"])
        if not probes:
            continue
        color = COLORS.get(mode, "gray")
        xs = [p["n"] for p in probes]
        ys = [p["p99_ms_max"] if p["p99_ms_max"] is not None else top for p in probes]
        bound = ">=" if r.get("lower_bound") else ""
        label = f"{mode}: hosts {bound}{r.get('hosted')}" + (f" ({r['stop_reason']})" if r.get("stop_reason") and
                                                             r["stop_reason"] != "failed" else "")
        ax.plot(xs, ys, "-", color=color, label=label)
        for p, y in zip(probes, ys):
            marker = "x" if p["p99_ms_max"] is None else "o"
            ax.plot(p["n"], y, marker, color=color, markerfacecolor=color if p["pass"] else "none", markersize=7)
        ax2.plot([p["offered_rps"] for p in probes], [p["served_rps"] for p in probes], "o-", color=color,
                 label=mode)
    ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"p99 target {target:g} ms")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("models hosted (N)")
    ax.set_ylabel("worst model's p99 latency (ms)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    lim = max([p["offered_rps"] for p in probed] + [1])
    ax2.plot([0, lim], [0, lim], ":", color="gray", label="served = offered")
    ax2.set_xlabel("offered requests/s (all models)")
    ax2.set_ylabel("served requests/s in the timed window")
    ax2.legend(fontsize=8)
    ax2.grid(True, alpha=0.3)
    s = result.get("summary", {})
    marks = {"lower_bound": ">=", "upper_bound": "<=", "unknown": "~"}
    ratios = ", ".join(f"{k.replace('tandem_over_', 'tandem/')} "
                       f"{marks.get(s.get('ratio_bounds', {}).get(k), '')}{s[k]}"
                       for k in ("tandem_over_noshare", "tandem_over_server", "tandem_over_mps",
                                 "tandem_over_timeslice") if k in s)
    fig.suptitle(f"Inference hosting on {meta.get('gpu', '?')}: {', '.join(cfg['kinds'])}, batch "
                 f"{min(cfg['batches'])}-{max(cfg['batches'])}, {cfg['rate_per_model']:g} req/s per model"
                 + (f"\n{ratios}" if ratios else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("result", help="JSON written by hosting.py")
    p.add_argument("--out", required=True, help="PNG to write")
    args = p.parse_args()
    with open(args.result) as f:
        plot(json.load(f), args.out)


if __name__ == "__main__":
    main()
