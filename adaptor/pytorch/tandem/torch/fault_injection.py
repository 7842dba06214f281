"""A job that faults its device on demand, for fault-recovery tests and benchmarks.

It needs a tandemd started with --test_faults (others refuse its graph). Its graph trains one tensor,
w <- test_fault(w, trigger) + x, so that it has a checkpoint and a resume token like any training job; its
client is a raw tandem.Client, which does not re-attach by itself. test_fault (docs/ops.md) faults the device
when its trigger is not 0: an illegal address on a GPU, the CPU backend's stand-in on the CPU.
"""

import time

import torch

from tandem import client as tclient
from tandem import errors
from tandem.torch import dtypes

INTERNAL = 13


class FaultyJob:
    """The faulting job, registered (with `token`: resumed from its checkpoint, as after a restart)."""

    NAME = "faulty"

    def __init__(self, endpoint, token=None, timeout=60.0, priority=0):
        feeds = [{"name": "x", "dtype": "FLOAT32", "shape": ["4"]}, {"name": "trigger", "dtype": "INT64", "shape": []}]
        nodes = [{"op": "test_fault", "inputs": ["w", "trigger"], "outputs": ["y"], "label": "the faulty kernel"},
                 {"op": "add.Tensor", "inputs": ["y", "x"], "outputs": ["w_next"]}]
        graph = {"feeds": feeds, "nodes": nodes, "fetches": ["y"], "updates": [{"persistent": "w", "value": "w_next"}]}
        request = {"name": self.NAME, "graph": graph, "hints": {"priority": priority}}
        if token:
            request["resume_token"] = token
        persistent = [dtypes.host_tensor("w", torch.zeros(4))]
        deadline = time.monotonic() + timeout
        while True:  # after a fault tandemd may still be restarting
            try:
                self.client = tclient.Client(endpoint=endpoint, connect_timeout=5)
                self.job_id, response = self.client.register_job(request, persistent)
                break
            except errors.DaemonUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.token = response.get("resume_token")  # base64, as in the registration's JSON

    def run(self, trigger):
        """One iteration; returns w as it was before it (w grows by 1 per iteration)."""
        feeds = [dtypes.host_tensor("x", torch.ones(4)),
                 dtypes.host_tensor("trigger", torch.tensor(trigger, dtype=torch.int64))]
        result = self.client.wait(self.client.submit(self.job_id, feeds, ["y"]))
        return dtypes.to_torch(result.tensors["y"])

    def close(self):
        self.client.close()


def _blamed(e):
    return isinstance(e, errors.IterationError) and e.code == INTERNAL and "faulted in this job's iteration" in str(e)


def fault_until_blamed(endpoint, job):
    """Faults the device with `job` (closed after) until tandemd blames it: returns 1 when it was blamed at once
    (it was alone on the device), 2 when the first fault blamed nobody (other jobs had work on the device) and
    the job, registered again with its token, faulted again alone. Raises anything else."""
    for attempt in (1, 2):
        try:
            job.run(1)
            raise AssertionError("test_fault did not fault the device")
        except (errors.IterationError, errors.DaemonUnavailableError) as e:
            job.close()
            if _blamed(e):
                return attempt
            if not isinstance(e, errors.DaemonUnavailableError) or attempt == 2:
                raise
        job = FaultyJob(endpoint, job.token)
    raise AssertionError("unreachable")
