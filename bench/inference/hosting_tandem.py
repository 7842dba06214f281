"""The tandem mode of the hosting benchmark: one tandemd, the models as tandem.torch.ServedModels (each its
own job with its own weights), --models_per_proc of them per client process (worker.py --backend tandem), one
thread each.

Before the workers' models are used, preflight() serves one model of each kind through the daemon and checks
it against PyTorch on the CPU; a kind that cannot be served leaves the mix of every mode. Every worker starts
(up to the cap) before the first probe, which waits until all are ready (TandemMode.prespawn), while a
RegistrationWatch samples how the models fill tandemd's lanes.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import bench_common as bc  # noqa: E402
import daemon_stats  # noqa: E402
import torch  # noqa: E402

import inference_models  # noqa: E402
from hosting_mode import Mode, start_pool  # noqa: E402

# tandemd's --max_inflight_per_lane for hosting: with 4, a lane's stream
# holds the running iteration and 3 more (of other models) behind it; on an
# H200 that hosted 256 models where 2 (the daemon's default) hosted 192
# (bench/results/2026-11-30-h200-hosting-level-inflight4.json).
INFLIGHT_PER_LANE = 4
# tandemd's --max_lanes for hosting: 8 lanes (streams side by side) hosted 320-352 models on an H200 where 4 hosted
# 288-320, once each lane stream had a hardware queue of its own (CUDA_DEVICE_MAX_CONNECTIONS, which tandemd
# sets; before that, 8 lanes did worse than 4: bench/results/2026-12-01-h200-hosting-lanes-queues.json). At
# 352-416 models 12 lanes passed every count where 8 failed every one and 16 passed only 416
# (bench/results/2026-12-01-h200-hosting-lanes12.json).
LANES = 12
# The daemon-side defaults of hosting, each added unless --tandemd_flags names the flag.
TANDEMD_DEFAULTS = {"--max_inflight_per_lane": INFLIGHT_PER_LANE, "--max_lanes": LANES}


class TandemMode(Mode):
    name = "tandem"
    # No workers start while a probe runs: on the H200 with four steps ahead, the workers capturing,
    # registering and checking 100 more models during the probes (each check runs iterations in the daemon)
    # made 16 models fail at p50 170 ms and the count came out 13; with none it was 64
    # (bench/results/2026-11-30-h200-hosting-tandem.json). Its workers are ready in ~30 s anyway.
    spawn_ahead = 0
    # With 160 and more models hosted, starting 8 more processes per growth step (each capturing its models)
    # after the previous probe left the suite's Tandem share out of time at 128 models with 256's workers not
    # ready; all 16 processes start side by side on 16 cores.
    prespawn = True
    weight = 1.5  # its search goes furthest: hundreds of models

    def __init__(self, args, state, result):
        super().__init__(args, state, result)
        self.daemon = None

    def open(self, counts, idle):
        args, state = self.args, self.state
        # Many small request streams per lane: iterations of several of them wait on a lane's stream behind
        # the running one, hiding the turnaround between iterations (docs/scheduling.md).
        flags = ["--session_timeout=600", *args.tandemd_flags]
        for flag, value in TANDEMD_DEFAULTS.items():
            if not any(f.startswith(flag) for f in flags):
                flags.append(f"{flag}={value}")
        self.daemon = bc.Daemon(bc.find_tandemd(args.tandemd), args.device, args.tandem_policy, flags,
                                log_dir=args.log_dir, name="tandemd-hosting").start()
        self.out["tandemd_flags"] = self.daemon.flags
        self.out["models_per_proc"] = args.models_per_proc
        endpoint = self.daemon.endpoint
        self.pool = start_pool("tandem", args, state["specs"], counts, idle, endpoint=endpoint,
                               per_proc=args.models_per_proc)
        if not args.no_preflight:  # while the workers start
            kinds = preflight(args, endpoint, state["kinds"], self.result)
            if kinds != state["kinds"]:  # the mix changes for every mode: start again with it
                self.pool.close()
                self.pool = None
                state["kinds"] = kinds
                state["specs"] = inference_models.slot_specs(args.max_count, kinds, args.batches, args.seed)
                self.result["config"]["kinds"] = kinds
                self.pool = start_pool("tandem", args, state["specs"], counts, idle, endpoint=endpoint,
                                       per_proc=args.models_per_proc)
        import tandem
        self.stats_client = tandem.Client(endpoint=endpoint, name="hosting-stats")
        return self.pool

    def wait_prespawned(self, count, deadline):
        watch = RegistrationWatch(self.stats_client)
        try:
            return self.pool.wait_ready(count, deadline)
        finally:  # the stats client is the main thread's again
            registration = watch.stop()
            if registration is not None:
                self.out["registration"] = registration

    def check(self):
        if not self.daemon.alive():
            raise RuntimeError(f"tandemd exited: {self.daemon.log_tail(1500)}")

    def settling(self, probe):
        """Whether tandemd rebalanced during the probe: lane moves (levelling after new models began their
        streams) and the graph captures that follow each move or a first request happen once, after which a
        moved job stays put for 10 s; the steady state after them is what a count is about."""
        d = probe.get("tandemd", {})
        return d.get("lane_moves", 0) > 0 or d.get("graph_captures", 0) > 0

    def close(self):
        if self.stats_client is not None:
            self.stats_client.close()
        if self.daemon is not None:
            if not self.daemon.alive():
                self.out["tandemd_log_tail"] = self.daemon.log_tail()
            self.daemon.stop()


class RegistrationWatch:
    """Samples tandemd's per-lane job counts and lane moves every `every_s` while the prespawned models register,
    on its own thread (the stats client is not used by anything else then): whether a crowded lane forms as the
    models are placed or by moves among them."""

    def __init__(self, client, every_s=1.0):
        self.client, self.every_s, self.samples = client, every_s, []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self):
        snap = daemon_stats.snapshot(self.client)
        if snap and "error" not in snap:
            lanes = snap["per_lane"]
            self.samples.append({"t": round(time.monotonic() - self._started, 2),
                                 "lane_jobs": [lanes[k]["jobs"] for k in sorted(lanes)],
                                 "lane_moves": snap["lane_moves"]})

    def _run(self):
        while not self._stop.wait(self.every_s):
            self._sample()

    def stop(self):
        """Stops sampling, takes a last sample, and returns registration_summary of them all."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._sample()
        return registration_summary(self.samples)


def registration_summary(samples):
    """{"lane_jobs": at the end, "lane_moves": moves while the models registered, "fullest": [[t, most jobs in a
    lane, moves so far], ...] at each sample} from RegistrationWatch's samples (None without any)."""
    if not samples:
        return None
    last = samples[-1]
    return {"lane_jobs": last["lane_jobs"], "lane_moves": last["lane_moves"],
            "fullest": [[x["t"], max(x["lane_jobs"], default=0), x["lane_moves"]] for x in samples]}


def preflight(args, endpoint, kinds, result):
    """Serves one model of each kind through tandemd and checks its output against PyTorch on the CPU. A kind
    that cannot be served is dropped from the mix of every mode (and the reason recorded)."""
    import tandem.torch
    kept = []
    for kind in kinds:
        spec = next(s for s in inference_models.slot_specs(len(kinds) * 4, kinds, args.batches, args.seed)
                    if s["kind"] == kind)
        model, x = inference_models.build(kind, spec["batch"], args.small, seed=1000 + spec["id"])
        try:
            with torch.no_grad():
                ref = model(x)
            with tandem.torch.serve(model, x, endpoint=endpoint, name=f"preflight-{kind}",
                                    device=args.device) as served:
                y = served(x)
            diff = float((y - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
            result["preflight"][kind] = {"batch": spec["batch"], "max_rel_diff": diff}
            kept.append(kind)
            # Kept either way (the benchmark measures latency), but a large difference is worth a look.
            warn = "  WARNING: differs from PyTorch's output" if diff > 1e-2 else ""
            bc.log(f"  preflight {kind} (batch {spec['batch']}): served, max relative difference to PyTorch on "
                   f"the CPU {diff:.1e}{warn}")
        except Exception as e:
            result["preflight"][kind] = {"error": f"{type(e).__name__}: {e}"}
            result["kinds_dropped"][kind] = f"{type(e).__name__}: {e}"
            bc.log(f"  preflight {kind}: DROPPED from every mode: {e}")
    if not kept:
        raise RuntimeError("tandemd could serve none of the model kinds")
    return kept
