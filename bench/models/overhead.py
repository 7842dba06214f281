#!/usr/bin/env python3
"""What running one training job through tandemd costs, next to PyTorch on the same GPU in the same run.

Per model (fcn5, resnet50, vgg19, lstm, transformer at the sizes of GPU.md; --small: the tiny test versions):
  (a) PyTorch eager ms/iter;
  (b) PyTorch's CUDA-graph replay of the same whole step (torch.cuda.graph, warmed up on a side stream first);
  (c) the job alone through tandemd via the adaptor: wall-clock ms/iter with 1, 2 and 3 iterations in flight
      (step_async);
  (d) the daemon's device time per iteration (each result's run_seconds: from an event after the batch's copy
      to an event after the last kernel, so it excludes the transfer);
  plus the cost of moving the batch in, and a loss-agreement check (Tandem vs eager over the first steps).

Every path copies the batch from host memory each iteration: eager and graph replay from a pinned host buffer
(non_blocking copy inside the step), Tandem from the client's tensor (shared memory to the daemon, then a copy to
the device). SGD with momentum, float32 (PyTorch's default math: TF32 in cuDNN convolutions only, on both sides),
no dropout.

Batch transfer: two extra jobs are registered with a feed-only graph, one whose feeds are the model's batch
tensors plus a scalar, one with the scalar alone; each runs one tiny kernel (a sum of the scalar) and fetches a
scalar. Run one at a time, each iteration's wall time (the median) is round trip + scheduling (+ the batch's
transfer for the first); the difference of the two is the batch's transfer cost (client copy into shared memory,
host to device copy). The per-iteration overhead of the training job at depth 1 (wall - run_seconds) is reported too.

    python3 bench/models/overhead.py --out /tmp/out/overhead.json                    # on the GPU machine
    python3 bench/models/overhead.py --small --device cpu --out /tmp/overhead.json   # smoke test on a CPU

tandemd is started by the program (--tandemd, $TANDEMD or PATH) with --reserve_mib set so that about half the
GPU stays free for PyTorch, or --endpoint uses a running daemon.
"""

import argparse
import collections
import copy
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "traces"))

import bench_common as bc  # noqa: E402
import torch  # noqa: E402

import tandem  # noqa: E402
import tandem.torch  # noqa: E402,F401
from tandem.torch import dtypes as tdtypes  # noqa: E402
import trace_common as tc  # noqa: E402


# ---- PyTorch ----

class EagerStep:
    """The whole training step in PyTorch, the batch copied in from (pinned) host memory each time."""

    def __init__(self, model, loss_fn, host_batch, device):
        self.model = model.to(device)
        self.loss_fn = loss_fn
        self.opt = bc.sgd(self.model.parameters())
        pin = device == "cuda"
        self.host = [t.pin_memory() if pin else t.clone() for t in host_batch]
        self.dev = [torch.empty_like(t, device=device) for t in host_batch]

    def set_batch(self, batch):
        for h, t in zip(self.host, batch):
            h.copy_(t)

    def __call__(self):
        for d, h in zip(self.dev, self.host):
            d.copy_(h, non_blocking=True)
        # Gradients stay allocated (set_to_none=False) so that the same step can be captured as a CUDA graph.
        self.opt.zero_grad(set_to_none=False)
        loss = self.loss_fn(self.model(*self.dev[:-1]), self.dev[-1])
        loss.backward()
        self.opt.step()
        return loss


def timed_loop(fn, device, warmup, iters):
    for _ in range(warmup):
        fn()
    bc.sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    bc.sync(device)
    return (time.perf_counter() - start) / iters


def eager_losses(step, batches, device):
    losses = []
    for x, y in batches:
        step.set_batch((x, y))
        bc.sync(device)  # the host buffer is rewritten: the previous copy must be done
        losses.append(float(step()))
    return losses


def perturbed(model, seed=0):
    """A copy of `model` whose floating-point parameters and buffers are each moved by about one float32
    rounding step (relative 2^-23, random sign): what a different but equally exact order of float32
    operations does to them."""
    copy_ = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in list(copy_.parameters()) + list(copy_.buffers()):
            if t.is_floating_point():
                sign = torch.randint(0, 2, t.shape, generator=g).to(t.dtype) * 2 - 1
                t.mul_(1 + sign * 2.0 ** -23)
    return copy_


def measure_pytorch(name, model, loss_fn, batches, device, args, out):
    # PyTorch's own spread over the agreement steps: the same steps from weights one rounding step away.
    # Training amplifies such differences at a rate that depends on the model and its learning rate, so
    # Tandem's difference from PyTorch is judged against this spread (float32 tolerance, measured).
    reference = perturbed(model) if args.agree_spread and args.agree_steps >= 2 else None
    step = EagerStep(model, loss_fn, batches[0], device)
    out["eager_losses"] = eager_losses(step, batches[:args.agree_steps], device)
    if reference is not None:
        spread_step = EagerStep(reference, loss_fn, batches[0], device)
        out["perturbed_eager_losses"] = eager_losses(spread_step, batches[:args.agree_steps], device)
        del spread_step, reference
    step.set_batch(batches[0])
    bc.sync(device)
    eager = timed_loop(step, device, args.warmup, args.iters)
    out["eager_ms"] = bc.ms(eager)
    bc.log(f"  [{name}] PyTorch eager: {eager * 1e3:.3f} ms/iter")

    if device != "cuda":
        out["graph_replay_ms"] = None
        out["graph_replay_skipped"] = "no CUDA: graph replay needs a GPU"
        bc.log(f"  [{name}] graph replay skipped (no CUDA)")
        return
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step()
        replay = timed_loop(graph.replay, device, args.warmup, args.iters)
        loss_value = float(static_loss)
        out["graph_replay_ms"] = bc.ms(replay)
        out["graph_replay_last_loss"] = loss_value
        bc.log(f"  [{name}] PyTorch CUDA-graph replay: {replay * 1e3:.3f} ms/iter (loss {loss_value:.4f})")
        del graph, static_loss
    except Exception as e:  # a model that cannot be captured still gets its other numbers
        out["graph_replay_ms"] = None
        out["graph_replay_error"] = f"{type(e).__name__}: {e}"
        bc.log(f"  [{name}] graph replay failed: {e}")
    finally:
        del step
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---- Tandem ----

def run_depth(job, batches, iters, depth):
    """iters iterations with up to `depth` in flight; (wall seconds per iteration, handles)."""
    pending, done = collections.deque(), []
    start = time.perf_counter()
    for i in range(iters):
        pending.append(job.step_async(*batches[i % len(batches)]))
        if len(pending) >= depth:
            h = pending.popleft()
            h.result()
            done.append(h)
    while pending:
        h = pending.popleft()
        h.result()
        done.append(h)
    return (time.perf_counter() - start) / iters, done


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def feed_only_graph(batch_specs):
    """Feeds: the batch tensors (if any) plus a float scalar 'z'; one node, sum(z); fetch its result."""
    feeds = [{"name": n, "dtype": tdtypes.name_of(t.dtype), "shape": list(t.shape)} for n, t in batch_specs]
    feeds.append({"name": "z", "dtype": "FLOAT32", "shape": []})
    return {"feeds": feeds, "nodes": [{"op": "sum", "inputs": ["z"], "outputs": ["s"], "label": "feed-only"}],
            "fetches": ["s"], "updates": []}


def measure_feed_cost(name, endpoint, device_hint, batch, args, out):
    client = tandem.Client(endpoint=endpoint, name=f"{name}-feed-only")
    try:
        z = tdtypes.host_tensor("z", torch.tensor(1.0))
        results = {}
        for label, specs in (("scalar_only", []), ("batch", [(f"batch/{i}", t) for i, t in enumerate(batch)])):
            job_id, _ = client.register_job({"name": f"{name}-{label}", "graph": feed_only_graph(specs),
                                             "hints": {"device": device_hint}})
            feeds = [tdtypes.host_tensor(n, t) for n, t in specs] + [z]
            walls, runs = [], []
            for i in range(args.warmup + args.iters):
                start = time.perf_counter()
                r = client.wait(client.submit(job_id, feeds, ["s"], i + 1))
                if i >= args.warmup:
                    walls.append(time.perf_counter() - start)
                    runs.append(r.run_seconds)
            client.close_job(job_id)
            results[label] = (median(walls), median(runs))
        batch_bytes = sum(bc.tensor_bytes(t) for t in batch)
        transfer = results["batch"][0] - results["scalar_only"][0]
        out["feed"] = {
            "batch_bytes": batch_bytes,
            "scalar_only_wall_ms": bc.ms(results["scalar_only"][0]),
            "batch_wall_ms": bc.ms(results["batch"][0]),
            "batch_run_ms": bc.ms(results["batch"][1]),
            "transfer_ms": bc.ms(transfer),
            "transfer_gb_per_s": round(batch_bytes / transfer / 1e9, 3) if transfer > 0 else None,
        }
        bc.log(f"  [{name}] feed-only iteration: {results['scalar_only'][0] * 1e3:.3f} ms with a scalar, "
               f"{results['batch'][0] * 1e3:.3f} ms with the batch ({batch_bytes / 2**20:.1f} MiB): "
               f"transfer {transfer * 1e3:.3f} ms")
    finally:
        client.close()


def measure_tandem(name, model, loss_fn, batches, endpoint, device_hint, args, out):
    t0 = time.perf_counter()
    capture, lowered = tandem.torch.capture_training_job(model, loss_fn, bc.sgd(model.parameters()), batches[0])
    t1 = time.perf_counter()
    bc.save_capture(args.capture_cache, name, args.small, lowered, t1 - t0)
    if args.spec_dir:  # the later stages of a suite run register this capture instead of capturing again
        tc.offer_job_spec(args.spec_dir, name, args.small, capture, lowered, batches[:2], t1 - t0)
    t_register = time.perf_counter()
    job = tandem.torch.TrainingJob(capture, lowered, endpoint, f"{name}-overhead", {"device": device_hint})
    t2 = time.perf_counter()
    t = out["tandem"] = {"capture_s": round(t1 - t0, 3), "register_s": round(t2 - t_register, 3),
                         "nodes": len(lowered.graph["nodes"]), "registration": job.registration}
    bc.log(f"  [{name}] captured in {t1 - t0:.2f} s ({len(lowered.graph['nodes'])} nodes), registered in "
           f"{t2 - t_register:.2f} s on {job.registration.get('device')}")
    with job:
        losses = [job.step(x, y) for x, y in batches[:args.agree_steps]]
        out["tandem_losses"] = losses
        t["depth"] = {}
        timing_batches = batches[:max(1, min(4, len(batches)))]
        for depth in args.depths:
            run_depth(job, timing_batches, args.warmup, depth)
            wall, handles = run_depth(job, timing_batches, args.iters, depth)
            run = mean([h.run_seconds for h in handles])
            queue = mean([h.queue_seconds for h in handles])
            t["depth"][str(depth)] = {"wall_ms": bc.ms(wall), "run_ms": bc.ms(run), "queue_ms": bc.ms(queue),
                                      "wall_minus_run_ms": bc.ms(wall - run)}
            bc.log(f"  [{name}] Tandem, {depth} in flight: {wall * 1e3:.3f} ms/iter wall, device "
                   f"{run * 1e3:.3f} ms, queued {queue * 1e3:.3f} ms")
    depth_key = str(args.report_depth) if str(args.report_depth) in t["depth"] else str(args.depths[-1])
    out["tandem_ms"] = t["depth"][depth_key]["wall_ms"]
    out["tandem_depth"] = int(depth_key)
    out["device_ms"] = t["depth"][depth_key]["run_ms"]


def agreement(out):
    eager, tan = out.get("eager_losses"), out.get("tandem_losses")
    if not eager or not tan:
        return
    rel = [abs(a - e) / max(abs(e), 1e-12) for a, e in zip(tan, eager)]
    out["agreement"] = {"steps": len(rel), "max_rel_diff": max(rel), "rel_diff": rel}
    bc.log(f"  loss agreement over {len(rel)} steps: max relative difference {max(rel):.2e} "
           f"(first loss: Tandem {tan[0]:.6f}, eager {eager[0]:.6f}; last: {tan[-1]:.6f} vs {eager[-1]:.6f})")
    spread = out.get("perturbed_eager_losses")
    if spread:
        srel = [abs(a - e) / max(abs(e), 1e-12) for a, e in zip(spread, eager)]
        n = min(len(rel), len(srel))
        a = out["agreement"]
        a["pytorch_spread_rel_diff"] = srel
        a["pytorch_spread_max_rel_diff"] = max(srel)
        # Within float32 tolerance: no further from PyTorch than PyTorch is from itself after a one-rounding-
        # step change of its weights (twice that, as both are single samples of the same spread), or 1e-5.
        a["within_float32_tolerance"] = max(rel[:n]) <= max(2 * max(srel[:n]), 1e-5)
        bc.log(f"  PyTorch against itself from weights one rounding step away: max relative difference "
               f"{max(srel):.2e}; Tandem within float32 tolerance: {a['within_float32_tolerance']}")


def ratios(out):
    r = {}
    eager, graph, tan, dev = out.get("eager_ms"), out.get("graph_replay_ms"), out.get("tandem_ms"), out.get("device_ms")
    if tan and eager:
        r["tandem_over_eager"] = round(tan / eager, 4)
    if tan and graph:
        r["tandem_over_graph_replay"] = round(tan / graph, 4)
    if dev and graph:
        r["device_over_graph_replay"] = round(dev / graph, 4)
    out["ratios"] = r


def measure_model(name, args, device, endpoint, result):
    out = result["models"][name] = {"description": "tiny test version" if args.small else bc.DESCRIPTIONS[name]}
    model, loss_fn, make_batch = bc.build_model(name, args.small)
    batches = bc.make_batches(make_batch, max(args.agree_steps, 4))
    out["batch_bytes"] = sum(bc.tensor_bytes(t) for t in batches[0])
    out["parameters"] = sum(p.numel() for p in model.parameters())
    reference = copy.deepcopy(model)  # the CPU copy keeps the initial weights for Tandem
    try:
        measure_pytorch(name, reference, loss_fn, batches, device, args, out)
    except Exception as e:
        out["pytorch_error"] = f"{type(e).__name__}: {e}"
        bc.log(f"  [{name}] PyTorch failed: {e}")
        traceback.print_exc()
    del reference
    if device == "cuda":
        torch.cuda.empty_cache()
    if endpoint is not None:
        try:
            measure_tandem(name, model, loss_fn, batches, endpoint, device, args, out)
        except Exception as e:
            out["tandem_error"] = f"{type(e).__name__}: {e}"
            bc.log(f"  [{name}] Tandem failed: {e}")
            traceback.print_exc()
        try:
            measure_feed_cost(name, endpoint, device, batches[0], args, out)
        except Exception as e:
            out["feed_error"] = f"{type(e).__name__}: {e}"
            bc.log(f"  [{name}] feed-only measurement failed: {e}")
    agreement(out)
    ratios(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(bc.MODEL_NAMES), help="comma-separated subset of the five")
    p.add_argument("--small", action="store_true", help="the tiny versions of the models (CPU smoke test)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--depths", default="1,2,3", help="iterations in flight through tandemd")
    p.add_argument("--report_depth", type=int, default=2, help="the depth whose wall time is 'tandem_ms'")
    p.add_argument("--agree_steps", type=int, default=10, help="steps of the loss-agreement check")
    p.add_argument("--agree_spread", type=int, default=1,
                   help="1: also run the agreement steps in PyTorch from weights one float32 rounding step away, "
                        "the measured tolerance of the check")
    p.add_argument("--tandemd", default=None, help="tandemd binary (default: $TANDEMD, PATH, build tree)")
    p.add_argument("--endpoint", default=None, help="use this running tandemd instead of starting one")
    p.add_argument("--no_tandem", action="store_true", help="PyTorch only")
    p.add_argument("--budget_s", type=float, default=0, help="skip models that would start after this many s")
    p.add_argument("--spec_dir", default=os.environ.get("BENCH_SPEC_DIR"),
                   help="save each capture here as a job spec for the trace and pair programs "
                        "(default: $BENCH_SPEC_DIR)")
    p.add_argument("--capture_cache", default=os.environ.get("BENCH_CAPTURE_CACHE"),
                   help="save each lowered step here for planner_quality.py (default: $BENCH_CAPTURE_CACHE)")
    p.add_argument("--log_dir", default=None, help="where tandemd's log goes (default: a temporary folder)")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args()
    args.depths = [int(d) for d in args.depths.split(",") if d]
    bc.raise_on_signals()
    names = bc.parse_models(args.models)
    device = bc.torch_device(args.device)
    bc.like_for_like_numerics()
    budget = bc.Budget(args.budget_s)
    result = {"meta": bc.metadata(device),
              "config": {"models": names, "small": args.small, "warmup": args.warmup, "iters": args.iters,
                         "depths": args.depths, "report_depth": args.report_depth, "agree_steps": args.agree_steps,
                         "agree_spread": bool(args.agree_spread),
                         "optimizer": f"SGD lr={bc.LR} momentum={bc.MOMENTUM}", "dtype": "float32",
                         **bc.numerics(), "cudnn_benchmark": torch.backends.cudnn.benchmark},
              "models": {}}
    bc.log(f"overhead: {', '.join(names)} on {result['meta']['gpu']} (torch {torch.__version__})")
    daemon = None
    try:
        endpoint = args.endpoint
        if endpoint is None and not args.no_tandem:
            flags = bc.daemon_flags_for_large_models()
            if device == "cuda":
                free, total = torch.cuda.mem_get_info()
                # The daemon takes all but its reserve in one allocation; leave about half for PyTorch.
                reserve = (total - free) + total // 2
                flags.append(f"--reserve_mib={reserve >> 20}")
                result["config"]["tandemd_reserve_mib"] = reserve >> 20
            daemon = bc.Daemon(bc.find_tandemd(args.tandemd), device, "pack", flags,
                               log_dir=args.log_dir, name="tandemd-overhead").start()
            endpoint = daemon.endpoint
        for name in names:
            if budget.left() <= 0:
                result["models"][name] = {"skipped": f"over the budget of {args.budget_s} s"}
                bc.log(f"[{name}] skipped: budget spent")
                continue
            bc.log(f"[{name}] ({'tiny' if args.small else bc.DESCRIPTIONS[name]})")
            measure_model(name, args, device, endpoint, result)
            result["elapsed_s"] = round(budget.elapsed(), 1)
            bc.write_json(args.out, result)
    except (Exception, KeyboardInterrupt, bc.Terminated) as e:
        bc.stopped_early("overhead", result, e)
    finally:
        if daemon is not None:
            if not daemon.alive():
                result["tandemd_log_tail"] = daemon.log_tail()
            daemon.stop()
        result["elapsed_s"] = round(budget.elapsed(), 1)
        bc.write_json(args.out, result)
    print_summary(result)
    bc.log(f"wrote {args.out}")
    return 1 if "error" in result else 0


def print_summary(result):
    def f(v):
        return f"{v:9.3f}" if isinstance(v, (int, float)) else f"{'-':>9}"

    bc.log("model        eager ms  graph ms  tandem ms  device ms  transfer ms  max loss rel diff")
    for name, m in result["models"].items():
        agree = m.get("agreement", {}).get("max_rel_diff")
        bc.log(f"{name:11s} {f(m.get('eager_ms'))} {f(m.get('graph_replay_ms'))} {f(m.get('tandem_ms'))}  "
               f"{f(m.get('device_ms'))}  {f(m.get('feed', {}).get('transfer_ms'))}    "
               f"{'-' if agree is None else f'{agree:.2e}'}")


if __name__ == "__main__":
    sys.exit(main())
