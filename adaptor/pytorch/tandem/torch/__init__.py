"""The PyTorch front end: capture a whole training step and train it through tandemd.

    import tandem.torch
    job = tandem.torch.train(model, loss_fn, optimizer, (x, y))
    for x, y in loader:
        loss = job.step(x, y)          # one iteration in the daemon; returns the loss
    torch.save(job.checkpoint(), path) # {"model": ..., "optimizer": ...} in PyTorch's formats
    job.load_into(model, optimizer)    # or copy the trained weights and optimizer state back
    job.close()

train() traces forward, loss, backward, optional gradient clipping and the
optimizer's update (SGD, Adam, AdamW, RMSprop or Adagrad, read from the
optimizer object), over one batch or over k micro-batches whose gradients
accumulate, into one ATen graph on the CPU, lowers it to Tandem's IR and
registers it; serve() does the same for a forward pass (capture_serving() +
serve_lowered() capture once and register many models of one architecture,
each with its own weights). See docs/pytorch.md.
"""

from tandem.errors import (BatchError, CaptureError, DaemonUnavailableError, IterationError, JobClosedError,
                           RegistrationError, TandemError, UnsupportedOpError)
from tandem.torch.amp import Amp
from tandem.torch.batch import Batch
from tandem.torch.capture import capture_inference, capture_training_step
from tandem.torch.clipping import GradientClipping
from tandem.torch.job import ServedModel, StepHandle, StepResult, TrainingJob, _EvalVariant, _ShapeVariant, weights_for
from tandem.torch.lower import lower
from tandem.torch.optim import OptimizerPlan
from tandem.torch.outputs import MODEL_OUTPUT


def _hints(priority, expected_iterations, device):
    hints = {}
    if priority:
        hints["priority"] = int(priority)
    if expected_iterations:
        hints["expected_iterations"] = str(int(expected_iterations))
    if device:
        hints["device"] = device
    return hints


def _as_tuple(batch):
    import torch
    if isinstance(batch, torch.Tensor):
        return (batch,)
    if isinstance(batch, (list, tuple)) and batch and all(isinstance(t, torch.Tensor) for t in batch):
        return tuple(batch)
    raise BatchError("example_input must be a tensor or a tuple of tensors: the model's inputs")


def capture_training_job(model, loss_fn, optimizer, example_batch, record_values=False, outputs=None, *,
                         clip_grad_norm=None, clip_norm_type=2.0, clip_grad_value=None, accumulate=1, autocast=None,
                         grad_scaler=None):
    """The lowered training step (a tandem.torch.lower.Lowered) and its capture, without a daemon. With
    `record_values` the step also runs once in PyTorch, for check.check_lowering (Lowered.values). The
    other arguments are train()'s."""
    plan = OptimizerPlan(optimizer, list(model.named_parameters()))
    clipping = GradientClipping(clip_grad_norm, clip_norm_type, clip_grad_value)
    amp = Amp(autocast, grad_scaler)
    capture = capture_training_step(model, loss_fn, plan, example_batch, outputs, clipping, accumulate, amp)
    lowered = lower(capture.gm, capture.inputs, capture.outputs, capture.flat_inputs, record_values)
    return capture, lowered


def train(model, loss_fn, optimizer, example_batch, endpoint=None, name=None, priority=0, expected_iterations=0,
          device=None, outputs=None, *, clip_grad_norm=None, clip_norm_type=2.0, clip_grad_value=None,
          accumulate=1, autocast=None, grad_scaler=None, other_shapes=(), evaluate=None, resume=None,
          reattach_timeout=None):
    """Captures one training step of `model` and registers it with tandemd. Returns a TrainingJob.

    The step computes loss_fn(model(*inputs, **kwargs), *targets) -> a scalar tensor, then the gradients and
    the optimizer's update.

    optimizer: a torch.optim.SGD, Adam, AdamW, RMSprop or Adagrad over the model's parameters. Its
    hyper-parameters and its state (momentum buffers, moments, step counts: e.g. just loaded from a checkpoint
    with load_state_dict) are read now, so a job continues where the optimizer left off; its param_groups' lr
    is read at every step.
    example_batch: the shapes and dtypes every step() will get, as
      - a tensor x: model(x), loss_fn(output);
      - a tuple (inputs..., target): model(*inputs), loss_fn(output, target);
      - tandem.torch.Batch(inputs=(...), kwargs={name: tensor}, targets=(...)) for keyword inputs of the model
        or several targets.
    outputs: what a step returns beyond the loss, when step(..., fetch=...) asks for it: a dict
      {name: tandem.torch.MODEL_OUTPUT (the model's output) or fn(output, *targets) -> tensor(s)}, or one
      fn(output, *targets) -> {name: tensor(s)}; traced into the step like the model.
    endpoint: a tandemd endpoint (default: $TANDEM_ENDPOINT, else the local daemon). priority /
    expected_iterations: scheduling hints; device: "cpu", "cuda", "cuda:N" or None (the daemon's choice).
    The job's memory quota is $TANDEM_MEMORY_QUOTA_MIB where set (a batch system's prolog sets it:
    cluster/slurm/), else the daemon's max_job_memory_mib.

    Inside the step, between the backward pass and the optimizer's update (at most one of the two):
    clip_grad_norm=max_norm scales the gradients as torch.nn.utils.clip_grad_norm_(params, max_norm,
    norm_type=clip_norm_type) does (2.0 or float('inf'); error_if_nonfinite=False); clip_grad_value=v clamps
    them to [-v, v] as clip_grad_value_(params, v) does. accumulate=k: every batch tensor holds k micro-batches
    along dim 0 (its size divisible by k); one step runs forward and backward on each, sums the gradients of
    loss_fn(...) / k and then updates once, as PyTorch's accumulation loop does; step() returns the sum of the
    k scaled losses (their mean).

    Mixed precision (amp.py): autocast=torch.float16 or torch.bfloat16 runs forward and loss under CUDA
    autocast's policy for that dtype, as `with torch.autocast("cuda", dtype=...)` does (train() called inside
    such a context takes its dtype); the parameters and the optimizer stay float32. grad_scaler=a torch
    GradScaler (its settings and current scale), True or a dict of its settings scales the loss and unscales
    the gradients inside the step; a step whose gradients hold an inf or a NaN updates nothing but the scale,
    as scaler.step() and scaler.update() do. job.grad_scaler_state_dict() reads the scaler's state back.

    The job holds the trained weights and optimizer state: job.checkpoint() (or state_dict() and
    optimizer_state_dict()) reads them in PyTorch's formats, job.load_into(model, optimizer) copies them back.

    other_shapes: more example batches, of the example's structure and dtypes but other shapes (the short last
    batch of an epoch, sequence-length buckets): each is captured as another graph of the same job over the
    same weights and optimizer state, and step() runs the graph whose shapes its batch has (a batch of a shape
    none has is a BatchError that lists them). The job's activation memory is planned for the largest.
    evaluate: an example input of model(*inputs) in eval mode: job.evaluate(*inputs) then runs that forward
    pass in the daemon on the job's live weights, as another graph of the job (no copy of the weights).

    resume: a job's resume_token (bytes, or its hex): where tandemd keeps checkpoints (its state_dir), start
    from the checkpoint of this user's job named `name` (same model and optimizer state shapes) that the
    daemon wrote before it or the job's client stopped, instead of the model's weights; job.resumed_iterations
    says how many steps it had done (skip as many batches; a learning-rate scheduler is the caller's to
    advance).

    reattach_timeout: seconds a step waits for tandemd to come back when it goes away (a restart after a device
    fault, a crash, an upgrade) before raising DaemonUnavailableError; default $TANDEM_REATTACH_TIMEOUT, else 60;
    0: raise at once. A job re-attaches with its resume token (tandemd has a state_dir) and continues from its
    last checkpoint: the steps in flight are sent again, those done after the checkpoint are lost
    (job.recoveries).
    """
    kwargs = dict(outputs=outputs, clip_grad_norm=clip_grad_norm, clip_norm_type=clip_norm_type,
                  clip_grad_value=clip_grad_value, accumulate=accumulate, autocast=autocast, grad_scaler=grad_scaler)
    capture, lowered = capture_training_job(model, loss_fn, optimizer, example_batch, **kwargs)
    shape_variants = []
    for i, other in enumerate(other_shapes):
        other_capture, other_lowered = capture_training_job(model, loss_fn, optimizer, other, **kwargs)
        shape_variants.append(_ShapeVariant(f"shape{i + 1}", other_capture, other_lowered))
    eval_variant = None
    if evaluate is not None:
        eval_variant = _EvalVariant(*capture_serving(model, evaluate, capture.amp.dtype))
    name = name or f"{type(model).__name__}-train"
    return TrainingJob(capture, lowered, endpoint, name, _hints(priority, expected_iterations, device),
                       shape_variants, eval_variant, resume, reattach_timeout)


def serve(model, example_input, endpoint=None, name=None, priority=0, device=None, reattach_timeout=None):
    """Captures model(*example_input) in eval mode and registers it with tandemd. Returns a ServedModel:
    calling it with inputs of the example's shapes runs the forward pass in the daemon and returns torch
    tensors (structured like the model's output). reattach_timeout: as for train(); a served model registers
    again with its weights."""
    capture, lowered = capture_serving(model, example_input)
    name = name or f"{type(model).__name__}-serve"
    return ServedModel(capture, lowered, endpoint, name, _hints(priority, 0, device), reattach=reattach_timeout)


def capture_serving(model, example_input, autocast=None):
    """The captured and lowered forward pass of model(*example_input) in eval mode, without a daemon:
    (capture, lowered), for serve_lowered(). autocast: a 16-bit dtype to run it under CUDA autocast's policy."""
    capture = capture_inference(model, _as_tuple(example_input), autocast)
    lowered = lower(capture.gm, capture.inputs, capture.outputs, capture.flat_inputs)
    return capture, lowered


def serve_lowered(capture, lowered, model=None, endpoint=None, name=None, priority=0, device=None,
                  reattach_timeout=None):
    """Registers a forward pass from capture_serving() with tandemd as a new job, without capturing again.
    With `model` (of the captured architecture: parameters and buffers of the same names, shapes and dtypes;
    else CaptureError) the job holds that model's weights, so one capture serves any number of models of one
    architecture and input shape, each its own job with its own weights; without, the captured model's.
    Returns a ServedModel, as serve()."""
    persistent = None if model is None else weights_for(capture, lowered, model)
    name = name or f"{type(model).__name__ if model is not None else 'model'}-serve"
    return ServedModel(capture, lowered, endpoint, name, _hints(priority, 0, device), persistent=persistent,
                       reattach=reattach_timeout)


__all__ = [
    "Batch", "BatchError", "CaptureError", "DaemonUnavailableError", "IterationError", "JobClosedError",
    "MODEL_OUTPUT", "RegistrationError", "ServedModel", "StepHandle", "StepResult", "TandemError", "TrainingJob",
    "UnsupportedOpError", "capture_serving", "capture_training_job", "serve", "serve_lowered", "train",
]
