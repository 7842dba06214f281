"""How much GPU and host memory there is and who holds it, for the hosting modes' memory caps: nvidia-smi's and
/proc's numbers, and MemoryWatch, which estimates how many one-model processes fit the free GPU and host memory
from what the first ready ones took (the server mode estimates its models from its own reports:
hosting_server.memory_cap). Every function answers None (or {}) where its source is missing.
"""

import os
import shutil
import subprocess

# The memory a mode leaves free when it estimates how many models fit (MemoryWatch, hosting_server).
GPU_MARGIN_MIB = 2048
HOST_MARGIN_MIB = 4096


def gpu_memory_mib():
    """(used, total) MiB of the GPU that CUDA_VISIBLE_DEVICES names first (nvidia-smi numbers GPUs without
    that variable, so it is passed as -i), or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
                              "-i", gpu], capture_output=True, text=True, timeout=20)
        used, total = (int(float(v)) for v in out.stdout.strip().splitlines()[0].split(","))
        return used, total
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def host_memory_mib():
    """(used, total) MiB of the host: MemTotal - MemAvailable, MemTotal; None where /proc/meminfo is missing."""
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) for line in f if ":" in line}
        return (info["MemTotal"] - info["MemAvailable"]) // 1024, info["MemTotal"] // 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def gpu_memory_of(pids):
    """{pid: MiB} of these processes on the GPU (nvidia-smi's compute apps), or {} where it does not say."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return {}
    wanted, found = set(pids), {}
    for line in out.stdout.splitlines():
        try:
            pid, mib = (int(float(v)) for v in line.split(","))
        except ValueError:
            continue
        if pid in wanted:
            found[pid] = mib
    return found


def host_memory_of(pid):
    """MiB of anonymous resident memory of a process (its own, not the shared libraries), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class MemoryWatch:
    """How many one-model worker processes fit the memory that was free before the mode started (minus a
    margin): per process, the largest of what nvidia-smi / /proc say the ready workers hold and, at a quiet
    moment (no worker starting), the increase of the memory in use over the workers ready."""

    def __init__(self, gpu, gpu_margin_mib=GPU_MARGIN_MIB, host_margin_mib=HOST_MARGIN_MIB):
        self.gpu = gpu
        self.margins = {"gpu": gpu_margin_mib, "host": host_margin_mib}
        self.base = {"host": host_memory_mib()}
        if gpu:
            self.base["gpu"] = gpu_memory_mib()
        self.per_process = {}

    def _note(self, kind, mib):
        if mib is not None and mib > 0:
            self.per_process[kind] = max(self.per_process.get(kind, 0.0), float(mib))

    def measure(self, pids, quiet):
        """Records what the ready workers `pids` hold; `quiet`: no other worker of the mode is starting."""
        if not pids:
            return
        own = [m for m in (host_memory_of(p) for p in pids) if m is not None]
        self._note("host", sum(own) / len(own) if own else None)
        if self.gpu:
            on_gpu = gpu_memory_of(pids)
            self._note("gpu", sum(on_gpu.values()) / len(on_gpu) if on_gpu else None)
        if quiet:
            now = {"host": host_memory_mib(), "gpu": gpu_memory_mib() if self.gpu else None}
            for kind, base in self.base.items():
                if base and now.get(kind):
                    self._note(kind, (now[kind][0] - base[0]) / len(pids))

    def limit(self):
        """(processes, text) that fit, or None before a measurement."""
        best = None
        for kind, per in self.per_process.items():
            base = self.base.get(kind)
            if not base or per < 1:
                continue
            fits = int((base[1] - base[0] - self.margins[kind]) // per)
            text = (f"{kind} memory: {per:.0f} MiB per process, {base[1] - base[0]} MiB free before the mode "
                    f"({self.margins[kind]} MiB kept free)")
            if best is None or fits < best[0]:
                best = (max(fits, 0), text)
        return best

    def summary(self):
        limit = self.limit()
        return {"per_process_mib": {k: round(v, 1) for k, v in self.per_process.items()},
                "used_before_mib": {k: v[0] for k, v in self.base.items() if v},
                "total_mib": {k: v[1] for k, v in self.base.items() if v},
                "fits_processes": limit[0] if limit else None, "limited_by": limit[1] if limit else None}
