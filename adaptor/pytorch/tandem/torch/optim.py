"""A user's torch.optim optimizer, reproduced as a functional update inside the traced step.

OptimizerPlan reads an SGD, Adam, AdamW, RMSprop or Adagrad object: its
parameter groups (hyper-parameters, which parameters) and its state (momentum
buffers, moment estimates, accumulated squares, step counts). The
per-parameter state becomes persistent tensors of the job. Hyper-parameters
that stay fixed are baked into the graph; what changes between iterations
(each group's learning rate, and whatever depends on the step count: Adam's
bias corrections, Adagrad's decayed learning rate) becomes a rank-0 float32
feed computed on the host before every iteration from the optimizer's
*current* param_groups and the plan's step count, so learning-rate schedulers
that edit them keep working.

The update reproduces PyTorch's single-tensor implementation operation by
operation (same order of rounding) for the installed version: an in-place op
becomes a new tensor, `a.addcmul(t1, t2, value=v)` is `a + (v * t1) * t2`
and `a.addcdiv(t1, t2, value=v)` is `a + (v * t1) / t2`, as ATen's kernels
evaluate them. Each kind of optimizer is four entries (docs/pytorch.md,
"Adding an optimizer"): its class in _KINDS, its state in _state_names, its
per-step scalars in _group_scalars, and its update method in _UPDATES.

With device_steps (loss scaling, amp.py), each group's step count lives in
the job ("optim/group<i>/step", float64) and advances only on the steps that
are taken; the learning rates are still fed, and the scalars that depend on
the step count are computed in the graph, in float64 then rounded to float32
as the host computes them otherwise.

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


# The optimizers Tandem reproduces (exact classes: a subclass may change the update) -> kind.
_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw",
          torch.optim.RMSprop: "rmsprop", torch.optim.Adagrad: "adagrad"}


def _state_names(kind, hyper):
    """The per-parameter state tensors of an optimizer `kind` with a group's `hyper`-parameters, named as the
    optimizer's state dict names them (they become the persistent tensors optim/<param>/<name>). The step
    count is not among them: it stays on the host (OptimizerPlan.scalar_values)."""
    if kind == "sgd":
        return ["momentum_buffer"] if hyper["momentum"] != 0 else []
    if kind in ("adam", "adamw"):
        return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if hyper.get("amsgrad") else [])
    if kind == "rmsprop":
        return (["square_avg"] + (["momentum_buffer"] if hyper["momentum"] > 0 else [])
                + (["grad_avg"] if hyper["centered"] else []))
    if kind == "adagrad":
        return ["sum"]
    raise AssertionError(kind)


def _lerp(start, end, weight):
    """start.lerp(end, weight) for a Python number `weight`, as ATen's lerp kernels compute it."""
    if weight < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


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
    scalar_names(): the names of the per-iteration scalar feeds.
    """

    def __init__(self, optimizer, named_parameters):
        self.optimizer = optimizer
        self.kind = self._kind(optimizer)
        by_id = {id(p): name for name, p in named_parameters}
        self.trainable = []
        self.groups = []
        self._group_of = []  # trainable index -> its _Group
        seen = set()
        for gi, group in enumerate(optimizer.param_groups):
            indices = []
            hyper = {k: v for k, v in group.items() if k != "params"}
            g = _Group(gi, hyper, indices)
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
                self._group_of.append(g)
            self.groups.append(g)
        self._check_hyper()
        self.state_names = _state_names(self.kind, self.groups[0].hyper) if self.groups else []
        self._read_steps()
        self.iterations = 0  # iterations counted by scalar_values(advance=True)
        # With loss scaling a step can be skipped on the device (an inf or NaN gradient), which the host learns
        # too late to count: then each group's step count is a persistent float64 tensor of the job, the
        # step-dependent scalars are computed in the graph from it, and only the learning rates are fed.
        self.device_steps = False

    @staticmethod
    def _kind(optimizer):
        kind = _KINDS.get(type(optimizer))
        if kind is None:
            raise CaptureError(
                f"optimizer {type(optimizer).__name__} is not supported; Tandem reproduces torch.optim.SGD, Adam, "
                "AdamW, RMSprop and Adagrad. Use one of those (a learning-rate scheduler on top is fine).")
        return kind

    def _check_hyper(self):
        for g in self.groups:
            h = g.hyper
            # Options such as foreach, fused, capturable change how PyTorch computes, not what.
            if self.kind == "sgd" and h.get("nesterov") and (h["momentum"] <= 0 or h["dampening"] != 0):
                raise CaptureError("SGD with nesterov needs momentum > 0 and dampening 0")
        kept = {tuple(_state_names(self.kind, g.hyper)) for g in self.groups}
        if len(kept) > 1:
            raise CaptureError("param groups that differ in the optimizer state they keep (momentum, amsgrad, "
                               f"centered: {sorted(kept)}) are not supported; use one such setting for all groups")

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
        """[(state name, tensor)] for trainable parameter `index`, from the optimizer's state or, where it has
        none yet, the value the optimizer would create (zeros; Adagrad's sum: initial_accumulator_value)."""
        p = self.trainable[index][1]
        s = self.optimizer.state.get(p, {})
        out = []
        for name in self.state_names:
            value = s.get(name)
            if value is not None:
                out.append((name, value.detach().clone()))
            elif self.kind == "adagrad":
                fill = self._group_of[index].hyper["initial_accumulator_value"]
                out.append((name, torch.full_like(p.detach(), fill)))
            else:
                out.append((name, torch.zeros_like(p.detach())))
        return out

    def state_dict(self, read, read_step=None):
        """The optimizer's state_dict() as the job has it after the iterations counted so far: torch.optim's
        format (state keyed by parameter index, param_groups with the optimizer's current hyper-parameters,
        learning rates set by a scheduler included), every trainable parameter's state read with
        read(trainable index, state name) and Adam's step count this plan's (with device_steps,
read_step(group index)'s). Before the first iteration, and for
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
                    steps = g.steps if read_step is None else int(read_step(g.index))
                    entry["step"] = _step_value(state.get(index, {}).get("step"), steps, g.hyper, p)
                for name in self.state_names:
                    entry[name] = read(i, name).to(p.device)
                state[index] = entry
        return {"state": state, "param_groups": saved["param_groups"]}

    # ---- scalar feeds ----

    def _uses_grad_scale(self, g):
        return self.kind == "sgd" and g.hyper["momentum"] != 0 and g.hyper["dampening"] != 0

    def _group_scalars(self, g, h, step):
        """[(name, value)]: the scalar feeds of group `g` for its optimizer step number `step` (1 for the first),
        from `h`, the group's current hyper-parameters. Which names there are depends on g.hyper only (fixed
        when the job is made); the values are computed in Python floats, as PyTorch computes them, or, with
        device_steps, traced from float64 rank-0 tensors `step` and h["lr"]."""
        traced = isinstance(step, torch.Tensor)
        sqrt = torch.sqrt if traced else math.sqrt
        lr = h["lr"] if traced else float(_plain(h["lr"]))
        if self.kind == "sgd":
            out = [("lr", lr)]
            if self._uses_grad_scale(g):
                damped = 1.0 - h["dampening"]
                if not g.fresh_momentum:
                    scale = damped
                elif traced:
                    scale = torch.where(step == 1, torch.ones_like(step), torch.full_like(step, damped))
                else:
                    scale = 1.0 if step == 1 else damped
                out.append(("grad_scale", scale))
            return out
        if self.kind in ("adam", "adamw"):
            beta1, beta2 = h["betas"]
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            out = [("step_size", lr / bias_correction1), ("bias_correction2_sqrt", sqrt(bias_correction2))]
            if self.kind == "adamw" and g.hyper["weight_decay"] != 0:
                out.append(("decay", 1 - lr * h["weight_decay"]))
            return out
        if self.kind == "rmsprop":
            return [("lr", lr)]
        if self.kind == "adagrad":
            return [("clr", lr / (1 + (step - 1) * h["lr_decay"]))]
        raise AssertionError(self.kind)

    def _current(self, g):
        return self._group_scalars(g, self.optimizer.param_groups[g.index], g.steps + 1)

    def scalar_names(self):
        if self.device_steps:
            return [f"optim/group{g.index}/lr" for g in self.groups]
        return [f"optim/group{g.index}/{name}" for g in self.groups for name, _ in self._current(g)]

    def step_names(self):
        """With device_steps: the persistent step count of each group."""
        return [f"optim/group{g.index}/step" for g in self.groups] if self.device_steps else []

    def initial_steps(self):
        return [torch.tensor(float(g.steps), dtype=torch.float64) for g in self.groups] if self.device_steps else []

    def scalar_values(self, advance=True):
        """The scalar feeds of the next iteration (in scalar_names order), from the optimizer's current
        param_groups; with advance, counts the step as taken."""
        values = []
        for g in self.groups:
            if self.device_steps:
                values.append(float(_plain(self.optimizer.param_groups[g.index]["lr"])))
            else:
                values += [float(v) for _, v in self._current(g)]
            if advance:
                g.steps += 1
        if advance:
            self.iterations += 1
        return values

    def example_scalars(self):
        return [torch.tensor(v, dtype=self.scalar_dtype()) for v in self.scalar_values(advance=False)]

    def scalar_dtype(self):
        """The dtype of the scalar feeds: float32, or float64 with device_steps (the learning rates, from which
        the graph computes the step's scalars in float64, as the host does otherwise)."""
        return torch.float64 if self.device_steps else torch.float32

    # ---- the traced update ----

    def update(self, params, grads, states, scalars, steps=(), update_one=None):
        """New parameters, states and (with device_steps) step counts: lists aligned with the inputs; states[i]
        in state_names order, steps in group order. Runs under tracing. update_one(group, trainable index,
        parameter, gradient, [states], {scalar name: rank-0 tensor}) -> (new parameter, [new states]) updates
        one parameter (default: self.update_one; the capture's adds loss scaling's skip, or defers the update to
        stamp.UpdateStamper)."""
        new_params = list(params)
        new_states = [list(s) for s in states]
        new_steps = []
        k = 0
        for g in self.groups:
            if self.device_steps:
                step = steps[g.index] + 1
                h = dict(self.optimizer.param_groups[g.index], lr=scalars[g.index])
                s = {name: v.to(torch.float32) if isinstance(v, torch.Tensor) else v
                     for name, v in self._group_scalars(g, h, step)}
                new_steps.append(step)
            else:
                names = [name for name, _ in self._current(g)]
                s = dict(zip(names, scalars[k:k + len(names)]))
                k += len(names)
            for i in g.params:
                if update_one is None:
                    new_params[i], new_states[i] = self.update_one(g, params[i], grads[i], states[i], s)
                else:
                    new_params[i], new_states[i] = update_one(g, i, params[i], grads[i], states[i], s)
        return new_params, new_states, new_steps

    def update_one(self, g, p, grad, states, s):
        """The update of one parameter of group `g`: (new parameter, [new states in state_names order])."""
        new_p, new_state = getattr(self, _UPDATES[self.kind])(g, p, grad, dict(zip(self.state_names, states)), s)
        return new_p, [new_state[name] for name in self.state_names]

    # Each update method: (group, parameter, gradient, {state name: tensor}, {scalar name: rank-0 tensor})
    # -> (new parameter, {state name: new tensor}), following torch/optim/<name>.py's _single_tensor_<name>.

    def _sgd(self, g, p, grad, state, s):
        h = g.hyper
        lr = s["lr"]
        d_p = grad
        if h.get("maximize"):
            d_p = -d_p
        if h["weight_decay"] != 0:
            d_p = torch.add(d_p, p, alpha=h["weight_decay"])
        new_state = dict(state)
        if h["momentum"] != 0:
            buf = state["momentum_buffer"]
            if self._uses_grad_scale(g):
                buf = torch.add(buf * h["momentum"], d_p * s["grad_scale"])
            else:
                buf = torch.add(buf * h["momentum"], d_p, alpha=1 - h["dampening"])
            new_state["momentum_buffer"] = buf
            d_p = torch.add(d_p, buf, alpha=h["momentum"]) if h["nesterov"] else buf
        return p - lr * d_p, new_state

    def _adam(self, g, p, grad, state, s):
        h = g.hyper
        beta1, beta2 = h["betas"]
        if h.get("maximize"):
            grad = -grad
        if self.kind == "adamw" and h["weight_decay"] != 0:
            p = p * s["decay"]
        elif self.kind == "adam" and h["weight_decay"] != 0:
            grad = torch.add(grad, p, alpha=h["weight_decay"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        if TORCH_VERSION >= (2, 0):
            exp_avg = _lerp(exp_avg, grad, 1 - beta1)
        else:
            exp_avg = torch.add(exp_avg * beta1, grad, alpha=1 - beta1)
        exp_avg_sq = exp_avg_sq * beta2 + ((1 - beta2) * grad) * grad  # addcmul_(grad, grad, value=1 - beta2)
        new_state = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        second = exp_avg_sq
        if h.get("amsgrad"):
            second = torch.maximum(state["max_exp_avg_sq"], exp_avg_sq)
            new_state["max_exp_avg_sq"] = second
        denom = second.sqrt() / s["bias_correction2_sqrt"] + h["eps"]
        return p - (s["step_size"] * exp_avg) / denom, new_state  # addcdiv_(exp_avg, denom, value=-step_size)

    def _rmsprop(self, g, p, grad, state, s):
        h = g.hyper
        alpha = h["alpha"]
        if h.get("maximize"):
            grad = -grad
        if h["weight_decay"] != 0:
            grad = torch.add(grad, p, alpha=h["weight_decay"])
        square_avg = state["square_avg"] * alpha + ((1 - alpha) * grad) * grad  # addcmul_(grad, grad, 1 - alpha)
        new_state = {"square_avg": square_avg}
        if h["centered"]:
            if TORCH_VERSION >= (2, 0):
                grad_avg = _lerp(state["grad_avg"], grad, 1 - alpha)
            else:
                grad_avg = torch.add(state["grad_avg"] * alpha, grad, alpha=1 - alpha)
            new_state["grad_avg"] = grad_avg
            avg = (square_avg - grad_avg * grad_avg).sqrt()  # addcmul(grad_avg, grad_avg, value=-1).sqrt_()
        else:
            avg = square_avg.sqrt()
        avg = avg + h["eps"]
        if h["momentum"] > 0:
            buf = state["momentum_buffer"] * h["momentum"] + grad / avg  # mul_(momentum).addcdiv_(grad, avg)
            new_state["momentum_buffer"] = buf
            return p - s["lr"] * buf, new_state  # add_(buf, alpha=-lr)
        return p - (s["lr"] * grad) / avg, new_state  # addcdiv_(grad, avg, value=-lr)

    def _adagrad(self, g, p, grad, state, s):
        h = g.hyper
        if h.get("maximize"):
            grad = -grad
        if h["weight_decay"] != 0:
            grad = torch.add(grad, p, alpha=h["weight_decay"])
        state_sum = state["sum"] + grad * grad  # addcmul_(grad, grad, value=1)
        std = state_sum.sqrt() + h["eps"]
        return p - (s["clr"] * grad) / std, {"sum": state_sum}  # addcdiv_(grad, std, value=-clr)


# kind -> the OptimizerPlan method that updates one parameter.
_UPDATES = {"sgd": "_sgd", "adam": "_adam", "adamw": "_adam", "rmsprop": "_rmsprop", "adagrad": "_adagrad"}
