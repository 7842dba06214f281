"""Every zoo model (zoo/catalog.py) at its small size trains through tandemd: it registers with a CPU tandemd
and its first steps give PyTorch's losses (float32, relative 1e-4), SGD with momentum. Where PyTorch's own
float32 losses drift from the exact (float64) ones, as they do for small models whose batch norms see few values
per channel, Tandem must be as close to the float64 losses as PyTorch's float32 is.

One test per model. TANDEM_ZOO_SET=ci runs catalog.CI_NAMES (what CI trains; the default is the whole zoo);
TANDEM_ZOO_SHARD=k/n runs the k-th of n shares of the selection (ctest runs the shares side by side);
TANDEM_ZOO_ONLY=a,b runs only those models. TANDEM_ZOO_DAEMON_FLAGS adds flags to the daemon's command line
(e.g. --channels_last=true, which runs the GPU's layout pass on the CPU through copies). A model whose ops are
not all in Tandem's registry fails with a "MISSING OP" message naming the op and the module it came from.
"""

import copy
import os
import sys
import time
import unittest

import common  # noqa: F401  (paths)
from common import ModuleDaemon, missing_op_message, tandem, torch

sys.path.insert(0, common.SOURCE_ROOT)
from zoo import catalog  # noqa: E402

STEPS = 3
RTOL = 1e-4

_daemon = ModuleDaemon("--cpu_memory_mib=12288", *os.environ.get("TANDEM_ZOO_DAEMON_FLAGS", "").split())
setUpModule, tearDownModule = _daemon.start, _daemon.stop


def _selected():
    only = [n for n in os.environ.get("TANDEM_ZOO_ONLY", "").split(",") if n]
    if only:
        entries = [catalog.entry(n) for n in only]
    elif os.environ.get("TANDEM_ZOO_SET", "all") == "ci":
        entries = [catalog.entry(n) for n in catalog.CI_NAMES]
    else:
        entries = list(catalog.ENTRIES)
    shard = os.environ.get("TANDEM_ZOO_SHARD", "")
    if shard:
        k, n = (int(x) for x in shard.split("/"))
        entries = [e for i, e in enumerate(entries) if i % n == k]
    return entries


class ZooTest(unittest.TestCase):
    def train_both(self, entry):
        torch.manual_seed(0)
        model, loss_fn, make_batch = entry.build("small")
        initial = copy.deepcopy(model)
        reference = copy.deepcopy(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(STEPS)]
        start = time.perf_counter()
        try:
            job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=_daemon.endpoint,
                                     name=entry.name)
        except tandem.UnsupportedOpError as e:
            self.fail(missing_op_message(e))
        registered = time.perf_counter() - start
        with job:
            losses = [job.step(*batch) for batch in batches]
        trained = time.perf_counter() - start - registered
        ref_losses = _train(reference, loss_fn, ref_optimizer, batches)
        print(f"{entry.name}: registered in {registered:.1f} s, {STEPS} steps in {trained:.1f} s", file=sys.stderr)
        if all(abs(a - e) <= RTOL * abs(e) for a, e in zip(losses, ref_losses)):
            return
        # Small models whose batch norms see few values per channel amplify float32 rounding from step to
        # step: PyTorch's own float32 losses then drift from the exact (float64) ones. Tandem passes if it
        # is as close to the float64 losses as PyTorch's float32 is (within twice that distance, or RTOL).
        # One float32 run may land near the exact loss by chance, so the distance is the larger of two
        # float32 runs that round differently: PyTorch's default CPU kernels and its native ones (oneDNN off,
        # which changes the convolutions' summation order).
        exact = copy.deepcopy(initial).double()
        exact_optimizer = torch.optim.SGD(exact.parameters(), lr=0.01, momentum=0.9)
        exact_losses = _train(exact, loss_fn, exact_optimizer, [_double(b) for b in batches])
        native = copy.deepcopy(initial)
        native_optimizer = torch.optim.SGD(native.parameters(), lr=0.01, momentum=0.9)
        with torch.backends.mkldnn.flags(enabled=False):
            native_losses = _train(native, loss_fn, native_optimizer, batches)
        for i, (a, e32, n32, e64) in enumerate(zip(losses, ref_losses, native_losses, exact_losses)):
            bound = max(RTOL * abs(e64), 2 * abs(e32 - e64), 2 * abs(n32 - e64))
            self.assertLessEqual(abs(float(a) - e64), bound,
                                 f"step {i}: loss {float(a)} through tandemd; PyTorch {e32} in float32 ({n32} with "
                                 f"oneDNN off), {e64} in float64")


def _train(model, loss_fn, optimizer, batches):
    losses = []
    for batch in batches:  # (inputs..., target), as the capture reads it
        optimizer.zero_grad()
        loss = loss_fn(model(*batch[:-1]), batch[-1])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _double(batch):
    return tuple(t.double() if t.is_floating_point() else t for t in batch)


def _test(entry):
    def test(self):
        self.train_both(entry)
    return test


for _entry in _selected():
    setattr(ZooTest, f"test_{_entry.name}", _test(_entry))


if __name__ == "__main__":
    unittest.main()
