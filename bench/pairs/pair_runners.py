"""The training steps a pair-matrix worker runs: PyTorch in the worker's own process (eager or compiled), or a
job of tandemd (from the adaptor, or from a saved job spec).

Every runner has submit() -> a handle whose wait() blocks until that iteration is done and returns the
iteration's device seconds (tandemd's account) or None (PyTorch), and close(). A runner belongs to the worker's
main thread.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "traces"))  # job specs (trace_common, trace_worker)

import bench_common as bc  # noqa: E402
import pair_models  # noqa: E402
import torch  # noqa: E402


class NativeHandle:
    def __init__(self, event):
        self.event = event

    def wait(self):
        if self.event is not None:
            self.event.synchronize()
        return None


class NativeRunner:
    """A PyTorch training step on this process's GPU (or CPU), SGD(lr=0.01, momentum=0.9).

    Reference models: overhead.EagerStep, the batch copied in from pinned host memory at every step. Zoo models:
    bench_common.eager_step on one batch that stays on the device, as bench/models/zoo_gpu.py times them.
    compile_mode: the model (not the loss, backward or optimizer step, which stay as a user writes them) wrapped
    in torch.compile(model, mode=compile_mode); compilation happens in the first steps, so the caller runs
    `warmup_steps` of them before timing anything."""

    def __init__(self, name, small, device, compile_mode=None):
        model, loss_fn, make_batch = pair_models.build(name, small)
        batch = bc.make_batches(make_batch, 1)[0]
        self.device = device
        # cudagraph trees (mode reduce-overhead) record on the third call of a compiled function.
        self.warmup_steps = 3 if compile_mode else 2
        if pair_models.zoo_name(name) is None:
            from overhead import EagerStep
            self.step = EagerStep(model, loss_fn, batch, device)
            if compile_mode:
                self.step.model = torch.compile(self.step.model, mode=compile_mode)
        else:
            model = model.to(device)
            stepped = torch.compile(model, mode=compile_mode) if compile_mode else model
            self.step = bc.eager_step(stepped, loss_fn, bc.sgd(model.parameters()),
                                      tuple(t.to(device) for t in batch))

    def submit(self):
        self.step()
        if self.device == "cuda":
            event = torch.cuda.Event()
            event.record()
            return NativeHandle(event)
        return NativeHandle(None)

    def close(self):
        bc.sync(self.device)


class TandemHandle:
    def __init__(self, handle):
        self.handle = handle

    def wait(self):
        self.handle.result()
        return self.handle.run_seconds


class TandemRunner:
    """A tandem.torch.TrainingJob, fed `batches` in turn; close() ends the job."""

    warmup_steps = 2

    def __init__(self, job, batches):
        self.job, self.batches = job, batches
        self.i = 0

    @classmethod
    def from_capture(cls, captured, endpoint, name, hints):
        """A job registered from a capture this worker keeps ((capture, lowered, batches) of a reference model),
        so that the model is captured once per worker, not once per configuration."""
        import tandem.torch
        capture, lowered, batches = captured
        return cls(tandem.torch.TrainingJob(capture, lowered, endpoint, name, hints), batches)

    @classmethod
    def trained(cls, built, endpoint, name, hints):
        """A job as a user starts one: tandem.torch.train(model, loss_fn, SGD, batch, ...) on built = (model,
        loss_fn, batches), which captures the step again."""
        import tandem.torch
        model, loss_fn, batches = built
        job = tandem.torch.train(model, loss_fn, bc.sgd(model.parameters()), batches[0], endpoint=endpoint,
                                 name=name, priority=hints.get("priority", 0), device=hints.get("device"))
        return cls(job, batches)

    @property
    def registration(self):
        return self.job.registration

    def submit(self):
        h = self.job.step_async(*self.batches[self.i % len(self.batches)])
        self.i += 1
        return TandemHandle(h)

    def close(self):
        self.job.close()


class SpecHandle:
    def __init__(self, client, pending):
        self.client, self.pending = client, pending

    def wait(self):
        return self.client.wait(self.pending).run_seconds


class SpecRunner:
    """A training job registered with tandemd from a saved job spec (trace_common.save_job_spec): the same graph,
    weights, batches and optimizer scalars as a capture, captured once per suite run ($BENCH_SPEC_DIR) instead
    of once per worker process and stage."""

    warmup_steps = 2
    loaded = {}  # folder -> JobSpec, kept for the worker's later configurations

    def __init__(self, folder, endpoint, name, hints):
        import tandem
        import trace_worker
        if folder not in SpecRunner.loaded:
            SpecRunner.loaded[folder] = trace_worker.JobSpec(folder)
        self.spec = SpecRunner.loaded[folder]
        self.scalars = self.spec.scalars()
        self.client = tandem.Client(endpoint=endpoint, name=name)
        try:
            self.job_id, self.registration = self.client.register_job(
                {"name": name, "graph": self.spec.graph, "hints": hints}, self.spec.persistent)
        except Exception:
            self.client.close()
            raise
        self.i = 0

    def submit(self):
        feeds = self.scalars + self.spec.batches[self.i % len(self.spec.batches)]
        self.i += 1
        return SpecHandle(self.client, self.client.submit(self.job_id, feeds, [self.spec.loss_name], self.i))

    def close(self):
        self.client.close()


def spec_folder(model, small, log):
    """The saved spec of reference model `model` in $BENCH_SPEC_DIR (captured now when no process of this run
    has yet), or None without that variable or for a zoo model (specs hold reference models only)."""
    spec_dir = os.environ.get("BENCH_SPEC_DIR")
    if not spec_dir or pair_models.zoo_name(model) is not None:
        return None
    import trace_common
    folder, capture_s = trace_common.save_job_spec(spec_dir, model, small)
    log(f"{model}: spec {'cached' if capture_s is None else f'captured in {capture_s:.2f} s'}")
    return folder
