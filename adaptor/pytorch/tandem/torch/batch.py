"""What a training batch holds and where each of its tensors goes.

A step computes loss_fn(model(*inputs, **kwargs), *targets). Batch spells
those three parts out; the short forms that train() and step() have always
taken stay valid and mean:

    x                   Batch(inputs=(x,))             model(x), loss_fn(output)
    (x,)                Batch(inputs=(x,))
    (x1, ..., xn, y)    Batch(inputs=(x1..xn,), targets=(y,))

so several targets, or keyword inputs, need a Batch. BatchLayout is the
structure of a job's example batch: how many positional inputs and targets,
which keyword inputs, and the feed name of each tensor. A step's batch must
have the example's structure, shapes and dtypes (job._check_batch).
"""

import torch

from tandem.errors import BatchError


def _tensors(value, what):
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (list, tuple)):
        for i, t in enumerate(value):
            if not isinstance(t, torch.Tensor):
                raise BatchError(f"Batch {what}[{i}] is a {type(t).__name__}, not a torch.Tensor")
        return tuple(value)
    raise BatchError(f"Batch {what} must be a tensor or a tuple of tensors, got {type(value).__name__}")


class Batch:
    """One batch: the model's positional `inputs` (a tensor or a tuple), its keyword inputs `kwargs` ({name:
    tensor}) and the `targets` (a tensor or a tuple) given to loss_fn(output, *targets). Every value is a
    tensor: a constant argument of the model or the loss belongs in the model or in loss_fn."""

    __slots__ = ("inputs", "kwargs", "targets")

    def __init__(self, inputs=(), targets=(), kwargs=None):
        self.inputs = _tensors(inputs, "inputs")
        self.targets = _tensors(targets, "targets")
        self.kwargs = dict(kwargs or {})
        for name, t in self.kwargs.items():
            if not isinstance(name, str) or not name:
                raise BatchError(f"Batch kwargs keys must be argument names (str), got {name!r}")
            if not isinstance(t, torch.Tensor):
                raise BatchError(f"Batch kwargs['{name}'] is a {type(t).__name__}, not a torch.Tensor")
        if not self.inputs and not self.kwargs:
            raise BatchError("a Batch needs at least one input of the model (inputs= or kwargs=)")

    def __repr__(self):
        def spec(t):
            return f"{t.dtype}{list(t.shape)}"
        kwargs = ", ".join(f"{k}={spec(t)}" for k, t in self.kwargs.items())
        return (f"Batch(inputs=({', '.join(spec(t) for t in self.inputs)}), kwargs={{{kwargs}}}, "
                f"targets=({', '.join(spec(t) for t in self.targets)}))")


def as_batch(example):
    """The Batch of a train() example: a Batch as is, else the short form (a tensor, or a tuple of the model's
    inputs then one target)."""
    if isinstance(example, Batch):
        return example
    if isinstance(example, torch.Tensor):
        return Batch(inputs=(example,))
    if isinstance(example, (list, tuple)) and example and all(isinstance(t, torch.Tensor) for t in example):
        if len(example) == 1:
            return Batch(inputs=tuple(example))
        return Batch(inputs=tuple(example[:-1]), targets=tuple(example[-1:]))
    raise BatchError("example_batch must be a tensor, a tuple of tensors (the model's inputs, then the target "
                     "passed to loss_fn(output, target)), or a tandem.torch.Batch(inputs, targets, kwargs) for "
                     "keyword inputs or several targets")


class BatchLayout:
    """The structure of a job's batches: `n_inputs` positional inputs, keyword inputs `kwarg_names` (in the
    example's order), `n_targets` targets. Flat order, that of `names` and `labels`: inputs, keyword inputs,
    targets. Feed names: positional tensors (inputs then targets) batch/0, batch/1, ... as always; keyword
    inputs batch/kwargs/<name>."""

    def __init__(self, batch):
        self.n_inputs = len(batch.inputs)
        self.kwarg_names = list(batch.kwargs)
        self.n_targets = len(batch.targets)
        positional = [f"batch/{i}" for i in range(self.n_inputs + self.n_targets)]
        self.names = (positional[:self.n_inputs] + [f"batch/kwargs/{k}" for k in self.kwarg_names]
                      + positional[self.n_inputs:])
        self.labels = ([f"input {i}" for i in range(self.n_inputs)]
                       + [f"keyword input '{k}'" for k in self.kwarg_names]
                       + [f"target {i}" for i in range(self.n_targets)])

    def flat(self, batch):
        """A Batch's tensors in flat order (the example's, at capture)."""
        return list(batch.inputs) + [batch.kwargs[k] for k in self.kwarg_names] + list(batch.targets)

    def split(self, flat):
        """(inputs, kwargs, targets) of tensors in flat order."""
        n, k = self.n_inputs, len(self.kwarg_names)
        return list(flat[:n]), dict(zip(self.kwarg_names, flat[n:n + k])), list(flat[n + k:])

    def describe(self):
        parts = [f"{self.n_inputs} positional input(s)"]
        if self.kwarg_names:
            parts.append(f"keyword inputs {self.kwarg_names}")
        parts.append(f"{self.n_targets} target(s)")
        return ", ".join(parts)

    def flatten_step(self, what, args):
        """The tensors of a step's arguments in flat order: one Batch of the example's structure, or (for a job
        without keyword inputs) the positional tensors, inputs then targets. The count, shapes and dtypes are
        checked by the caller; a structure that differs raises BatchError."""
        if len(args) == 1 and isinstance(args[0], Batch):
            batch = args[0]
            if (len(batch.inputs), sorted(batch.kwargs), len(batch.targets)) != \
                    (self.n_inputs, sorted(self.kwarg_names), self.n_targets):
                got = BatchLayout(batch).describe()
                raise BatchError(f"{what}: the batch has {got}, but the job was captured with {self.describe()}")
            return self.flat(batch)
        if any(isinstance(a, Batch) for a in args):
            raise BatchError(f"{what}: pass either one tandem.torch.Batch or the tensors, not both")
        if self.kwarg_names:
            raise BatchError(f"{what}: the job's model takes keyword inputs {self.kwarg_names}; pass "
                             "tandem.torch.Batch(inputs=..., kwargs={...}, targets=...) as in the example")
        return list(args)
