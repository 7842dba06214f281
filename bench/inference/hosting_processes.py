"""The process-per-model modes of the hosting benchmark: one PyTorch process per model (worker.py --backend
torch: eager on the GPU), side by side under the GPU's time-slicing (timeslice), or as clients of an MPS
control daemon that the mode starts and always stops, also on errors and signals (mps: at most
--mps_max_clients). How many processes fit the memory is estimated from the first ready ones
(hosting_memory.MemoryWatch).
"""

import tempfile

from hosting_mode import Mode, environment_without_mps, start_pool
from hosting_memory import MemoryWatch


class TimesliceMode(Mode):
    name = "timeslice"
    # Workers of two growth steps ahead start while a probe runs: a process needs 8-9 s to start, which the
    # budget could not afford serially.
    spawn_ahead = 2

    def __init__(self, args, state, result):
        super().__init__(args, state, result)
        self.watch = None

    def _start_environment(self):
        """Starts what the workers need besides themselves (here nothing) and returns their environment."""
        return environment_without_mps()

    def open(self, counts, idle):
        env = self._start_environment()
        self.watch = MemoryWatch(gpu=self.args.device == "cuda")
        if self.watch.base.get("gpu"):
            self.out["gpu_mem_used_before_mib"] = self.watch.base["gpu"][0]
        self.pool = start_pool("torch", self.args, self.state["specs"], counts, idle, env=env,
                               mps=self.name == "mps")
        return self.pool

    def caps(self):
        fits = self.watch.limit() if self.watch else None
        return [(fits[0], "memory", fits[1])] if fits else []

    def before_probe(self):
        self.watch.measure(self.pool.ready_pids(), quiet=not self.pool.preparing())

    def close(self):
        if self.watch is not None:
            self.out["memory"] = self.watch.summary()


class MpsMode(TimesliceMode):
    """The processes as MPS clients. `mps_class` is bench/pairs' Mps (a control daemon with private pipe and
    log folders: start(), env, log_tail(), stop()), handed in by hosting.py."""

    name = "mps"

    def __init__(self, args, state, result, mps_class):
        super().__init__(args, state, result)
        self.mps_class, self.mps = mps_class, None

    def fixed_cap(self):
        return self.args.mps_max_clients, "mps_client_limit"

    def _start_environment(self):
        self.mps = self.mps_class(self.args.mps_dir or tempfile.mkdtemp(prefix="tandem-bench-mps-"))
        self.mps.start()
        self.out["mps_max_clients"] = self.args.mps_max_clients
        return self.mps.env

    def close(self):
        super().close()
        if self.mps is not None:
            self.out["mps_control_log_tail"] = self.mps.log_tail()
            self.mps.stop()
