"""Named outputs of a training step beyond the loss (train(..., outputs=...)).

A step may also return tensors it computes anyway — the model's output —
or small metrics of them. `outputs` is either

    {"logits": MODEL_OUTPUT, "acc": lambda output, *targets: ...}   # name -> MODEL_OUTPUT or a function
    lambda output, *targets: {"acc": ..., "logits": output}         # one function returning {name: value}

Each function gets the model's output and the batch's targets, runs inside
the captured step (after the backward pass, outside the differentiated
function: it changes no gradient) and must return a tensor or a (nested)
tuple/list/dict of tensors; it is traced once, like the model, so its control
flow must depend on shapes only. The outputs come back from the steps that
ask for them (step(..., fetch=...)).
"""

from tandem.errors import CaptureError


class _ModelOutput:
    def __repr__(self):
        return "tandem.torch.MODEL_OUTPUT"


MODEL_OUTPUT = _ModelOutput()
"""In train(outputs={name: MODEL_OUTPUT}): the model's output (logits), as computed by the step's forward pass."""


def output_function(outputs):
    """None, or fn(output, targets) -> {name: tensor or pytree of tensors} from train()'s `outputs`."""
    if outputs is None:
        return None
    if callable(outputs) and not isinstance(outputs, dict):
        def from_function(output, targets):
            values = outputs(output, *targets)
            if not isinstance(values, dict):
                raise CaptureError(f"the outputs function must return a dict {{name: tensor}}, got "
                                   f"{type(values).__name__}")
            _check_names(values)
            return values
        return from_function
    if isinstance(outputs, dict):
        _check_names(outputs)
        for name, spec in outputs.items():
            if spec is not MODEL_OUTPUT and not callable(spec):
                raise CaptureError(f"outputs['{name}'] must be tandem.torch.MODEL_OUTPUT or a function "
                                   f"fn(output, *targets), got {type(spec).__name__}")

        def from_dict(output, targets):
            return {name: output if spec is MODEL_OUTPUT else spec(output, *targets)
                    for name, spec in outputs.items()}
        return from_dict
    raise CaptureError("outputs must be a dict {name: tandem.torch.MODEL_OUTPUT or fn(output, *targets)} or a "
                       f"function fn(output, *targets) -> {{name: tensor}}, got {type(outputs).__name__}")


def _check_names(values):
    for name in values:
        if not isinstance(name, str) or not name:
            raise CaptureError(f"output names must be non-empty strings, got {name!r}")
