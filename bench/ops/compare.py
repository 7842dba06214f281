#!/usr/bin/env python3
"""Puts op_bench's rows (Tandem's CUDA kernels) beside torch_ops.py's (PyTorch's
own ops, same GPU, same run) and writes one results file in the style of
bench/results/.

  python3 bench/ops/compare.py TANDEM.json TORCH.json --out-dir /tmp/out    # <date>-<gpu>-ops.json and .png
  python3 bench/ops/compare.py TANDEM.json TORCH.json --out ops.json --png ops.png

Per row: Tandem's ms (CUDA graph replay of the one-op graph, and op by op),
PyTorch's ms (replay of a CUDA graph around the op, and eager), the ratio
torch / Tandem (above 1: Tandem is faster; the graph-replay times are the
like-for-like pair), and the rates: TFLOP/s for matrix products and
convolutions, GB/s (bytes read + written) and its fraction of the
device-to-device copy bandwidth each side measured, for everything else.
Rows whose FLOP or byte counts differ between the two files, or that only one
file has, are flagged (the row lists of op_rows.cc and torch_ops.py drifted).
"""
import argparse
import json
import math
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def ratio(num, den):
    if not num or not den:
        return None
    return num / den


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)


def rate(kind, flops, nbytes, ms):
    if not ms:
        return None
    return flops / (ms * 1e9) if kind == "compute" else nbytes / (ms * 1e6)


def geomean(values):
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def merge_row(t, p, tandem_copy_gbs, torch_copy_gbs):
    base = t or p
    kind = base["kind"]
    row = {"name": base["name"], "op": base["op"], "kind": kind, "shapes": base.get("shapes"),
           "flops": base.get("flops"), "bytes": base.get("bytes"), "notes": []}
    drift = []
    if t is None:
        drift.append("no Tandem row (op_bench did not run it)")
    if p is None:
        drift.append("no PyTorch row (torch_ops.py did not run it)")
    if t is not None and p is not None and not t.get("error") and not p.get("error"):
        if not close(t.get("flops"), p.get("flops")):
            drift.append(f"FLOP counts differ: Tandem {t.get('flops')} vs PyTorch {p.get('flops')}")
        if not close(t.get("bytes"), p.get("bytes")):
            drift.append(f"byte counts differ: Tandem {t.get('bytes')} vs PyTorch {p.get('bytes')}")
    if drift:
        row["mismatch"] = True
        row["notes"] += drift
    t = t or {}
    p = p or {}
    for side, r in (("Tandem", t), ("PyTorch", p)):
        if r.get("error"):
            row["notes"].append(f"{side} failed: {r['error']}")
    if p.get("graph_error"):
        row["notes"].append(f"PyTorch graph capture failed: {p['graph_error']}")
    if t and t.get("replayed") is False:
        row["notes"].append("Tandem's graph capture failed: its times are op by op")

    row["tandem_ms"] = t.get("ms")
    row["tandem_eager_ms"] = t.get("eager_ms")
    row["torch_graph_ms"] = p.get("graph_ms")
    row["torch_eager_ms"] = p.get("eager_ms")
    row["torch_ms"] = row["torch_graph_ms"] or row["torch_eager_ms"]
    row["ratio"] = ratio(row["torch_ms"], row["tandem_ms"])
    row["ratio_eager"] = ratio(row["torch_eager_ms"], row["tandem_eager_ms"])
    flops, nbytes = row["flops"] or 0.0, row["bytes"] or 0.0
    unit = "tflops" if kind == "compute" else "gbs"
    row[f"tandem_{unit}"] = rate(kind, flops, nbytes, row["tandem_ms"])
    row[f"torch_{unit}"] = rate(kind, flops, nbytes, row["torch_ms"])
    if kind == "memory":
        row["tandem_copy_fraction"] = ratio(row["tandem_gbs"], tandem_copy_gbs)
        row["torch_copy_fraction"] = ratio(row["torch_gbs"], torch_copy_gbs)
    alt = p.get("alt")
    if alt:
        alt_ms = alt.get("graph_ms") or alt.get("eager_ms")
        row["torch_alt"] = {"op": alt.get("op"), "ms": alt_ms, "eager_ms": alt.get("eager_ms"),
                            "graph_ms": alt.get("graph_ms"), "ratio": ratio(alt_ms, row["tandem_ms"])}
        if alt.get("error"):
            row["torch_alt"]["error"] = alt["error"]
    if not row["notes"]:
        del row["notes"]
    return row


def gpu_slug(tandem_meta, torch_meta):
    name = (torch_meta or {}).get("gpu") or ((tandem_meta or {}).get("gpu") or "unknown").split(",")[0]
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return re.sub(r"^nvidia-", "", slug) or "unknown"


def merge(tandem, torch_result):
    tandem_rows = {r["name"]: r for r in tandem.get("rows", [])}
    torch_rows = {r["name"]: r for r in torch_result.get("rows", [])}
    names = list(tandem_rows) + [n for n in torch_rows if n not in tandem_rows]
    tandem_copy = (tandem.get("copy") or {}).get("gbs")
    torch_copy = (torch_result.get("copy") or {}).get("gbs")
    rows = [merge_row(tandem_rows.get(n), torch_rows.get(n), tandem_copy, torch_copy) for n in names]
    tm, pm = tandem.get("meta", {}), torch_result.get("meta", {})
    summary = {}
    for kind in ("compute", "memory"):
        ratios = [r["ratio"] for r in rows if r["kind"] == kind and r.get("ratio")]
        summary[kind] = {"rows": len(ratios), "geomean_ratio": geomean(ratios),
                         "tandem_slower_rows": sorted((r["name"] for r in rows if r["kind"] == kind and r.get("ratio")
                                                       and r["ratio"] < 0.9), key=str)}
    mismatched = [r["name"] for r in rows if r.get("mismatch")]
    if tm.get("allow_tf32") != pm.get("allow_tf32"):
        summary["warning"] = (f"TF32 settings differ: op_bench allow_tf32={tm.get('allow_tf32')}, "
                              f"torch_ops allow_tf32={pm.get('allow_tf32')}")
    return {
        "date": tm.get("date") or pm.get("date"),
        "gpu": pm.get("gpu") or tm.get("gpu"),
        "git_commit": tm.get("git_commit") or pm.get("git_commit"),
        "torch": pm.get("torch"),
        "allow_tf32": {"tandem": tm.get("allow_tf32"), "torch": pm.get("allow_tf32")},
        "copy": {"bytes": (tandem.get("copy") or {}).get("bytes"), "tandem_gbs": tandem_copy, "torch_gbs": torch_copy,
                 "tandem_ms": (tandem.get("copy") or {}).get("ms"),
                 "torch_ms": (torch_result.get("copy") or {}).get("graph_ms")
                 or (torch_result.get("copy") or {}).get("eager_ms")},
        "summary": summary,
        "mismatched_rows": mismatched,
        "rows": rows,
        "tandem_meta": tm,
        "torch_meta": pm,
        "commands": [c for c in (tm.get("command"), pm.get("command")) if c],
    }


def fmt(x, spec):
    """x formatted by spec, or "-" padded to spec's width when x is missing."""
    if x is None:
        width = re.match(r"\d*", spec).group()
        return "-".rjust(int(width or 0))
    return format(x, spec)


def with_unit(x, spec, unit):
    return "-" if x is None else format(x, spec) + unit


def print_table(merged, out=sys.stdout):
    c = merged["copy"]
    print(f"{merged.get('gpu')}: copy bandwidth (read + written) Tandem {fmt(c['tandem_gbs'], '.0f')} GB/s, "
          f"PyTorch {fmt(c['torch_gbs'], '.0f')} GB/s", file=out)
    head = (f"{'row':28s} {'tandem ms':>10s} {'torch ms':>10s} {'eager ms':>10s} {'torch/tandem':>12s} "
            f"{'tandem':>10s} {'torch':>10s} {'%copy T/P':>10s}  shapes")
    print(head, file=out)
    for r in merged["rows"]:
        if r["kind"] == "compute":
            t_rate = with_unit(r.get("tandem_tflops"), ".1f", "TF")
            p_rate = with_unit(r.get("torch_tflops"), ".1f", "TF")
            frac = ""
        else:
            t_rate, p_rate = with_unit(r.get("tandem_gbs"), ".0f", "GB"), with_unit(r.get("torch_gbs"), ".0f", "GB")
            tf, pf = r.get("tandem_copy_fraction"), r.get("torch_copy_fraction")
            frac = f"{fmt(tf and 100 * tf, '.0f')}/{fmt(pf and 100 * pf, '.0f')}"
        print(f"{r['name']:28s} {fmt(r['tandem_ms'], '10.4f')} {fmt(r['torch_ms'], '10.4f')} "
              f"{fmt(r['torch_eager_ms'], '10.4f')} {fmt(r['ratio'], '12.2f')} {t_rate:>10s} {p_rate:>10s} "
              f"{frac:>10s}  {r.get('shapes') or ''}", file=out)
        for note in r.get("notes", []):
            print(f"{'':28s} ! {note}", file=out)
        alt = r.get("torch_alt")
        if alt and alt.get("ms"):
            print(f"{'':28s} PyTorch via {alt['op']}: {alt['ms']:.4f} ms (torch/tandem {fmt(alt['ratio'], '.2f')})",
                  file=out)
    for kind, s in merged["summary"].items():
        if kind == "warning":
            print(f"WARNING: {s}", file=out)
            continue
        print(f"{kind}: {s['rows']} rows, geometric mean torch/tandem {fmt(s['geomean_ratio'], '.2f')}; "
              f"Tandem more than 10% slower on {len(s['tandem_slower_rows'])}: {', '.join(s['tandem_slower_rows'])}",
              file=out)
    if merged["mismatched_rows"]:
        print(f"WARNING: rows that differ between the two files: {', '.join(merged['mismatched_rows'])}", file=out)


def plot(merged, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in merged["rows"] if r.get("ratio")]
    if not rows:
        print("compare: no row has both times; no plot")
        return False
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.22 * len(rows)))
    y = list(range(len(rows)))[::-1]
    colors = ["tab:blue" if r["kind"] == "compute" else "tab:orange" for r in rows]
    ax.barh(y, [r["ratio"] for r in rows], color=colors)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    lo, hi = min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8) if lo / 2 <= t <= hi * 2]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_yticks(y)
    ax.set_yticklabels([r["name"] for r in rows], fontsize=7)
    ax.set_xlabel("PyTorch ms / Tandem ms (CUDA graph replay; > 1: Tandem faster)")
    ax.set_title(f"Tandem CUDA ops vs PyTorch {merged.get('torch') or ''} on {merged.get('gpu')}\n"
                 "blue: matrix products and convolutions; orange: memory-bound ops", fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tandem_json", help="op_bench --out")
    p.add_argument("torch_json", help="torch_ops.py --out")
    p.add_argument("--out", default="", help="merged JSON path")
    p.add_argument("--png", default="", help="bar chart of the ratios (needs matplotlib)")
    p.add_argument("--out-dir", default="", help="write <date>-<gpu>-ops.json and <date>-<gpu>-ops.png here")
    args = p.parse_args(argv)
    merged = merge(load(args.tandem_json), load(args.torch_json))
    print_table(merged)
    out, png = args.out, args.png
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        stem = f"{(merged.get('date') or '')[:10]}-{gpu_slug(merged['tandem_meta'], merged['torch_meta'])}-ops"
        out = out or os.path.join(args.out_dir, stem + ".json")
        png = png or os.path.join(args.out_dir, stem + ".png")
    if out:
        with open(out, "w") as f:
            json.dump(merged, f, indent=1)
            f.write("\n")
        print(f"compare: wrote {out} (copy it to bench/results/)")
    if png:
        try:
            if plot(merged, png):
                print(f"compare: wrote {png}")
        except ImportError as e:
            print(f"compare: no plot ({e})")
    return 1 if merged["mismatched_rows"] else 0


if __name__ == "__main__":
    sys.exit(main())
