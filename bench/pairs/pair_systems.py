"""The systems the pair matrix compares, and the measurements it makes in each: solos, pairs, the priority mode.

A system says what a job is (an adaptor job of tandemd, or a PyTorch step in the worker's own process, eager or
torch.compile'd) and where the native processes run (time-sliced, or as clients of an MPS server). Matrix fills
result["systems"][name] configuration by configuration and saves after each one, so that a run stopped early
keeps what it measured. Not thread-safe.
"""

import dataclasses
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))

import bench_common as bc  # noqa: E402
from pair_coordinator import ConfigFailed, run_config  # noqa: E402

COMPILE_MODE = "reduce-overhead"


@dataclasses.dataclass(frozen=True)
class System:
    name: str
    kind: str        # what a worker prepares: "tandem" (a job of tandemd) or "native" (PyTorch in the worker)
    compiled: bool   # native: the model wrapped in torch.compile(model, mode=COMPILE_MODE)
    mps: bool        # native: the workers are clients of an MPS server
    description: str


# In the order they run: tandemd, the plain processes, then the MPS phases (the server exists only during them).
SYSTEMS = (
    System("tandem", "tandem", False, False, "two adaptor jobs against one tandemd"),
    System("time_slicing", "native", False, False, "two eager PyTorch processes (the GPU's time-slicing)"),
    System("time_slicing_compiled", "native", True, False, "two torch.compile'd PyTorch processes"),
    System("mps", "native", False, True, "two eager PyTorch processes as MPS clients"),
    System("mps_compiled", "native", True, True, "two torch.compile'd PyTorch processes as MPS clients"),
)
BY_NAME = {s.name: s for s in SYSTEMS}
DEFAULT_SYSTEMS = "tandem,time_slicing,mps,mps_compiled,time_slicing_compiled"


def mps_unavailable_reason(device):
    if device != "cuda":
        return "no CUDA device"
    if shutil.which("nvidia-cuda-mps-control") is None:
        return "nvidia-cuda-mps-control not found"
    return None


def compile_unavailable_reason():
    import torch
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (torch >= 2.0 does)"
    return None


def unavailable_reason(system, device):
    """Why `system` cannot run here, or None."""
    return ((mps_unavailable_reason(device) if system.mps else None)
            or (compile_unavailable_reason() if system.compiled else None))


class Mps:
    """An MPS control daemon with private pipe and log folders; stop() is safe to call at any time."""

    def __init__(self, base_dir):
        self.base = base_dir
        # The control daemon serves the GPUs of CUDA_VISIBLE_DEVICES; its clients see those GPUs numbered from
        # 0 (a client left with CUDA_VISIBLE_DEVICES=1 beside a daemon of GPU 1 sees no GPU), so `env`, the
        # clients' environment, renumbers them.
        self.daemon_env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=os.path.join(base_dir, "pipe"),
                               CUDA_MPS_LOG_DIRECTORY=os.path.join(base_dir, "log"))
        self.env = dict(self.daemon_env)
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if visible:
            self.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(visible)))
        self.started = False

    def start(self):
        for d in ("pipe", "log"):
            os.makedirs(os.path.join(self.base, d), exist_ok=True)
        self.started = True  # from here on stop() runs even if -d fails half way
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=self.daemon_env, check=True, timeout=30)
        bc.log(f"MPS control daemon started (pipe {self.env['CUDA_MPS_PIPE_DIRECTORY']})")

    def log_tail(self, chars=2000):
        try:
            with open(os.path.join(self.base, "log", "control.log"), errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self):
        if not self.started:
            return
        self.started = False
        try:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=self.daemon_env, timeout=30)
            bc.log("MPS control daemon stopped")
        except (OSError, subprocess.SubprocessError) as e:
            bc.log(f"stopping MPS failed: {e}")


class Matrix:
    """Runs one system's solos, pairs and priority configurations and fills result['systems'][system.name]."""

    def __init__(self, args, result, save):
        self.args, self.result, self.save = args, result, save

    def out(self, system):
        return self.result["systems"].setdefault(system.name, {"solo": {}, "pairs": [], "priority": None})

    @staticmethod
    def job(system, model, endpoint, **kw):
        """A run_config job of `model` in `system`."""
        j = {"model": model, "system": system.kind, "endpoint": endpoint, **kw}
        if system.compiled:
            j["compile"] = COMPILE_MODE
        return j

    def solo(self, system, workers, model, endpoint=None):
        out = self.out(system)
        if model in out["solo"]:
            return out["solo"][model]
        try:
            r = run_config(workers, [self.job(system, model, endpoint, timed_s=self.args.solo_s)], self.args)[0]
        except ConfigFailed as e:
            out["solo"][model] = {"error": str(e)}
            bc.log(f"  {system.name} solo {model}: FAILED: {e}")
            return out["solo"][model]
        r["n"] = max(self.args.min_iters, int(r["iters"]))
        out["solo"][model] = r
        extra = f", device {r['run_ms']:.3f} ms" if r.get("run_ms") else ""
        bc.log(f"  {system.name} solo {model}: {r['ms_per_iter']:.3f} ms/iter ({r['iters']} iters{extra})")
        self.save()
        return r

    def pair(self, system, workers, a, b, endpoint=None):
        """Both jobs at once, each timed over the iterations it did in --solo_s alone; per job r = shared / solo
        time per iteration and its rate 1 / r, per pair their sum (`aggregate`)."""
        out = self.out(system)
        entry = {"pair": f"{a}+{b}", "models": [a, b]}
        solos = [self.solo(system, workers, m, endpoint) for m in (a, b)]
        if any("error" in s for s in solos):
            entry["error"] = "a solo measurement failed"
            out["pairs"].append(entry)
            return
        jobs = [self.job(system, m, endpoint, iters=s["n"]) for m, s in zip((a, b), solos)]
        try:
            results = run_config(workers, jobs, self.args)
        except ConfigFailed as e:
            entry["error"] = str(e)
            out["pairs"].append(entry)
            bc.log(f"  {system.name} {a}+{b}: FAILED: {e}")
            self.save()
            return
        entry["jobs"] = []
        for m, s, r in zip((a, b), solos, results):
            ratio = r["ms_per_iter"] / s["ms_per_iter"]
            entry["jobs"].append({"model": m, "solo_ms": s["ms_per_iter"], "shared_ms": r["ms_per_iter"],
                                  "r": round(ratio, 4), "rate": round(1 / ratio, 4), "iters": r["iters"],
                                  "run_ms": r.get("run_ms"), "iters_after_window": r.get("extra_iters"),
                                  "lane": (r["registration"].get("lane", 0) if "registration" in r else None)})
        entry["aggregate"] = round(sum(s["ms_per_iter"] / r["ms_per_iter"] for s, r in zip(solos, results)), 4)
        out["pairs"].append(entry)
        rs = ", ".join(f"{j['model']} r={j['r']:.2f}" for j in entry["jobs"])
        bc.log(f"  {system.name} {a}+{b}: aggregate {entry['aggregate']:.3f} ({rs})")
        self.save()

    def priority(self, system, workers, endpoint=None):
        hp, be = self.args.priority
        entry = self.out(system)["priority"] = {"high": hp, "best_effort": be, "think_ms": self.args.think_ms}
        think_ms = self.args.think_ms
        try:
            hp_solo = run_config(workers, [self.job(system, hp, endpoint, priority=1, depth=1, think_ms=think_ms,
                                                    timed_s=self.args.solo_s)], self.args)[0]
            be_solo = run_config(workers, [self.job(system, be, endpoint, timed_s=self.args.solo_s)], self.args)[0]
            n = max(self.args.min_iters, int(hp_solo["iters"]))
            hp_shared, be_shared = run_config(workers, [
                self.job(system, hp, endpoint, priority=1, depth=1, think_ms=think_ms, iters=n),
                self.job(system, be, endpoint, priority=0, open_ended=True)], self.args)
        except ConfigFailed as e:
            entry["error"] = str(e)
            bc.log(f"  {system.name} priority {hp}:{be}: FAILED: {e}")
            self.save()
            return
        be_solo_its = 1e3 / be_solo["ms_per_iter"]
        entry.update({
            "hp_solo_ms": hp_solo["ms_per_iter"], "hp_shared_ms": hp_shared["ms_per_iter"],
            "hp_slowdown": round(hp_shared["ms_per_iter"] / hp_solo["ms_per_iter"], 4),
            "be_solo_ms": be_solo["ms_per_iter"], "be_solo_its": round(be_solo_its, 4),
            "be_shared_its": be_shared.get("its_per_s"), "be_shared_iters": be_shared.get("iters"),
            "be_throughput": round((be_shared.get("its_per_s") or 0) / be_solo_its, 4),
        })
        bc.log(f"  {system.name} priority {hp} (high) + {be} (best effort): high-priority slowdown "
               f"{entry['hp_slowdown']:.2f}x, best-effort throughput {entry['be_throughput']:.2f} of solo")
        self.save()

    def run_system(self, system, workers, deadline, endpoint=None, pairs=True, priority=True):
        """Pairs, then the priority mode; configurations that would start less than min_config_s before
        `deadline` (time.monotonic()) are skipped, so that every system gets its share of the budget."""
        def spent():
            return deadline - time.monotonic() < self.args.min_config_s

        for p in self.args.pairs if pairs else []:
            if spent():
                self.out(system)["pairs"].append({"pair": "+".join(p), "models": list(p),
                                                  "error": "skipped: budget spent"})
                continue
            self.pair(system, workers, *p, endpoint=endpoint)
        if priority and self.args.priority:
            if spent():
                self.out(system)["priority"] = {"error": "skipped: budget spent"}
            else:
                self.priority(system, workers, endpoint)
