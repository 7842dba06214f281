"""TrainingJob and ServedModel: a captured step registered with tandemd.

A TrainingJob owns a Client (one session) and one registered job. step()
sends one iteration (the batch plus the optimizer's scalar feeds) and waits
for its loss (and, asked with fetch=, the step's named outputs);
step_async() returns at once with a handle, so several iterations can be in
flight (they run in the order sent). The weights and the optimizer's state
stay in the daemon: state_dict(), optimizer_state_dict() and checkpoint()
read them in PyTorch's formats, load_into() copies them into a model and an
optimizer. Closing the job (or leaving its `with` block) ends the session,
which frees the job's memory in the daemon; it reads nothing back.

Re-attaching: when tandemd goes away and comes back (it restarts by itself
after a device fault; systemd restarts it after a crash or an upgrade), a job
with a resume token (tandemd has a state_dir) re-registers with it within
reattach_timeout seconds and continues from its last checkpoint: the steps
in flight are sent again, and the steps done after the checkpoint are lost
(job.recoveries says how many). A served model registers again with its
weights.

Thread-safety: step()/step_async() may be called from one thread at a time
(they advance the optimizer's step count); handles may be waited on from any
thread.
"""

import base64
import collections
import os
import threading
import time
import warnings
import weakref

import torch
from torch.utils._pytree import tree_unflatten

from tandem import client as tclient
from tandem import errors
from tandem.torch import dtypes
from tandem.torch.lower import SEED_FEED


def _check_batch(what, tensors, expected, labels=None, declared=None):
    """BatchError unless `tensors` match `expected` [(feed name, dtype, shape)] one for one; `labels` name the
    tensors in messages (default: "argument i"); `declared`: every batch shape the job has a graph for."""
    if len(tensors) != len(expected):
        raise errors.BatchError(f"{what} takes {len(expected)} tensors (as in the example), got {len(tensors)}")
    for i, (t, (name, dtype, shape)) in enumerate(zip(tensors, expected)):
        label = labels[i] if labels else f"argument {i}"
        if not isinstance(t, torch.Tensor):
            raise errors.BatchError(f"{what}: {label} is a {type(t).__name__}, not a torch.Tensor")
        if t.dtype != dtype or tuple(t.shape) != shape:
            if declared:
                shapes = "; ".join(", ".join(str(s) for s in batch) for batch in declared)
                raise errors.BatchError(
                    f"{what}: {label} is {t.dtype}{list(t.shape)}, a batch shape the job has no graph for. Its "
                    f"graphs take these batch shapes (one per graph, inputs then targets): {shapes}. Declare "
                    "others with train(..., other_shapes=[example, ...]).")
            raise errors.BatchError(
                f"{what}: {label} is {t.dtype}{list(t.shape)} but the job was captured with "
                f"{dtype}{list(shape)}. A Tandem job runs one static graph per batch shape: pass batches of the "
                "example's shape and dtype (drop or pad a short last batch, e.g. DataLoader(drop_last=True)), or "
                "declare the other shapes with train(..., other_shapes=[example, ...]).")


def reattach_timeout(value=None):
    """Seconds a job waits for tandemd to come back before giving up: `value`, else $TANDEM_REATTACH_TIMEOUT,
    else 60; 0: never re-attach."""
    if value is None:
        value = os.environ.get("TANDEM_REATTACH_TIMEOUT", "60")
    return max(0.0, float(value))


class _Session:
    """A client session and one job in it."""

    def __init__(self, endpoint, name, request, persistent, connect_timeout=30.0):
        self.client = tclient.Client(endpoint=endpoint, name=name, connect_timeout=connect_timeout)
        try:
            self.job_id, self.response = self.client.register_job(request, persistent)
        except Exception:
            self.client.close()
            raise
        self.closed = False

    def check_open(self):
        if self.closed:
            raise errors.JobClosedError("the job is closed; create a new one with tandem.torch.train()/serve()")

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.client.close_job(self.job_id)
            except errors.TandemError:
                pass  # the daemon may be gone; ending the session frees the job anyway
        self.client.close()  # an abandoned session's too

    def abandon(self):
        """Marks a session whose daemon went away as done with. Its client stays open (close() closes it), so
        that another thread still waiting on it gets its answer, not a closed client."""
        self.closed = True


def _register_again(endpoint, name, request, persistent, timeout):
    """A new _Session of the job once tandemd answers again (it may be stopping still, or not started yet),
    trying for `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _Session(endpoint, name, request, persistent,
                            connect_timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        except errors.DaemonUnavailableError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


Recovery = collections.namedtuple("Recovery", ["resumed_iterations", "lost", "replayed", "pause_seconds"])
Recovery.__doc__ = """One re-attach of a training job after tandemd went away and came back (TrainingJob.recoveries):
the iterations its checkpoint had (the job continues from there), the steps done after it whose updates were
lost, the steps that were in flight and were sent again, and the seconds from noticing to re-registered."""


StepResult = collections.namedtuple("StepResult", ["loss", "outputs"])
StepResult.__doc__ = """What step(..., fetch=...) returns: the loss (a float) and the named outputs asked for
({name: torch tensor, or the pytree of tensors the output function returned})."""


class StepHandle:
    """One submitted iteration. result() waits for it and returns its loss as a float, or a StepResult when it
    was submitted with fetch=."""

    def __init__(self, job, flat, shape, fetch):
        self._job = job
        # What the step was sent with, to send it again after a re-attach.
        self._flat, self._shape, self._fetch = flat, shape, fetch
        self._ticket = None
        self.iteration = None
        self._loss_name = None
        self._outputs = None  # None, or {name: (IR fetch names, pytree spec)} to fetch
        self._generation = None  # the job's session it was sent in
        self._result = None
        self._error = None
        self.run_seconds = None
        self.queue_seconds = None

    def done(self):
        return self._result is not None or self._error is not None

    def result(self):
        while self._result is None:
            if self._error is not None:
                raise self._error
            job = self._job
            with job._reattach_lock:  # the session and ticket of one generation (a re-attach changes both)
                client, ticket, generation = job._session.client, self._ticket, self._generation
            try:
                result = client.wait(ticket)
            except errors.DaemonUnavailableError as e:
                job._reattach(generation, e)  # sends this step again, or raises
                continue
            except errors.IterationError:
                if self._generation != generation:
                    continue  # sent again by a re-attach meanwhile
                # The daemon applied none of its updates: the optimizer's step count goes back too, unless
                # later steps were sent on top of it (they already count it).
                if job._iteration == self.iteration:
                    job._undo_step()
                job._unresolved.discard(self)
                raise
            self._take(result)
        return self._result

    def _take(self, result):
        """Keeps the result of the iteration (a tclient.Result)."""
        loss = float(dtypes.to_torch(result.tensors[self._loss_name]))
        if self._outputs is None:
            self._result = loss
        else:
            outputs = {}
            for name, (fetches, spec) in self._outputs.items():
                outputs[name] = tree_unflatten([dtypes.to_torch(result.tensors[f]) for f in fetches], spec)
            self._result = StepResult(loss, outputs)
        self.run_seconds = result.run_seconds
        self.queue_seconds = result.queue_seconds
        self._job._unresolved.discard(self)


class _Seeds:
    """The per-iteration seed of a job whose graph draws random numbers (dropout, bernoulli, rand): a base drawn
    from torch's default generator when the job is made (so torch.manual_seed makes runs repeatable), plus the
    iteration number, so that every iteration draws fresh numbers."""

    def __init__(self, feed_specs):
        self._wanted = SEED_FEED in feed_specs
        self._base = int(torch.randint(1, 2 ** 62, (), dtype=torch.int64)) if self._wanted else 0

    def feeds(self, iteration):
        if not self._wanted:
            return []
        return [dtypes.host_tensor(SEED_FEED, torch.tensor(self._base + iteration, dtype=torch.int64))]


class _ShapeVariant:
    """A training step for another batch shape (train(other_shapes=...)): a graph variant of the job."""

    def __init__(self, name, capture, lowered):
        self.name, self.capture, self.lowered = name, capture, lowered
        feed_specs = {n: (dt, shape) for n, dt, shape in lowered.feed_specs}
        self.batch_specs = [(n, *feed_specs[n]) for n in capture.batch_names]
        self.loss_name = lowered.fetch_names["loss"]

    def matches(self, flat):
        return len(flat) == len(self.batch_specs) and all(
            isinstance(t, torch.Tensor) and t.dtype == dt and tuple(t.shape) == shape
            for t, (_, dt, shape) in zip(flat, self.batch_specs))


class _EvalVariant:
    """The model's eval-mode forward pass (train(evaluate=...)): a graph variant of the job that reads its live
    weights."""

    name = "eval"

    def __init__(self, capture, lowered):
        self.capture, self.lowered = capture, lowered
        feed_specs = {n: (dt, shape) for n, dt, shape in lowered.feed_specs}
        self.input_specs = [(n, *feed_specs[n]) for n in capture.input_names]
        self.fetches = [lowered.fetch_names[o.name] for o in capture.outputs]
        self.seeds = _Seeds(feed_specs)


def _same_persistent(lowered, other, what):
    """CaptureError unless every persistent tensor `other` reads is one of the training step's."""
    missing = {n for n, _ in other.persistent} - {n for n, _ in lowered.persistent}
    if missing:
        raise errors.CaptureError(f"{what} reads tensors the training step does not have: {sorted(missing)}")


class TrainingJob:
    """A model's training step, registered with tandemd. Build it with tandem.torch.train()."""

    def __init__(self, capture, lowered, endpoint, name, hints, shape_variants=(), eval_variant=None, resume=None,
                 reattach=None):
        self._capture = capture
        self._plan = capture.plan
        self._lowered = lowered
        self._loss_name = lowered.fetch_names["loss"]
        self._scalar_names = self._plan.scalar_names()
        feed_specs = {n: (dt, shape) for n, dt, shape in lowered.feed_specs}
        self._layout = capture.batch_layout
        self._batch_specs = [(n, *feed_specs[n]) for n in capture.batch_names]
        # name -> (IR names of its leaves, pytree spec)
        self._outputs = {name: ([lowered.fetch_names[k] for k in keys], spec)
                         for name, (keys, spec) in capture.output_specs.items()}
        self._seeds = _Seeds(feed_specs)
        # Other batch shapes and the evaluation pass: graph variants of this job over its one set of weights
        # (RegisterJobRequest.variants), registered with it, so that none holds a copy.
        self._shape_variants = list(shape_variants)
        self._eval = eval_variant
        variants = [(v.name, v.lowered, "the step for batch shape " + v.name) for v in self._shape_variants]
        if eval_variant is not None:
            variants.append((eval_variant.name, eval_variant.lowered, "the evaluation pass"))
        for _, other, what in variants:
            _same_persistent(lowered, other, what)
        request = {"name": name, "graph": lowered.graph, "hints": hints}
        if variants:
            request["variants"] = [{"name": n, "graph": other.graph} for n, other, _ in variants]
        # Kept to register again after tandemd went away (_reattach).
        self._endpoint, self._request = endpoint, dict(request)
        self._reattach_timeout = reattach_timeout(reattach)
        if resume is not None:
            token = bytes.fromhex(resume) if isinstance(resume, str) else bytes(resume)
            request["resume_token"] = base64.b64encode(token).decode()
        self._session = _Session(endpoint, name, request, self._host_persistent())
        self._generation = 0  # sessions since the first (one per re-attach)
        self._unresolved = weakref.WeakSet()  # handles sent and not answered
        # Held by a re-attach and by whatever reads or sends with the session (re-entered by a re-attach's sends).
        self._reattach_lock = threading.RLock()
        self._abandoned = []  # sessions of daemons that went away, closed with the job
        self.recoveries = []  # a Recovery per re-attach
        self._iteration = 0
        self.name = name
        # Resumed from the daemon's checkpoint: the optimizer's step counts, and the seeds of the steps to
        # come, continue from the iterations it had done.
        for _ in range(self.resumed_iterations):
            self._plan.scalar_values(advance=True)
        self._iteration = self.resumed_iterations

    def _host_persistent(self):
        """The job's first persistent values as HostTensors, made when needed: the model's tensors (the job
        trains the daemon's copies, so they keep their first values), on the host."""
        return [dtypes.host_tensor(n, t) for n, t in self._lowered.persistent]

    @property
    def resume_token(self):
        """The secret (bytes) that resumes this job from the daemon's checkpoint after the daemon or this
        process restarts: train(..., name=<the same name>, resume=token). None when the daemon keeps no
        checkpoints (no state_dir) or the job has no name of its own."""
        token = self._session.response.get("resume_token")
        return base64.b64decode(token) if token else None

    @property
    def resumed_iterations(self):
        """The iterations the checkpoint this job resumed from had completed (0 for a fresh job): the
        number of batches to skip in the data."""
        return int(self._session.response.get("resumed_iterations", 0))

    @property
    def job_id(self):
        return self._session.job_id

    @property
    def registration(self):
        """The daemon's RegisterJobResponse (device, lane, persistent bytes, planned ephemeral peak)."""
        return self._session.response

    @property
    def graph(self):
        """The job's iteration graph as sent (a tandem.v1.Graph dict)."""
        return self._lowered.graph

    @property
    def output_names(self):
        """The names of the step's outputs beyond the loss (train(outputs=...))."""
        return list(self._outputs)

    def _declared_shapes(self):
        shapes = [[list(s) for _, _, s in self._batch_specs]]
        shapes += [[list(s) for _, _, s in v.batch_specs] for v in self._shape_variants]
        return shapes

    def _fetched_outputs(self, fetch, shape=None):
        if fetch is None or fetch is False:
            return None
        if shape is not None:  # the same outputs, under that graph's names
            outputs = {name: ([shape.lowered.fetch_names[k] for k in keys], spec)
                       for name, (keys, spec) in shape.capture.output_specs.items()}
            wanted = self._fetched_outputs(fetch)
            return {n: outputs[n] for n in wanted}
        if fetch is True:
            names = list(self._outputs)
        elif isinstance(fetch, str):
            names = [fetch]
        else:
            names = list(fetch)
        unknown = [n for n in names if n not in self._outputs]
        if unknown:
            raise errors.TandemError(f"step(fetch=...): no output named {unknown}; the job's outputs are "
                                     f"{list(self._outputs)} (declare them with train(..., outputs=...))")
        return {n: self._outputs[n] for n in names}

    def step_async(self, *batch, fetch=False):
        """Sends one iteration; returns a StepHandle whose result() is what step() returns. `batch` as for
        step()."""
        self._session.check_open()
        flat = self._layout.flatten_step("step()", batch)
        shape = next((v for v in self._shape_variants if v.matches(flat)), None)
        if shape is None and self._shape_variants:
            _check_batch("step()", flat, self._batch_specs, self._layout.labels, self._declared_shapes())
        elif shape is None:
            _check_batch("step()", flat, self._batch_specs, self._layout.labels)
        handle = StepHandle(self, flat, shape, fetch)
        with self._reattach_lock:
            self._send(handle)
        return handle

    def _send(self, handle):
        """Sends the handle's step as the job's next iteration (its scalars and seed are the next
        iteration's)."""
        flat, shape = handle._flat, handle._shape
        variant, batch_specs, loss_name = "", self._batch_specs, self._loss_name
        if shape is not None:
            variant, batch_specs, loss_name = shape.name, shape.batch_specs, shape.loss_name
        outputs = self._fetched_outputs(handle._fetch, shape)
        fetches = [loss_name]
        for names, _ in (outputs or {}).values():
            fetches += [n for n in names if n not in fetches]
        scalars = self._plan.scalar_values(advance=False)
        feeds = [dtypes.host_tensor(n, torch.tensor(v, dtype=self._plan.scalar_dtype()))
                 for n, v in zip(self._scalar_names, scalars)]
        feeds += [dtypes.host_tensor(spec[0], t) for spec, t in zip(batch_specs, flat)]
        feeds += self._seeds.feeds(self._iteration)
        self._iteration += 1
        ticket = self._session.client.submit(self.job_id, feeds, fetches, self._iteration, variant)
        self._plan.scalar_values(advance=True)
        # Learning-rate schedulers check that the optimizer stepped before them; it did, in the daemon.
        optimizer = self._plan.optimizer
        if hasattr(optimizer, "_step_count"):
            optimizer._step_count += 1
        handle._ticket, handle.iteration, handle._generation = ticket, self._iteration, self._generation
        handle._loss_name, handle._outputs = loss_name, outputs
        self._unresolved.add(handle)

    def _reattach(self, generation, gone):
        """tandemd went away while the session `generation` waited on it: registers the job again with its
        resume token once tandemd answers (within the re-attach timeout), rolls the optimizer's step count and
        the seeds back to the checkpoint's iteration and sends the steps in flight again. Another thread may
        have done it already (then nothing happens). Raises DaemonUnavailableError when the job cannot
        re-attach (no checkpoints, re-attach off, or tandemd not back in time); `gone` is the error that said
        tandemd went away."""
        with self._reattach_lock:
            if generation != self._generation:
                return
            started = time.monotonic()
            token = self.resume_token
            if token is None or self._reattach_timeout <= 0:
                why = ("re-attaching is off (reattach_timeout 0)" if token is not None else
                       "the job has no checkpoint to continue from (start tandemd with a state_dir, and give the "
                       "job a name no other job of yours uses)")
                raise errors.DaemonUnavailableError(f"{gone} (job '{self.name}' cannot re-attach: {why})",
                                                    errors.UNAVAILABLE) from gone
            old = self._session
            # Replies that reached this process before tandemd went away still count.
            waiting = []
            for handle in sorted(self._unresolved, key=lambda h: h.iteration):
                if handle._generation != generation or handle.done():
                    continue
                try:
                    handle._take(old.client.wait(handle._ticket))
                except errors.DaemonUnavailableError:
                    waiting.append(handle)
                except errors.IterationError as e:
                    handle._error = e
            old.abandon()
            self._abandoned.append(old)
            request = dict(self._request, resume_token=base64.b64encode(token).decode())
            deadline = started + self._reattach_timeout
            try:
                self._session = _register_again(self._endpoint, self.name, request, self._host_persistent(),
                                                self._reattach_timeout)
            except errors.RegistrationError as e:
                if e.code != errors.NOT_FOUND:
                    raise
                # No checkpoint written yet: the job starts again from its first weights.
                self._session = _register_again(self._endpoint, self.name, self._request, self._host_persistent(),
                                                max(0.0, deadline - time.monotonic()))
            resumed = self.resumed_iterations
            first_waiting = waiting[0].iteration if waiting else self._iteration + 1
            lost = max(0, first_waiting - 1 - resumed)
            for _ in range(self._iteration - resumed):
                self._undo_step()
            self._iteration = resumed
            self._generation += 1
            replayed = 0
            for handle in waiting:
                if handle.iteration <= resumed:  # in the checkpoint, its loss gone with the daemon
                    handle._error = errors.IterationError(
                        f"step {handle.iteration}: its loss was lost when tandemd went away, but its update is in "
                        "the checkpoint the job continued from", errors.UNAVAILABLE)
                    continue
                self._send(handle)
                replayed += 1
            recovery = Recovery(resumed, lost, replayed, time.monotonic() - started)
            self.recoveries.append(recovery)
            warnings.warn(f"tandemd went away; job '{self.name}' re-attached after {recovery.pause_seconds:.2f} s "
                          f"and continues from its checkpoint of step {resumed}: {lost} step(s) after it lost, "
                          f"{replayed} sent again", RuntimeWarning, stacklevel=3)

    def _call(self, fn):
        """fn(client), re-attaching once when tandemd went away."""
        generation = self._generation
        try:
            return fn(self._session.client)
        except errors.DaemonUnavailableError as e:
            self._reattach(generation, e)
            return fn(self._session.client)

    def _undo_step(self):
        """The host-side counts of a step that failed in the daemon, taken back (Adam's bias corrections,
        learning-rate schedulers' view of the optimizer)."""
        for g in self._plan.groups:
            g.steps -= 1
        self._plan.iterations -= 1
        optimizer = self._plan.optimizer
        if hasattr(optimizer, "_step_count"):
            optimizer._step_count -= 1

    def step(self, *batch, fetch=False):
        """Runs one training iteration (one optimizer step) in the daemon and returns its loss (a float).

        batch: the tensors as in the example (inputs, then targets), or one tandem.torch.Batch of the
        example's structure (needed when the model takes keyword inputs); shapes and dtypes must be the
        example's (else BatchError). With train(accumulate=k) the batch holds the k micro-batches along dim 0
        and the loss is the sum of their loss_i / k. fetch: True (every named output), a name or a list of
        names: returns a StepResult(loss, outputs) with those of the step's outputs (train(outputs=...)) as
        torch tensors."""
        return self.step_async(*batch, fetch=fetch).result()

    def evaluate(self, *inputs):
        """The model's eval-mode forward pass on `inputs` (of the shapes given as train(evaluate=...)), run in
        the daemon on the job's live weights (after every step sent so far; nothing is copied): torch tensors
        structured like the model's output."""
        self._session.check_open()
        if self._eval is None:
            raise errors.TandemError("this job has no evaluation pass: give train(..., evaluate=example_input)")
        _check_batch("evaluate()", inputs, self._eval.input_specs)
        feeds = [dtypes.host_tensor(spec[0], t) for spec, t in zip(self._eval.input_specs, inputs)]
        feeds += self._eval.seeds.feeds(self._iteration)
        result = self._call(lambda client: client.wait(
            client.submit(self.job_id, feeds, self._eval.fetches, self._iteration, "eval")))
        leaves = [dtypes.to_torch(result.tensors[f]) for f in self._eval.fetches]
        return tree_unflatten(leaves, self._eval.capture.out_spec)

    def read(self, name):
        """A persistent tensor of the job (a parameter, buffer, or optimizer state such as
        "optim/fc.weight/exp_avg") as a torch tensor, after every iteration sent so far."""
        self._session.check_open()
        return dtypes.to_torch(self._call(lambda client: client.read_tensor(self.job_id, name)))

    def state_dict(self):
        """The model's state_dict() as trained in the daemon: its keys, in its order, the parameters and
        buffers read from the daemon as CPU tensors (tied names share one tensor; an entry that is no
        parameter or buffer, such as extra state, as it was at capture)."""
        read = {}
        out = {}
        for key, source, value in self._capture.state_dict_sources:
            if source is None:
                out[key] = value
                continue
            if source not in read:
                read[source] = self.read(source)
            out[key] = read[source]
        return out

    def optimizer_state_dict(self):
        """The optimizer's state_dict() as the job has it after every iteration sent so far, in torch.optim's
        format: "state" keyed by parameter index (momentum_buffer; step, exp_avg, exp_avg_sq, max_exp_avg_sq,
        each tensor on its parameter's device, step in the optimizer's own convention) and "param_groups" with
        the optimizer's current hyper-parameters (a scheduler's lr included). optimizer.load_state_dict() takes
        it; a job made from that optimizer continues the run."""
        plan = self._plan
        read_step = None
        if plan.device_steps:  # loss scaling: the steps taken, skipped ones not counted, are the job's
            def read_step(group):
                return self.read(f"optim/group{group}/step").item()
        return plan.state_dict(lambda i, name: self.read(f"optim/{plan.trainable[i][0]}/{name}"), read_step)

    def grad_scaler_state_dict(self):
        """The loss scaler's state after every iteration sent so far, in GradScaler.state_dict()'s format (scale,
        growth settings, growth tracker), for GradScaler.load_state_dict; None when the job scales no loss."""
        scaling = self._capture.amp.scaling
        if scaling is None:
            return None
        scale, tracker = (self.read(name).reshape(-1)[0].item() for name in scaling.NAMES)
        return scaling.state_dict(scale, tracker)

    def checkpoint(self):
        """{"model": state_dict(), "optimizer": optimizer_state_dict()}, plus "scaler":
        grad_scaler_state_dict() when the job scales its loss, for torch.save. Resuming: load them into a model,
        an optimizer and a GradScaler (load_state_dict) and train() them; learning-rate schedulers keep their
        own state_dict()."""
        out = {"model": self.state_dict(), "optimizer": self.optimizer_state_dict()}
        scaler = self.grad_scaler_state_dict()
        if scaler is not None:
            out["scaler"] = scaler
        return out

    def load_into(self, model, optimizer=None, scaler=None):
        """Copies the trained parameters and buffers into `model` and, given an optimizer over its parameters
        (the job's own or another of the same layout), the optimizer's state (optimizer_state_dict()), and
        given a GradScaler, the loss scaler's state. Returns `model`."""
        model.load_state_dict(self.state_dict(), strict=False)
        if optimizer is not None:
            optimizer.load_state_dict(self.optimizer_state_dict())
        state = self.grad_scaler_state_dict()
        if scaler is not None and state is not None and scaler.is_enabled():
            scaler.load_state_dict(state)
        return model

    def close(self):
        """Closes the job and the session (frees its memory in the daemon). Safe to call twice."""
        for old in self._abandoned:
            old.close()
        self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def weights_for(capture, lowered, model):
    """lowered.persistent with every parameter and buffer replaced by `model`'s tensor of the same name: the
    initial persistent tensors of a job that runs the captured graph with `model`'s weights. Constants of the
    graph (persistent tensors that are not parameters or buffers) are kept. Raises CaptureError when `model`
    is not of the captured architecture: a parameter or buffer missing, extra, or of another shape or dtype."""
    captured = {i.name: i.tensor for i in capture.inputs if i.kind == "persistent"}
    own = dict(model.named_parameters())
    own.update(model.named_buffers())
    missing = sorted(set(captured) - set(own))
    extra = sorted(set(own) - set(captured))
    if missing or extra:
        raise errors.CaptureError(
            f"the model is not of the captured architecture: missing {missing[:5]}, not in the capture "
            f"{extra[:5]}; capture this model with tandem.torch.capture_serving() instead")
    for name, tensor in own.items():
        want = captured[name]
        if tensor.dtype != want.dtype or tuple(tensor.shape) != tuple(want.shape):
            raise errors.CaptureError(
                f"the model's '{name}' is {tensor.dtype}{list(tensor.shape)} but the capture's is "
                f"{want.dtype}{list(want.shape)}; capture this model with tandem.torch.capture_serving() instead")
    return [(n, own[n].detach() if n in own else t) for n, t in lowered.persistent]


class ServedModel:
    """A model's forward pass registered with tandemd; call it like the model. Build it with
    tandem.torch.serve() (or serve_lowered(), which reuses one capture for many models of one architecture).
    `persistent` ([(name, tensor)], default lowered.persistent) are the job's initial persistent tensors; the
    capture and the lowered graph are only read, so any number of ServedModels may share them."""

    def __init__(self, capture, lowered, endpoint, name, hints, persistent=None, reattach=None):
        from torch.utils._pytree import tree_unflatten
        self._unflatten = tree_unflatten
        self._capture = capture
        self._lowered = lowered
        feed_specs = {n: (dt, shape) for n, dt, shape in lowered.feed_specs}
        self._input_specs = [(n, *feed_specs[n]) for n in capture.input_names]
        self._seeds = _Seeds(feed_specs)
        self._fetches = [lowered.fetch_names[o.name] for o in capture.outputs]
        request = {"name": name, "graph": lowered.graph, "hints": hints}
        chosen = lowered.persistent if persistent is None else persistent
        self._session = _Session(endpoint, name, request, [dtypes.host_tensor(n, t) for n, t in chosen])
        # Kept to register again, with the same weights, after tandemd went away.
        self._register_args = (endpoint, name, request, chosen)
        self._reattach_timeout = reattach_timeout(reattach)
        self._reattach_lock = threading.Lock()
        self._abandoned = []
        self._iteration = 0
        self.name = name
        # The daemon's account of the last call: seconds waiting for its turn and on the device.
        self.queue_seconds = None
        self.run_seconds = None

    @property
    def job_id(self):
        return self._session.job_id

    def __call__(self, *inputs):
        self._session.check_open()
        _check_batch("the served model", inputs, self._input_specs)
        feeds = [dtypes.host_tensor(spec[0], t) for spec, t in zip(self._input_specs, inputs)]
        feeds += self._seeds.feeds(self._iteration)
        self._iteration += 1
        session = self._session
        try:
            result = session.client.wait(session.client.submit(self.job_id, feeds, self._fetches, self._iteration))
        except errors.DaemonUnavailableError:
            self._register_again(session)
            result = self._session.client.wait(
                self._session.client.submit(self.job_id, feeds, self._fetches, self._iteration))
        self.queue_seconds = result.queue_seconds
        self.run_seconds = result.run_seconds
        leaves = [dtypes.to_torch(result.tensors[f]) for f in self._fetches]
        return self._unflatten(leaves, self._capture.out_spec)

    def _register_again(self, session):
        """tandemd went away under `session`: registers the model again (its weights do not change) once
        tandemd answers, within the re-attach timeout; another thread may have done it already."""
        with self._reattach_lock:
            if session is not self._session:
                return
            if self._reattach_timeout <= 0:
                raise errors.DaemonUnavailableError(
                    f"tandemd went away and re-attaching is off for served model '{self.name}'", errors.UNAVAILABLE)
            session.abandon()
            self._abandoned.append(session)
            endpoint, name, request, chosen = self._register_args
            self._session = _register_again(endpoint, name, request, [dtypes.host_tensor(n, t) for n, t in chosen],
                                            self._reattach_timeout)

    def close(self):
        for old in self._abandoned:
            old.close()
        self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
