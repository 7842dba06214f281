"""The model zoo on the GPU: one row per zoo model (zoo/catalog.py) at its full size.

    python3 bench/models/zoo_gpu.py [--models a,b | --set ci|all] [--budget 600] [--steps 20] [--out zoo.json]
                                    [--reverse] [--skip_done earlier.json ...]

Per model: whether it registers with a CUDA tandemd, capture and registration seconds, ms/iter for Tandem (2
iterations in flight), PyTorch eager and torch.compile(mode="reduce-overhead") (the model compiled; loss, backward
and the SGD step as a user writes them) with compile's warm-up seconds, memory (Tandem's persistent bytes and
planned ephemeral peak; PyTorch's peak allocated bytes per mode), and the largest relative loss difference
between Tandem and eager over `--steps` steps from the same weights and batches. --daemon_flags passes flags to
tandemd (e.g. --codegen=false for the interpreting kernels); --tandem_only skips the PyTorch baselines. Dropout
and stochastic depth are off (p = 0), so that the losses can agree step for step. Models are taken in order until
--budget seconds are spent; the rest are listed as not reached. --reverse takes them from the end (a second call
that starts from the end needs no word from the first); --skip_done leaves out the models that already have a
measured row in the given result files. Writes JSON (--out) and prints a markdown table.
"""

import argparse
import copy
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_common as bc  # noqa: E402  (puts the adaptor on sys.path)

import torch  # noqa: E402

import tandem.torch  # noqa: E402

sys.path.insert(0, bc.REPO_ROOT)
from zoo import catalog  # noqa: E402

import zoo_table  # noqa: E402  (bench/models, on sys.path above)


def measure(entry, args):
    row = {"model": entry.name, "family": entry.family}
    torch.manual_seed(0)
    model, loss_fn, make_batch = entry.builder("full")
    catalog._without_randomness(model)
    g = torch.Generator().manual_seed(1)
    batches = [make_batch(g) for _ in range(min(args.steps, 4))]
    reference = copy.deepcopy(model).cuda()
    optimizer = bc.sgd(model.parameters())

    start = time.perf_counter()
    try:
        capture, lowered = tandem.torch.capture_training_job(model, loss_fn, optimizer, batches[0])
    except Exception as e:  # a model that does not capture still gets its row
        row["registers"] = False
        row["error"] = f"capture: {type(e).__name__}: {e}"[:500]
        return row
    row["capture_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    try:
        job = tandem.torch.TrainingJob(capture, lowered, args.endpoint, f"zoo-{entry.name}", {"device": "cuda:0"})
    except Exception as e:
        row["registers"] = False
        row["error"] = f"register: {type(e).__name__}: {e}"[:500]
        return row
    row["register_s"] = round(time.perf_counter() - start, 2)
    row["registers"] = True
    response = job.registration or {}
    row["tandem_persistent_mib"] = round(int(response.get("persistent_bytes", 0)) / 2**20, 1)
    row["tandem_ephemeral_mib"] = round(int(response.get("ephemeral_peak_bytes", 0)) / 2**20, 1)
    with job:
        losses = [job.step(*batches[k % len(batches)]) for k in range(args.steps)]
        pending = []

        def tandem_iteration(k=[0]):
            pending.append(job.step_async(*batches[k[0] % len(batches)]))
            k[0] += 1
            if len(pending) >= 2:
                pending.pop(0).result()

        row["tandem_ms"] = round(bc.cuda_timed(tandem_iteration, args.iters) * 1e3, 3)
        for h in pending:
            h.result()
    if args.tandem_only:
        return row

    gpu_batches = [tuple(t.cuda() for t in b) for b in batches]
    ref_optimizer = bc.sgd(reference.parameters())
    ref_losses = []
    for k in range(args.steps):
        ref_losses.append(float(bc.eager_step(reference, loss_fn, ref_optimizer, gpu_batches[k % len(batches)])()))
    row["max_rel_loss_diff"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses))
    row["first_loss"] = [round(losses[0], 6), round(ref_losses[0], 6)]
    torch.cuda.reset_peak_memory_stats()
    eager = bc.eager_step(reference, loss_fn, ref_optimizer, gpu_batches[0])
    row["eager_ms"] = round(bc.cuda_timed(eager, args.iters) * 1e3, 3)
    row["eager_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    for mode in [] if args.no_compile else [m for m in args.compile_modes.split(",") if m]:
        # Keys: compile_* for reduce-overhead (the goal's comparison), compile_<mode>_* for the others.
        key = "compile" if mode == "reduce-overhead" else f"compile_{mode.replace('-', '_')}"
        try:
            torch._dynamo.reset()
            torch.cuda.reset_peak_memory_stats()
            compiled = torch.compile(reference, mode=mode)
            t0 = time.perf_counter()
            bc.eager_step(compiled, loss_fn, ref_optimizer, gpu_batches[0])()
            torch.cuda.synchronize()
            row[f"{key}_s"] = round(time.perf_counter() - t0, 1)
            step = bc.eager_step(compiled, loss_fn, ref_optimizer, gpu_batches[0])
            row[f"{key}_ms"] = round(bc.cuda_timed(step, args.iters) * 1e3, 3)
            row[f"{key}_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        except Exception as e:
            row[f"{key}_error"] = f"{type(e).__name__}: {e}"[:300]
    if row.get("eager_ms"):
        row["tandem_over_eager"] = round(row["tandem_ms"] / row["eager_ms"], 3)
    if row.get("compile_ms"):
        row["tandem_over_compile"] = round(row["tandem_ms"] / row["compile_ms"], 3)
    del reference, ref_optimizer, gpu_batches
    torch.cuda.empty_cache()
    return row


def measured_models(paths):
    """The models that have a row with a verdict (registered or refused, not 'not reached') in these files."""
    done = set()
    for path in paths:
        with open(path) as f:
            done.update(r["model"] for r in json.load(f)["rows"] if r.get("registers") is not None)
    return done


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated zoo names")
    parser.add_argument("--set", default="ci", choices=("ci", "all"))
    parser.add_argument("--budget", type=float, default=600, help="seconds for the whole run")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--no_compile", action="store_true")
    parser.add_argument("--compile_modes", default="reduce-overhead",
                        help="torch.compile modes to time, comma-separated (reduce-overhead, default, ...)")
    parser.add_argument("--log_dir", default=None, help="where tandemd's log goes (default: a temporary folder)")
    parser.add_argument("--tandemd", default=None)
    parser.add_argument("--daemon_flags", default="", help="extra tandemd flags, space-separated")
    parser.add_argument("--tandem_only", action="store_true", help="skip eager and torch.compile")
    parser.add_argument("--out", default="")
    parser.add_argument("--reverse", action="store_true", help="take the models from the end of the list")
    parser.add_argument("--skip_done", nargs="*", default=[], help="result files whose measured models to skip")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or (
        list(catalog.CI_NAMES) if args.set == "ci" else [e.name for e in catalog.ENTRIES])
    done = measured_models(args.skip_done)
    names = [n for n in (reversed(names) if args.reverse else names) if n not in done]
    deadline = time.monotonic() + args.budget
    rows = []
    meta = bc.metadata("cuda")
    flags = bc.daemon_flags_for_large_models() + bc.daemon_flags_beside_pytorch() + args.daemon_flags.split()
    with bc.Daemon(bc.find_tandemd(args.tandemd), "cuda", extra_flags=flags, log_dir=args.log_dir) as d:
        args.endpoint = d.endpoint
        for name in names:
            if time.monotonic() > deadline:
                rows.append({"model": name, "registers": None, "skipped": "not reached within the budget"})
                continue
            t0 = time.perf_counter()
            try:
                row = measure(catalog.entry(name), args)
            except Exception as e:
                row = {"model": name, "registers": None, "error": f"{type(e).__name__}: {e}"[:500],
                       "trace": traceback.format_exc()[-1500:]}
                torch.cuda.empty_cache()
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            bc.log(json.dumps(row))
            if args.out:  # after every row: a run cut short keeps what it measured
                bc.write_json(args.out, {"meta": meta, "daemon_flags": flags, "rows": rows})
            if not d.alive():
                bc.log("tandemd died: " + d.log_tail())
                break
    if args.out:
        bc.write_json(args.out, {"meta": meta, "daemon_flags": flags, "rows": rows})
    measured = {r["model"]: r for r in rows if not r.get("skipped")}
    print(zoo_table.table(measured, names))


if __name__ == "__main__":
    main()
