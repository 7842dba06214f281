"""A user's torch.optim optimizer, reproduced as a functional update inside the traced step.

OptimizerPlan reads an SGD, Adam or AdamW object: its parameter groups
(hyper-parameters, which parameters) and its state (momentum buffers, moment
estimates, step counts). The state becomes persistent tensors of the job.
Hyper-parameters that stay fixed are baked into the graph; what changes
between iterations (each group's learning rate, Adam's bias corrections,
which depend on the step count) becomes a rank-0 float32 feed computed on the
host before every iteration from the optimizer's *current* param_groups, so
learning-rate schedulers that edit them keep working.

The update reproduces PyTorch's single-tensor implementation operation by
operation (same order of rounding) for the installed version.

state_dict() gives the state back in the optimizer's own state_dict()
format, so that a checkpoint taken from a job loads into a fresh optimizer
(load_state_dict) and a job made from that optimizer continues the run.
"""

import math

import torch

from tandem.errors import CaptureError
from tandem.torch.compat import TORCH_VERSION


def _plain(value):
    return value.item() if isinstance(value, torch.Tensor) else value


def _step_value(previous, steps, hyper, p):
    """Adam's state["step"] for `steps` steps, in the convention of `previous` (the step the optimizer stored
    before, whose type, dtype, shape and device are kept: a tensor since torch 1.12, a number before), else as
    this torch version creates it: a 0-dim tensor of the default float dtype on the CPU, or on the parameter's
    device for capturable/fused (of shape (1,) under 1.13)."""
    if isinstance(previous, torch.Tensor):
        return torch.full_like(previous, float(steps))
    if previous is not None:
        return type(previous)(steps)
    if hyper.get("capturable") or hyper.get("fused"):
        shape = (1,) if TORCH_VERSION < (2, 0) else ()
        return torch.full(shape, float(steps), dtype=torch.float32, device=p.device)
    return torch.tensor(float(steps))


class _Group:
    def __init__(self, index, hyper, params):
        self.index = index
        self.hyper = hyper
        self.params = params  # indices into the plan's trainable list
        self.steps = 0        # optimizer steps already taken
        self.fresh_momentum = True


class OptimizerPlan:
    """How to update the trainable parameters, read from a torch.optim optimizer.

    trainable: [(name, parameter)] of the model's parameters the optimizer updates, in plan order.
    state_names: the per-parameter state tensors, e.g. ["momentum_buffer"] or ["exp_avg", "exp_avg_sq"].
    scalar_names: the names of the per-iteration scalar feeds.
    """

    def __init__(self, optimizer, named_parameters):
        self.optimizer = optimizer
        self.kind = self._kind(optimizer)
        by_id = {id(p): name for name, p in named_parameters}
        self.trainable = []
        self.groups = []
        seen = set()
        for gi, group in enumerate(optimizer.param_groups):
            indices = []
            for p in group["params"]:
                if id(p) not in by_id:
                    raise CaptureError(
                        f"the optimizer's param group {gi} holds a tensor of shape {tuple(p.shape)} that is not a "
                        "parameter of the model; Tandem trains the model's own parameters")
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                indices.append(len(self.trainable))
                self.trainable.append((by_id[id(p)], p))
            hyper = {k: v for k, v in group.items() if k != "params"}
            self.groups.append(_Group(gi, hyper, indices))
        self._check_hyper()
        self.state_names = self._state_names()
        self._read_steps()
        self.iterations = 0  # iterations counted by scalar_values(advance=True)

    @staticmethod
    def _kind(optimizer):
        for cls, kind in ((torch.optim.AdamW, "adamw"), (torch.optim.Adam, "adam"), (torch.optim.SGD, "sgd")):
            if type(optimizer) is cls:
                return kind
        raise CaptureError(
            f"optimizer {type(optimizer).__name__} is not supported; Tandem reproduces torch.optim.SGD, Adam and "
            "AdamW. Use one of those (a learning-rate scheduler on top is fine).")

    def _check_hyper(self):
        for g in self.groups:
            h = g.hyper
            # Options such as foreach, fused, capturable change how PyTorch computes, not what.
            if self.kind == "sgd" and h.get("nesterov") and (h["momentum"] <= 0 or h["dampening"] != 0):
                raise CaptureError("SGD with nesterov needs momentum > 0 and dampening 0")
        momentums = {self.kind == "sgd" and g.hyper["momentum"] != 0 for g in self.groups}
        amsgrad = {bool(g.hyper.get("amsgrad")) for g in self.groups}
        if len(momentums) > 1 or len(amsgrad) > 1:
            raise CaptureError("param groups that differ in whether they use momentum (or amsgrad) are not "
                               "supported; use one optimizer setting for all groups")

    def _state_names(self):
        if self.kind == "sgd":
            return ["momentum_buffer"] if self.groups and self.groups[0].hyper["momentum"] != 0 else []
        names = ["exp_avg", "exp_avg_sq"]
        if self.groups and self.groups[0].hyper.get("amsgrad"):
            names.append("max_exp_avg_sq")
        return names

    def _read_steps(self):
        state = self.optimizer.state
        for g in self.groups:
            steps = set()
            has_buffer = []
            for i in g.params:
                s = state.get(self.trainable[i][1], {})
                steps.add(int(_plain(s.get("step", 0))))
                has_buffer.append(s.get("momentum_buffer") is not None)
            if len(steps) > 1:
                raise CaptureError(f"param group {g.index} has parameters at different step counts {sorted(steps)}")
            g.steps = steps.pop() if steps else 0
            g.fresh_momentum = not all(has_buffer) if has_buffer else True

    # ---- persistent state ----

    def initial_state(self, index):
        """[(state name, tensor)] for trainable parameter `index`, from the optimizer's state or zeros."""
        p = self.trainable[index][1]
        s = self.optimizer.state.get(p, {})
        out = []
        for name in self.state_names:
            value = s.get(name)
            out.append((name, value.detach().clone() if value is not None else torch.zeros_like(p.detach())))
        return out

    def state_dict(self, read):
        """The optimizer's state_dict() as the job has it after the iterations counted so far: torch.optim's
        format (state keyed by parameter index, param_groups with the optimizer's current hyper-parameters,
        learning rates set by a scheduler included), every trainable parameter's state read with
        read(trainable index, state name) and Adam's step count this plan's. Before the first iteration, and for
        parameters the job does not train, the optimizer's own state. SGD without momentum keeps no state."""
        saved = self.optimizer.state_dict()
        if self.iterations == 0 or not self.state_names:
            return saved
        index_of = {}
        for group, packed in zip(self.optimizer.param_groups, saved["param_groups"]):
            for p, index in zip(group["params"], packed["params"]):
                index_of.setdefault(id(p), index)
        state = dict(saved["state"])
        for g in self.groups:
            for i in g.params:
                p = self.trainable[i][1]
                index = index_of[id(p)]
                entry = {}
                if self.kind != "sgd":
                    entry["step"] = _step_value(state.get(index, {}).get("step"), g.steps, g.hyper, p)
                for name in self.state_names:
                    entry[name] = read(i, name).to(p.device)
                state[index] = entry
        return {"state": state, "param_groups": saved["param_groups"]}

    # ---- scalar feeds ----

    def _uses_grad_scale(self, g):
        return self.kind == "sgd" and g.hyper["momentum"] != 0 and g.hyper["dampening"] != 0

    def scalar_names(self):
        names = []
        for g in self.groups:
            prefix = f"optim/group{g.index}/"
            if self.kind == "sgd":
                names.append(prefix + "lr")
                if self._uses_grad_scale(g):
                    names.append(prefix + "grad_scale")
            else:
                names += [prefix + "step_size", prefix + "bias_correction2_sqrt"]
                if self.kind == "adamw" and g.hyper["weight_decay"] != 0:
                    names.append(prefix + "decay")
        return names

    def scalar_values(self, advance=True):
        """The scalar feeds of the next iteration (in scalar_names order), from the optimizer's current
        param_groups; with advance, counts the step as taken."""
        values = []
        for g in self.groups:
            h = self.optimizer.param_groups[g.index]
            lr = float(_plain(h["lr"]))
            step = g.steps + 1
            if self.kind == "sgd":
                values.append(lr)
                if self._uses_grad_scale(g):
                    values.append(1.0 if (g.fresh_momentum and g.steps == 0) else 1.0 - h["dampening"])
            else:
                beta1, beta2 = h["betas"]
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                values += [lr / bias_correction1, math.sqrt(bias_correction2)]
                if self.kind == "adamw" and g.hyper["weight_decay"] != 0:
                    values.append(1 - lr * h["weight_decay"])
            if advance:
                g.steps = step
        if advance:
            self.iterations += 1
        return values

    def example_scalars(self):
        return [torch.tensor(v, dtype=torch.float32) for v in self.scalar_values(advance=False)]

    # ---- the traced update ----

    def update(self, params, grads, states, scalars):
        """New parameters and states (lists aligned with the inputs). Runs under tracing."""
        new_params = list(params)
        new_states = [list(s) for s in states]
        k = 0
        for g in self.groups:
            n = 2 if self.kind != "sgd" else 1
            if self._uses_grad_scale(g) or (self.kind == "adamw" and g.hyper["weight_decay"] != 0):
                n += 1
            group_scalars = scalars[k:k + n]
            k += n
            for i in g.params:
                fn = self._sgd if self.kind == "sgd" else self._adam
                new_params[i], new_states[i] = fn(g, params[i], grads[i], states[i], group_scalars)
        return new_params, new_states

    def _sgd(self, g, p, grad, state, scalars):
        h = g.hyper
        lr = scalars[0]
        d_p = grad
        if h.get("maximize"):
            d_p = -d_p
        if h["weight_decay"] != 0:
            d_p = torch.add(d_p, p, alpha=h["weight_decay"])
        new_state = list(state)
        if h["momentum"] != 0:
            buf = state[0]
            if self._uses_grad_scale(g):
                buf = torch.add(buf * h["momentum"], d_p * scalars[1])
            else:
                buf = torch.add(buf * h["momentum"], d_p, alpha=1 - h["dampening"])
            new_state[0] = buf
            d_p = torch.add(d_p, buf, alpha=h["momentum"]) if h["nesterov"] else buf
        return p - lr * d_p, new_state

    def _adam(self, g, p, grad, state, scalars):
        h = g.hyper
        beta1, beta2 = h["betas"]
        step_size, bias_correction2_sqrt = scalars[0], scalars[1]
        if h.get("maximize"):
            grad = -grad
        if self.kind == "adamw" and h["weight_decay"] != 0:
            p = p * scalars[2]
        elif self.kind == "adam" and h["weight_decay"] != 0:
            grad = torch.add(grad, p, alpha=h["weight_decay"])
        exp_avg, exp_avg_sq = state[0], state[1]
        if TORCH_VERSION >= (2, 0):
            # exp_avg.lerp_(grad, 1 - beta1), as ATen's CPU lerp computes it for a weight < 0.5.
            weight = 1 - beta1
            if weight < 0.5:
                exp_avg = exp_avg + weight * (grad - exp_avg)
            else:
                exp_avg = grad - (grad - exp_avg) * (1 - weight)
        else:
            exp_avg = torch.add(exp_avg * beta1, grad, alpha=1 - beta1)
        # addcmul: self + value * t1 * t2, evaluated left to right.
        exp_avg_sq = exp_avg_sq * beta2 + ((1 - beta2) * grad) * grad
        new_state = [exp_avg, exp_avg_sq]
        second = exp_avg_sq
        if h.get("amsgrad"):
            second = torch.maximum(state[2], exp_avg_sq)
            new_state.append(second)
        denom = second.sqrt() / bias_correction2_sqrt + h["eps"]
        # addcdiv: self + value * t1 / t2, evaluated left to right.
        return p - (step_size * exp_avg) / denom, new_state
