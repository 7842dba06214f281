"""Checking a lowered step against PyTorch, node by node.

check_lowering registers a copy of the job whose every intermediate tensor is
fetchable, runs one iteration on the example inputs, and compares each
fetched tensor with the value PyTorch computed for the same node while the
step was lowered. It returns the mismatches in graph order, so the first one
names the op (and module) whose Tandem kernel or lowering differs. It is a
diagnostic: it runs one extra iteration and moves every intermediate over
the wire.
"""

import copy

import torch

from tandem import client as tclient
from tandem.torch import dtypes


class Mismatch:
    def __init__(self, index, node, name, expected, actual, error):
        self.index, self.node, self.name = index, node, name
        self.expected, self.actual, self.error = expected, actual, error

    def __str__(self):
        label = self.node.get("label", "")
        return (f"node {self.index} ({self.node['op']}{' ' + repr(label) if label else ''}) output '{self.name}': "
                f"{self.error}")


def _compare(expected, actual, rtol, atol):
    if tuple(expected.shape) != tuple(actual.shape):
        return f"shape {list(actual.shape)}, PyTorch has {list(expected.shape)}"
    if expected.dtype != actual.dtype:
        return f"dtype {actual.dtype}, PyTorch has {expected.dtype}"
    if expected.numel() == 0:
        return None
    if expected.dtype == torch.bool or not expected.dtype.is_floating_point:
        if not torch.equal(expected, actual):
            return f"values differ in {(expected != actual).sum().item()} of {expected.numel()} elements"
        return None
    e, a = expected.double(), actual.double()
    diff = (e - a).abs()
    bad = diff > atol + rtol * e.abs()
    if bad.any():
        i = int(torch.argmax((diff - rtol * e.abs()).flatten()))
        return (f"{bad.sum().item()} of {e.numel()} elements differ; worst at flat index {i}: "
                f"{a.flatten()[i].item():.8g} vs PyTorch {e.flatten()[i].item():.8g}")
    return None


def check_lowering(lowered, feeds, endpoint=None, rtol=1e-4, atol=1e-5, limit=10):
    """Mismatches (at most `limit`) between Tandem and PyTorch for every intermediate of `lowered`, run on
    `feeds` ({feed name: tensor}, the values the lowering saw)."""
    graph = copy.deepcopy(lowered.graph)
    names = [out for node in graph["nodes"] for out in node["outputs"] if out in lowered.values]
    graph["fetches"] = list(dict.fromkeys(graph["fetches"] + names))
    request = {"name": "tandem-check", "graph": graph}
    persistent = [dtypes.host_tensor(n, t) for n, t in lowered.persistent]
    mismatches = []
    with tclient.Client(endpoint=endpoint, name="tandem-check") as client:
        job_id, _ = client.register_job(request, persistent)
        host = [dtypes.host_tensor(n, feeds[n]) for n, _, _ in lowered.feed_specs]
        result = client.wait(client.submit(job_id, host, names, 1))
        for index, node in enumerate(graph["nodes"]):
            for out in node["outputs"]:
                if out not in lowered.values or out not in result.tensors:
                    continue
                actual = dtypes.to_torch(result.tensors[out])
                error = _compare(lowered.values[out], actual, rtol, atol)
                if error:
                    mismatches.append(Mismatch(index, node, out, lowered.values[out], actual, error))
                    if len(mismatches) >= limit:
                        return mismatches
        client.close_job(job_id)
    return mismatches
