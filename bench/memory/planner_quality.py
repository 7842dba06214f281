#!/usr/bin/env python3
"""How good Tandem's static memory plan is, and how many jobs one GPU holds through tandemd vs as processes.

Per model (the five of GPU.md; --small: the tiny versions):

Planner quality. Three numbers for one training step at the same batch:
  planned   the daemon's RegisterJobResponse: ephemeral_peak_bytes (the planned arena: the batch, activations,
            gradients and temporaries of one iteration) and persistent_bytes (parameters, buffers, momentum);
  pytorch   torch.cuda.max_memory_allocated() during one step, minus what is allocated when the step starts
            (parameters, buffers, momentum and cuBLAS's workspace, with the gradients freed by
            zero_grad(set_to_none=True) and the batch copied to the GPU inside the step). What is left is what
            the step itself allocates: the batch, activations, gradients, temporaries and cuDNN workspaces,
            i.e. Tandem's ephemeral arena plus cuDNN workspaces (which tandemd keeps in its reserve, outside the
            arena). The persistent bytes are compared separately (computed from the tensors);
  no-reuse  the sum of all feed and intermediate tensor sizes (256-byte aligned), computed from the lowered
            graph the adaptor sends: the arena a plan without any reuse would need.
  Measured in a separate process per model, so that each sees a fresh CUDA context.

Density. tandemd (started here with its default reserve, alone on the GPU) registers copies of the model's
training job in one session until it answers RESOURCE_EXHAUSTED (no iterations run). Each copy uploads the
model's weights, so when --density_s runs out first, the count is completed arithmetically from the daemon's
stats: free bytes now / the bytes the last copy took (every copy after the lanes are open costs exactly its
persistent bytes), marked "extrapolated". PyTorch processes are not launched: one process's footprint is
measured (CUDA context + libraries + the caching allocator's peak reservation, from torch.cuda.mem_get_info
after training against nvidia-smi's used memory before the process started), and the count is
floor(free GPU memory / footprint).

    python3 bench/memory/planner_quality.py --out /tmp/out/memory.json                     # on the GPU machine
    python3 bench/memory/planner_quality.py --small --device cpu --out /tmp/memory.json    # smoke test
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))

import bench_common as bc  # noqa: E402
import torch  # noqa: E402


# ---- PyTorch, in a child process per model ----

def torch_probe(name, small):
    """One model's PyTorch memory on a fresh CUDA context; returns a dict (printed as JSON by the child)."""
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info()
    bc.like_for_like_numerics()
    model, loss_fn, make_batch = bc.build_model(name, small)
    model = model.cuda()
    opt = bc.sgd(model.parameters())
    host = [t.pin_memory() for t in bc.make_batches(make_batch, 1)[0]]

    def step():
        batch = [t.to("cuda", non_blocking=True) for t in host]  # the batch is part of the step, as in Tandem
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(*batch[:-1]), batch[-1])
        loss.backward()
        opt.step()
        return loss

    for _ in range(2):  # momentum buffers, cuBLAS workspace, cuDNN handles
        step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    params = sum(bc.tensor_bytes(p) for p in model.parameters())
    buffers = sum(bc.tensor_bytes(b) for b in model.buffers())
    state = sum(bc.tensor_bytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))
    grads = sum(bc.tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    free1, _ = torch.cuda.mem_get_info()
    return {
        "gpu": torch.cuda.get_device_name(), "loss": float(loss), "total_bytes": total,
        "free_after_init_bytes": free0, "free_after_training_bytes": free1,
        "base_allocated_bytes": base, "peak_allocated_bytes": peak, "ephemeral_peak_bytes": peak - base,
        "persistent_bytes": params + buffers + state, "parameter_bytes": params, "buffer_bytes": buffers,
        "optimizer_state_bytes": state, "gradient_bytes": grads,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(), "reserved_bytes": torch.cuda.memory_reserved(),
    }


def run_torch_probe(name, args):
    """The child's result, with the process's footprint against nvidia-smi's used memory before it started."""
    smi = bc.nvidia_smi(["memory.used", "memory.total"])
    used_before = int(smi["memory.used"]) << 20 if smi else None
    cmd = [sys.executable, os.path.abspath(__file__), "--torch_probe", name]
    if args.small:
        cmd.append("--small")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.probe_timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the PyTorch probe of {name} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    r = json.loads(lines[-1])
    r["used_before_bytes"] = used_before
    if used_before is not None:
        total = r["total_bytes"]
        r["context_bytes"] = total - r["free_after_init_bytes"] - used_before
        r["footprint_bytes"] = total - r["free_after_training_bytes"] - used_before
        r["libraries_bytes"] = r["footprint_bytes"] - r["context_bytes"] - r["reserved_bytes"]
        r["processes_fit"] = (total - used_before) // r["footprint_bytes"] if r["footprint_bytes"] > 0 else None
    return r


# ---- Tandem ----

def capture(name, args):
    """(graph, persistent [(name, tensor)], capture seconds, whether it came from the cache)."""
    cached = bc.load_capture(args.capture_cache, name, args.small)
    if cached is not None:
        return (*cached, True)
    import tandem.torch
    model, loss_fn, make_batch = bc.build_model(name, args.small)
    batch = bc.make_batches(make_batch, 1)[0]
    start = time.perf_counter()
    _, lowered = tandem.torch.capture_training_job(model, loss_fn, bc.sgd(model.parameters()), batch)
    return lowered.graph, lowered.persistent, time.perf_counter() - start, False


def device_stats(client):
    devices = client.stats().get("devices", [])
    return devices[0] if devices else {}


def wait_until_empty(endpoint, timeout=30.0):
    import tandem
    deadline = time.monotonic() + timeout
    with tandem.Client(endpoint=endpoint, name="planner-quality-stats") as c:
        while time.monotonic() < deadline:
            d = device_stats(c)
            if int(d.get("persistent_bytes", 0)) == 0 and int(d.get("lane_bytes", 0)) == 0:
                return True
            time.sleep(0.1)
    return False


def measure_tandem(name, args, endpoint, device, out):
    import tandem
    from tandem import errors
    from tandem.torch import dtypes
    graph, initial, capture_s, cached = capture(name, args)
    no_reuse, unsized = bc.graph_no_reuse_bytes(graph, initial)
    persistent = [dtypes.host_tensor(n, t) for n, t in initial]
    request = {"name": f"{name}-memory", "graph": graph, "hints": {"device": device}}
    t = out["tandem"] = {"capture_s": None if capture_s is None else round(capture_s, 3), "capture_cached": cached,
                         "nodes": len(graph["nodes"]),
                         "no_reuse_bytes": no_reuse, "no_reuse_unsized_outputs": unsized,
                         "persistent_tensor_bytes": sum(bc.tensor_bytes(v) for _, v in initial),
                         "persistent_aligned_bytes": sum(bc.aligned(bc.tensor_bytes(v)) for _, v in initial)}
    density = out["density"] = {}
    client = tandem.Client(endpoint=endpoint, name=f"{name}-density")
    try:
        before = device_stats(client)
        start = time.perf_counter()
        _, response = client.register_job(request, persistent)
        t["register_s"] = round(time.perf_counter() - start, 3)
        t["persistent_bytes"] = int(response.get("persistent_bytes", 0))
        t["ephemeral_peak_bytes"] = int(response.get("ephemeral_peak_bytes", 0))
        t["device"] = response.get("device")
        bc.log(f"  [{name}] planned: persistent {t['persistent_bytes'] / 2**20:.1f} MiB, ephemeral peak "
               f"{t['ephemeral_peak_bytes'] / 2**20:.1f} MiB (no reuse {no_reuse / 2**20:.1f} MiB); "
               f"{'capture reused' if cached else f'captured in {capture_s:.2f} s'}, registered in "
               f"{t['register_s']:.2f} s")
        # Density: more copies until refused, or until the time budget is spent.
        copies, last_cost, exhausted, refusal = 1, None, False, None
        stats = device_stats(client)
        density_start = time.perf_counter()
        while copies < args.max_copies and time.perf_counter() - density_start < args.density_s:
            try:
                client.register_job(request, persistent)
            except errors.TandemError as e:
                if e.code == errors.RESOURCE_EXHAUSTED:
                    exhausted, refusal = True, str(e)
                    break
                raise
            copies += 1
            now = device_stats(client)
            if now.get("lanes") == stats.get("lanes"):
                last_cost = int(stats.get("free_bytes", 0)) - int(now.get("free_bytes", 0))
            stats = now
        density.update({
            "tandem_copies": copies, "exhausted": exhausted, "seconds": round(time.perf_counter() - start, 2),
            "capacity_bytes": int(before.get("capacity_bytes", 0)),
            "reserve_bytes": int(before.get("reserve_bytes", 0)),
            "free_bytes_at_start": int(before.get("free_bytes", 0)),
            "free_bytes_at_end": int(stats.get("free_bytes", 0)),
            "lanes": stats.get("lanes"), "per_copy_bytes": last_cost,
        })
        if exhausted:
            density["tandem_count"] = copies
            density["refusal"] = refusal[:600]
        else:
            per_copy = last_cost or t["persistent_aligned_bytes"]
            density["tandem_count"] = copies + int(stats.get("free_bytes", 0)) // max(per_copy, 1)
            density["extrapolated"] = True
        bc.log(f"  [{name}] tandemd admitted {copies} copies in {density['seconds']:.1f} s"
               + (" and refused the next" if exhausted else
                  f"; {density['tandem_count']} would fit ({int(stats.get('free_bytes', 0)) / 2**30:.2f} GiB free, "
                  f"{(per_copy or 0) / 2**20:.1f} MiB per copy)"))
    finally:
        client.close()
    if not wait_until_empty(endpoint):
        bc.log(f"  [{name}] warning: the daemon still holds memory 30 s after the session closed")


def torch_persistent_cpu(name, small):
    """Parameters, buffers and momentum (same size as the trainable parameters) without a GPU."""
    model, _, _ = bc.build_model(name, small)
    params = sum(bc.tensor_bytes(p) for p in model.parameters())
    trainable = sum(bc.tensor_bytes(p) for p in model.parameters() if p.requires_grad)
    buffers = sum(bc.tensor_bytes(b) for b in model.buffers())
    return params + buffers + trainable


def ratios(out):
    t, p = out.get("tandem", {}), out.get("torch", {})
    r = {}
    if t.get("ephemeral_peak_bytes") and p.get("ephemeral_peak_bytes"):
        r["planned_over_pytorch"] = round(t["ephemeral_peak_bytes"] / p["ephemeral_peak_bytes"], 4)
    if t.get("ephemeral_peak_bytes") and t.get("no_reuse_bytes"):
        r["planned_over_no_reuse"] = round(t["ephemeral_peak_bytes"] / t["no_reuse_bytes"], 4)
        if r["planned_over_no_reuse"] > 1:  # no plan needs more than every value side by side
            bc.log(f"  warning: the planned peak exceeds the no-reuse sum computed here; the graph has values whose "
                   f"size this program does not know ({t.get('no_reuse_unsized_outputs')} unsized outputs)")
    if t.get("persistent_bytes") and p.get("persistent_bytes"):
        r["persistent_tandem_over_pytorch"] = round(t["persistent_bytes"] / p["persistent_bytes"], 4)
    d = out.get("density", {})
    if d.get("tandem_count") and p.get("processes_fit"):
        r["density_tandem_over_processes"] = round(d["tandem_count"] / p["processes_fit"], 3)
    out["ratios"] = r


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torch_probe", default=None, help=argparse.SUPPRESS)
    p.add_argument("--models", default=",".join(bc.MODEL_NAMES))
    p.add_argument("--small", action="store_true", help="the tiny versions of the models (CPU smoke test)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--density_s", type=float, default=10.0, help="seconds of registrations per model")
    p.add_argument("--max_copies", type=int, default=5000)
    p.add_argument("--cpu_memory_mib", type=int, default=32, help="the CPU daemon's memory (smoke tests)")
    p.add_argument("--probe_timeout", type=float, default=120)
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--capture_cache", default=os.environ.get("BENCH_CAPTURE_CACHE"),
                   help="reuse the steps overhead.py captured (default: $BENCH_CAPTURE_CACHE)")
    p.add_argument("--log_dir", default=None, help="where tandemd's log goes (default: a temporary folder)")
    p.add_argument("--budget_s", type=float, default=0, help="skip models that would start after this many s")
    p.add_argument("--out", default=None, help="JSON file to write")
    args = p.parse_args()
    if args.torch_probe:
        print(json.dumps(torch_probe(args.torch_probe, args.small)), flush=True)
        return 0
    if not args.out:
        p.error("--out is required")
    bc.raise_on_signals()
    names = bc.parse_models(args.models)
    device = bc.torch_device(args.device)
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(device),
              "config": {"models": names, "small": args.small, "density_s": args.density_s,
                         "max_copies": args.max_copies, "optimizer": f"SGD lr={bc.LR} momentum={bc.MOMENTUM}"},
              "models": {n: {} for n in names}}
    bc.log(f"planner quality: {', '.join(names)} on {result['meta']['gpu']}")

    def save():
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)

    daemon = None
    try:
        # PyTorch first, alone on the GPU (tandemd would take nearly all of it).
        for name in names:
            out = result["models"][name]
            if device != "cuda":
                out["torch"] = {"persistent_bytes": torch_persistent_cpu(name, args.small),
                                "skipped": "no CUDA: the allocator's statistics need a GPU"}
                continue
            try:
                out["torch"] = run_torch_probe(name, args)
                tp = out["torch"]
                bc.log(f"  [{name}] PyTorch: ephemeral peak {tp['ephemeral_peak_bytes'] / 2**20:.1f} MiB, persistent "
                       f"{tp['persistent_bytes'] / 2**20:.1f} MiB, footprint "
                       f"{(tp.get('footprint_bytes') or 0) / 2**30:.2f} GiB -> {tp.get('processes_fit')} processes")
            except Exception as e:
                out["torch"] = {"error": f"{type(e).__name__}: {e}"}
                bc.log(f"  [{name}] PyTorch probe failed: {e}")
            save()
        flags = bc.daemon_flags_for_large_models()
        if device == "cpu":
            flags.append(f"--cpu_memory_mib={args.cpu_memory_mib}")
        daemon = bc.Daemon(bc.find_tandemd(args.tandemd), device, "pack", flags, args.log_dir,
                           "tandemd-memory").start()
        for name in names:
            out = result["models"][name]
            if budget.left() <= 0:
                out["tandem"] = {"skipped": f"over the budget of {args.budget_s} s"}
                continue
            bc.log(f"[{name}]")
            try:
                measure_tandem(name, args, daemon.endpoint, device, out)
            except Exception as e:
                out["tandem_error"] = f"{type(e).__name__}: {e}"
                bc.log(f"  [{name}] Tandem failed: {e}")
                traceback.print_exc()
            ratios(out)
            save()
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        bc.stopped_early("planner quality", result, e)
    finally:
        if daemon is not None:
            if not daemon.alive():
                result["tandemd_log_tail"] = daemon.log_tail()
            daemon.stop()
        save()
    print_summary(result)
    bc.log(f"wrote {args.out}")
    return 1 if "error" in result else 0


def print_summary(result):
    def mib(v):
        return f"{v / 2**20:10.1f}" if isinstance(v, (int, float)) else f"{'-':>10}"

    bc.log("model        planned MiB  pytorch MiB  no-reuse MiB  planned/pytorch  tandem copies  processes")
    for name, m in result["models"].items():
        t, p, d = m.get("tandem", {}), m.get("torch", {}), m.get("density", {})
        ratio = m.get("ratios", {}).get("planned_over_pytorch")
        count = d.get("tandem_count")
        bc.log(f"{name:12s} {mib(t.get('ephemeral_peak_bytes'))}   {mib(p.get('ephemeral_peak_bytes'))}   "
               f"{mib(t.get('no_reuse_bytes'))}    {'-' if ratio is None else f'{ratio:13.3f}'}  "
               f"{'-' if count is None else count:>13}{'*' if d.get('extrapolated') else ' '} "
               f"{p.get('processes_fit', '-')!s:>10}")
    bc.log("(* extrapolated from the daemon's free memory once the time budget was spent)")


if __name__ == "__main__":
    sys.exit(main())
