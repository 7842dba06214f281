"""Shared helpers of the Python tests: paths, the tiny reference models, comparisons."""

import contextlib
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for path in (os.path.dirname(HERE), os.path.join(SOURCE_ROOT, "client", "python"),
             os.path.join(SOURCE_ROOT, "examples", "pytorch")):
    if path not in sys.path:
        sys.path.insert(0, path)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import models  # noqa: E402  (examples/pytorch/models.py)
import tandem  # noqa: E402
import tandem.torch  # noqa: E402,F401

RTOL = 1e-4


def missing_op_message(error):
    return (f"MISSING OP: Tandem's registry has no '{error.op}' (from {error.label}); this test passes once the op "
            f"and its CPU kernel exist. Daemon's answer: {error}")


def relative_error(actual, expected):
    """max |actual - expected| / max |expected| over a tensor (exact match for integer tensors)."""
    a, e = actual.double(), expected.double()
    scale = e.abs().max().item() if e.numel() else 0.0
    diff = (a - e).abs().max().item() if e.numel() else 0.0
    return diff / scale if scale > 0 else diff


def eager_losses(model, loss_fn, optimizer, batches, scheduler=None):
    """Trains `model` in PyTorch eager, one step per (x, y) batch; returns the losses."""
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        losses.append(loss.item())
    return losses


def assert_losses_close(test, losses, ref_losses, rtol):
    """Each of Tandem's losses within `rtol` of PyTorch's at the same step."""
    test.assertEqual(len(losses), len(ref_losses))
    for i, (a, e) in enumerate(zip(losses, ref_losses)):
        a = float(a)
        test.assertLessEqual(abs(a - e), rtol * abs(e), f"step {i}: loss {a} through tandemd, {e} in PyTorch")


def assert_trains_like_eager(test, build, make_optimizer, x, y, endpoint, name, steps, rtol):
    """Trains build() `steps` SGD steps on the batch (x, y) through tandemd at `endpoint` and a second build() in
    PyTorch eager from the same seed (cross entropy): every loss and every trained tensor (the batch-norm step
    counters aside) within `rtol`. Returns Tandem's losses."""
    torch.manual_seed(0)
    model = build()
    job = tandem.torch.train(model, F.cross_entropy, make_optimizer(model.parameters()), (x, y),
                             endpoint=endpoint, name=name)
    with job:
        losses = [float(job.step(x, y)) for _ in range(steps)]
        trained = job.state_dict()
    torch.manual_seed(0)
    ref = build()
    ref_losses = eager_losses(ref, F.cross_entropy, make_optimizer(ref.parameters()), [(x, y)] * steps)
    assert_losses_close(test, losses, ref_losses, rtol)
    for key, value in ref.state_dict().items():
        if key.endswith("num_batches_tracked"):
            continue
        diff = (trained[key].double() - value.double()).norm().item()
        test.assertLessEqual(diff, rtol * value.double().norm().item() + 1e-6, key)
    return losses


def run_graph(endpoint, name, nodes, feeds, fetches):
    """Registers a hand-built graph of `nodes` (IR dicts) over `feeds` ({name: tensor}, all fed), runs one
    iteration and closes the job; returns {fetch name: tensor} and {fetch name: the result's dtype code}."""
    from tandem.torch import dtypes

    graph = {"feeds": [{"name": n, "dtype": dtypes.name_of(t.dtype), "shape": [str(s) for s in t.shape]}
                       for n, t in feeds.items()],
             "nodes": nodes, "fetches": list(fetches), "updates": []}
    with tandem.Client(endpoint=endpoint) as c:
        job_id, _ = c.register_job({"name": name, "graph": graph, "hints": {}})
        ticket = c.submit(job_id, [dtypes.host_tensor(n, t) for n, t in feeds.items()], graph["fetches"])
        result = c.wait(ticket).tensors
        c.close_job(job_id)
    return ({n: dtypes.to_torch(result[n]) for n in fetches}, {n: result[n].dtype for n in fetches})


@contextlib.contextmanager
def fused_rnn_setting(value):
    """TANDEM_FUSED_RNN set to `value` ("0": off; None: unset, i.e. on where available) inside, restored after."""
    saved = os.environ.get("TANDEM_FUSED_RNN")
    if value is None:
        os.environ.pop("TANDEM_FUSED_RNN", None)
    else:
        os.environ["TANDEM_FUSED_RNN"] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TANDEM_FUSED_RNN", None)
        else:
            os.environ["TANDEM_FUSED_RNN"] = saved


class ModuleDaemon:
    """One CPU tandemd shared by a test module's tests: started by the module's setUpModule and stopped by its
    tearDownModule, as in

        _daemon = ModuleDaemon()
        setUpModule, tearDownModule = _daemon.start, _daemon.stop

    Tests reach it through `endpoint` (valid between the two)."""

    def __init__(self, *flags):
        self._flags = flags
        self._daemon = None

    def start(self):
        from daemon import Daemon  # tests/daemon.py, imported only by modules that start one

        self._daemon = Daemon(*self._flags).start()

    def stop(self):
        if self._daemon is not None:
            self._daemon.stop()
            self._daemon = None

    @property
    def endpoint(self):
        if self._daemon is None:
            raise RuntimeError("the module's tandemd is not running (setUpModule starts it)")
        return self._daemon.endpoint


class EquivalenceMixin:
    """assert helpers for comparing a Tandem job with the same steps in PyTorch."""

    def run_both(self, endpoint, model_name, make_optimizer, steps=20, scheduler=None, pipelined=1):
        """Trains a tiny model `steps` steps through tandemd and in PyTorch from the same initial state;
        returns (tandem losses, pytorch losses, job state_dict, reference model, job, reference optimizer)."""
        torch.manual_seed(0)
        model, loss_fn, make_batch = models.tiny(model_name)
        reference = copy.deepcopy(model)
        optimizer = make_optimizer(model.parameters())
        ref_optimizer = make_optimizer(reference.parameters())
        g = torch.Generator().manual_seed(1)
        batches = [make_batch(g) for _ in range(steps)]
        sched = scheduler(optimizer) if scheduler else None
        ref_sched = scheduler(ref_optimizer) if scheduler else None
        try:
            job = tandem.torch.train(model, loss_fn, optimizer, batches[0], endpoint=endpoint, name=model_name)
        except tandem.UnsupportedOpError as e:
            self.fail(missing_op_message(e))
        losses, handles = [], []
        with job:
            for x, y in batches:
                handles.append(job.step_async(x, y))
                if sched:
                    sched.step()
                if len(handles) >= pipelined:
                    losses.append(handles.pop(0).result())
            losses += [h.result() for h in handles]
            trained = job.state_dict()
            states = {}
            for name, p in reference.named_parameters():
                for state_name in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                    if state_name in job._plan.state_names:
                        states[(name, state_name)] = job.read(f"optim/{name}/{state_name}")
        ref_losses = eager_losses(reference, loss_fn, ref_optimizer, batches, ref_sched)
        self.assertEqual(len(losses), steps)
        assert_losses_close(self, losses, ref_losses, RTOL)
        expected = reference.state_dict()
        self.assertEqual(sorted(trained), sorted(expected))
        for key, value in expected.items():
            self.assertIsInstance(trained[key], torch.Tensor)
            self.assertEqual(trained[key].dtype, value.dtype, key)
            self.assertEqual(tuple(trained[key].shape), tuple(value.shape), key)
            err = relative_error(trained[key], value)
            self.assertLessEqual(err, RTOL, f"{key}: relative error {err:.3g} after {steps} steps")
        ref_params = dict(reference.named_parameters())
        for (name, state_name), value in states.items():
            err = relative_error(value, ref_optimizer.state[ref_params[name]][state_name])
            self.assertLessEqual(err, RTOL * 10, f"optimizer state {name}/{state_name}: relative error {err:.3g}")
        return losses, ref_losses
