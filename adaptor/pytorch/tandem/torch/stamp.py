"""The optimizer's update traced once per parameter group, not once per parameter.

The capture's tracer costs about a millisecond per traced op (docs/zoo.md), and
the optimizer's update is 4 to 13 traced ops per parameter (SGD with momentum:
4; AdamW: 13; under loss scaling one more per tensor for GradScaler's skip):
10-22% of the trace of a model with hundreds of parameters under SGD, more
than half of its nodes under AdamW. The update of one parameter is
elementwise: the same ops for every parameter of a group, whatever its shape.
So inside the trace UpdateStamper.defer records each parameter's update and
returns its inputs unchanged (nothing is traced for it), and after the trace
UpdateStamper.apply traces the update once per group and dtype on small
stand-ins and copies those nodes into the graph for every parameter, reading
that parameter's gradient, state and the group's scalars.

A template is used only where it provably does not depend on the parameter's
shape: traced twice, on stand-ins of shapes [2, 3] and [5], both traces must
hold the same ops with the same arguments, and each value must have the
stand-in's shape in both (a parameter-shaped value) or one shape in both (a
rank-0 scalar, GradScaler's [1] flag). A parameter of rank 0 is updated as
before, traced. TANDEM_STAMP_UPDATES=0 traces every update (for comparisons).
"""

import os

import torch
import torch.fx

from tandem.torch.lower import run_recording

_SHAPE_A = (2, 3)
_SHAPE_B = (5,)
# What the tracer records of a node's value (the stand-in's shapes; the copies get their own "val").
_SHAPED_META = ("val", "tensor_meta", "example_value")


def enabled():
    return os.environ.get("TANDEM_STAMP_UPDATES", "1") != "0"


def _fake_mode(gm):
    """The fake-tensor mode of a graph traced under fake tensors, or None (a real-mode trace records no values)."""
    for n in gm.graph.nodes:
        mode = getattr(n.meta.get("val"), "fake_mode", None)
        if mode is not None:
            return mode
    return None


class _Template:
    """One traced update: its graph, and per node its value's dtype and fixed shape (None: the parameter's)."""

    def __init__(self, gm, shapes, dtypes):
        self.gm = gm
        self.shapes = shapes
        self.dtypes = dtypes


def _trace_template(trace, fn, inputs_of):
    """The update `fn` traced on stand-ins of shapes _SHAPE_A and _SHAPE_B; a _Template, or None where the two
    traces differ in anything but the parameter-shaped values' shapes."""
    inputs_a, inputs_b = inputs_of(_SHAPE_A), inputs_of(_SHAPE_B)
    a, b = trace(fn, inputs_a), trace(fn, inputs_b)
    nodes_a, nodes_b = list(a.graph.nodes), list(b.graph.nodes)
    if len(nodes_a) != len(nodes_b):
        return None
    values_a, values_b = run_recording(a, inputs_a), run_recording(b, inputs_b)
    index_a = {n: i for i, n in enumerate(nodes_a)}
    index_b = {n: i for i, n in enumerate(nodes_b)}
    shapes, dtypes = {}, {}
    for na, nb in zip(nodes_a, nodes_b):
        if na.op != nb.op or na.target != nb.target or na.op == "get_attr":
            return None
        args_a = torch.fx.node.map_arg((na.args, na.kwargs), lambda n: ("node", index_a[n]))
        args_b = torch.fx.node.map_arg((nb.args, nb.kwargs), lambda n: ("node", index_b[n]))
        if args_a != args_b:
            return None
        if na.op != "call_function":
            continue
        va, vb = values_a[na], values_b[nb]
        if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor) or va.dtype != vb.dtype:
            return None
        if tuple(va.shape) == _SHAPE_A and tuple(vb.shape) == _SHAPE_B:
            shapes[na] = None
        elif tuple(va.shape) == tuple(vb.shape):
            shapes[na] = tuple(va.shape)
        else:
            return None
        dtypes[na] = va.dtype
    return _Template(a, shapes, dtypes)


class _Deferred:
    def __init__(self, key, inputs, counts, outputs_at):
        self.key = key
        self.inputs = inputs          # parameter, gradient, states, scalars, extras
        self.counts = counts          # how many states, scalars, extras
        self.outputs_at = outputs_at  # the step's output positions of the new parameter and of its new states

    def signature(self):
        """What a template depends on besides the key: each input's dtype and whether it has the parameter's
        shape (else its own shape is fixed)."""
        shape = tuple(self.inputs[0].shape)
        return self.key, self.counts, tuple((t.dtype, None if tuple(t.shape) == shape else tuple(t.shape))
                                            for t in self.inputs)


class UpdateStamper:
    """Records per-parameter updates inside a trace (defer) and writes them into the traced graph (apply).

    update(key, p, grad, states, scalars, extras) -> (new p, [new states]) is the per-parameter update; `key`
    names what it computes besides its inputs (the parameter group)."""

    def __init__(self, update):
        self.update = update
        self.deferred = []

    def reset(self):
        """Forgets what an earlier run of the step recorded (a trace that runs the step twice keeps the last)."""
        self.deferred.clear()

    def defer(self, key, p, grad, states, scalars, extras, outputs_at):
        """Inside the trace: records the update of one parameter and returns (p, states) unchanged; a rank-0
        parameter's update is traced as usual. `outputs_at`: (the new parameter's position in the step's
        outputs, [each new state's])."""
        if p.dim() == 0:
            return self.update(key, p, grad, states, scalars, extras)
        counts = (len(states), len(scalars), len(extras))
        self.deferred.append(_Deferred(key, [p, grad, *states, *scalars, *extras], counts, outputs_at))
        return p, list(states)

    def extra_outputs(self):
        """What the step returns after its own outputs, so that apply finds their nodes: every deferred update's
        gradient, scalars and extras (its parameter and states are the step's inputs and outputs already)."""
        return [t for d in self.deferred for t in [d.inputs[1], *d.inputs[2 + d.counts[0]:]]]

    def apply(self, gm, trace, own_outputs):
        """Writes every deferred update into `gm`, a step traced with extra_outputs() after its `own_outputs`
        outputs, and drops those. trace(fn, inputs) traces a template. Returns False, changing nothing, where a
        template depends on the parameter's shape (then the step must be traced again without stamping)."""
        output = next(n for n in gm.graph.nodes if n.op == "output")
        flat = list(output.args[0])
        own, extra = list(flat[:own_outputs]), iter(flat[own_outputs:])
        templates, plans = {}, []
        for d in self.deferred:
            states, _, _ = d.counts
            param_at, states_at = d.outputs_at
            nodes = [own[param_at], next(extra)] + [own[at] for at in states_at]
            nodes += [next(extra) for _ in d.inputs[2 + states:]]
            signature = d.signature()
            if signature not in templates:
                templates[signature] = self._template(trace, d)
            if templates[signature] is None:
                return False
            plans.append((d, templates[signature], nodes))
        fake_mode = _fake_mode(gm)
        for j, (d, template, nodes) in enumerate(plans):
            new = _copy(gm, template, nodes, output, tuple(d.inputs[0].shape), fake_mode, f"update{j}_")
            param_at, states_at = d.outputs_at
            own[param_at] = new[0]
            for k, at in enumerate(states_at):
                own[at] = new[1 + k]
        output.args = (tuple(own),)
        gm.recompile()
        return True

    def _template(self, trace, d):
        update, key = self.update, d.key
        states, scalars, _ = d.counts

        def fn(p, grad, *rest):
            new_p, new_states = update(key, p, grad, list(rest[:states]), list(rest[states:states + scalars]),
                                       list(rest[states + scalars:]))
            return (new_p, *new_states)

        _, _, inputs = d.signature()

        def inputs_of(shape):
            out = []
            for dtype, fixed in inputs:
                s = shape if fixed is None else fixed
                out.append(torch.rand(s, dtype=torch.float64).add(0.5).to(dtype) if dtype.is_floating_point
                           else torch.zeros(s, dtype=dtype))
            return out

        return _trace_template(trace, fn, inputs_of)


def _copy(gm, template, nodes, before, shape, fake_mode, prefix):
    """Copies the template's nodes into gm before `before`, its placeholders read as `nodes` and its
    parameter-shaped values given `shape`, each named `prefix` + its template name (unique names: fx's
    search for a free name is slow in a large graph); returns the nodes of its outputs."""
    env = {}
    placeholders = iter(nodes)
    with gm.graph.inserting_before(before):
        for tn in template.gm.graph.nodes:
            if tn.op == "placeholder":
                env[tn] = next(placeholders)
            elif tn.op == "output":
                return [env[a] for a in tn.args[0]]
            else:
                args, kwargs = torch.fx.node.map_arg((tn.args, tn.kwargs), lambda a: env[a])
                n = gm.graph.create_node(tn.op, tn.target, args, kwargs, name=prefix + tn.name)
                n.meta = {k: v for k, v in tn.meta.items() if k not in _SHAPED_META}
                if fake_mode is not None:
                    fixed = template.shapes[tn]
                    with fake_mode:
                        n.meta["val"] = torch.empty(shape if fixed is None else fixed, dtype=template.dtypes[tn])
                env[tn] = n
    raise AssertionError("a template without an output")
