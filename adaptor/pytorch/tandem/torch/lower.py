"""Lowering a traced ATen graph (torch.fx) to Tandem's IR (a tandem.v1.Graph as a dict).

The graph comes from make_fx over a functionalized step, so every node is an
ATen op overload, a getitem of a multi-output op, a placeholder or a constant.
Each op maps to the registry op of the same name (docs/ops.md): "aten::addmm"
overload "default" -> "addmm", "aten::add" overload "Tensor" -> "add.Tensor".
Tensor arguments become inputs in schema order (an absent optional tensor is
left out); every other argument becomes an attribute under its ATen name.

A few rewrites make the functional graph complete and the IR explicit:
- a Python number in a tensor slot (`x * 0.9`) becomes the op's .Scalar
  variant where there is one, else a `scalar_tensor` node;
- `copy_` into a graph input (functionalization's write-back of a mutated
  buffer) becomes an update of that persistent tensor;
- `native_batch_norm` in training mode becomes
  `_native_batch_norm_legit_functional`, whose extra outputs (the updated
  running statistics) become updates of the persistent tensors; a batch
  norm that runs more than once in a step (a module called twice, or once
  per accumulated micro-batch) starts from its previous run's statistics;
- a 16-bit `native_layer_norm`'s mean and rstd are float32 (PyTorch's CPU
  kernel, which the trace runs, rounds them to the input's dtype; the
  registry keeps them in float32 as PyTorch's CUDA kernel does), and so are
  a 16-bit `native_batch_norm`'s save_mean and save_invstd (the same rule);
- Tandem's own ops (tandem::lstm, tandem::gru and their backward ops, from fused_rnn.py)
  become the registry ops of the same name, all their arguments inputs in
  schema order, every output declared (used or not), with `allow_tf32` as
  convolutions (PyTorch's cuDNN LSTM follows that flag too);
- the advanced-indexing ops (index.Tensor, index_put and their _unsafe_
  forms) carry `indexed_dims`, the positions of the index list's tensors:
  its None entries (dims left whole) are not inputs, so without it the
  daemon could not tell which dims the tensors index;
- scatter_reduce.two names a second output, the kernels' scratch (the
  registry declares it: the counts of a mean), which nothing reads;
- convolution nodes carry `allow_tf32` (torch.backends.cudnn.allow_tf32 at
  capture time) and `deterministic` (torch.backends.cudnn.deterministic or
  torch.use_deterministic_algorithms), so the daemon's cuDNN settings are
  the ones PyTorch would use
  (TF32 by default for convolutions and the fused LSTM; other matrix
  products never use TF32, which is also PyTorch's default);
- dead nodes are dropped.

Nothing here talks to the daemon; the result is checked by the daemon's
registry when the job registers.
"""

import math
import operator

import torch
import torch.fx

from tandem.errors import CaptureError
from tandem.torch import dtypes

# Arguments that say where or how to allocate, which the IR does not have.
_DROPPED_ARGS = {"layout", "device", "pin_memory", "memory_format", "non_blocking", "generator"}
_SCALAR_VARIANTS = {"add.Tensor": "add.Scalar", "sub.Tensor": "sub.Scalar", "mul.Tensor": "mul.Scalar",
                    "div.Tensor": "div.Scalar"}
_BATCH_NORM_OPS = {"native_batch_norm", "_native_batch_norm_legit"}
# Ops that draw random numbers from (their `seed` attribute, the seed tensor fed each iteration, the element
# index) (ir/ops/dropout_mask.h, random_draws.h). Each node gets its own `seed`, so that two dropouts of one
# shape draw different masks, and reads the feed SEED_FEED, which the job sets anew every iteration.
_RANDOM_OPS = {"native_dropout", "bernoulli.p", "rand", "randn"}
SEED_FEED = "rng/seed"
# Pointwise ops whose operands PyTorch promotes to one dtype: op -> the arguments that take part.
_PROMOTING = {op: ("self", "other") for op in (
    "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum", "minimum", "atan2", "fmod.Tensor",
    "remainder.Tensor", "div.Tensor_mode", "bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor",
    "eq.Tensor", "ne.Tensor", "lt.Tensor", "le.Tensor", "gt.Tensor", "ge.Tensor")}
_PROMOTING.update({"where.self": ("self", "other"), "pow.Tensor_Tensor": ("self", "exponent"),
                   "lerp.Tensor": ("self", "end", "weight"), "addcmul": ("self", "tensor1", "tensor2"),
                   "addcdiv": ("self", "tensor1", "tensor2")})
# Reductions and scans that PyTorch computes in int64 for a bool or narrower integer input (a count of the
# pixels a segmentation loss keeps: sum(bool)). The registry's kernels take int64 for integers: such an input
# reaches them through an int64 _to_copy.
_INT64_ACCUMULATING = {"sum", "sum.dim_IntList", "prod", "prod.dim_int", "cumsum", "cumprod"}
_NARROW_INTEGERS = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32}
# Ops whose CUDA kernels follow torch.backends.cudnn.allow_tf32 through an attribute.
_CUDNN_CONVOLUTION_OPS = {"convolution", "convolution_backward"}
# Ops of the `tandem` namespace (fused_rnn.py) -> registry op. Their arguments are all tensors.
_TANDEM_OPS = {f"tandem::{op}": op for op in ("lstm", "lstm_backward", "gru", "gru_backward")}
# Functionalization's copying variants of ops the registry has under another name.
_RENAMES = {"detach_copy": "clone", "alias_copy": "clone", "lift_fresh_copy": "clone",
            # zero_ functionalized: a tensor of self's shape and dtype, all zeros.
            "zero": "zeros_like",
            # Batch norm's Core ATen spellings: the arguments of native_batch_norm (no_stats: without the
            # running statistics; no_training: without `training`, which is false).
            "_native_batch_norm_legit": "native_batch_norm", "_native_batch_norm_legit.no_stats": "native_batch_norm",
            "_native_batch_norm_legit_no_training": "native_batch_norm",
            # torch 1.13's dropout decomposition leaves an in-place bernoulli_ that functionalization keeps;
            # its users read its result, a fresh draw of self's shape and dtype: bernoulli.p.
            "bernoulli_.float": "bernoulli.p"}
_HALF_DTYPES = (torch.bfloat16, torch.float16)
# Ops whose `Tensor?[] indices` may hold None: the positions of its tensors become `indexed_dims`.
_OPTIONAL_INDEX_OPS = {"index.Tensor", "_unsafe_index.Tensor", "index_put", "_unsafe_index_put"}
# Registry ops with outputs PyTorch's op does not have (scratch space of their kernels) -> how many.
_SCRATCH_OUTPUTS = {"scatter_reduce.two": 1}


class Input:
    """A graph input: kind "persistent" (with its initial value) or "feed"."""

    def __init__(self, kind, name, tensor):
        self.kind, self.name, self.tensor = kind, name, tensor


class Output:
    """A graph output: kind "fetch" (name is the caller's key) or "update" (name is the persistent)."""

    def __init__(self, kind, name):
        self.kind, self.name = kind, name


class Lowered:
    """The result: `graph` (a tandem.v1.Graph dict), `persistent` [(name, tensor)] with initial values,
    `fetch_names` caller key -> IR tensor name, `feed_specs` [(name, dtype, shape)]."""

    def __init__(self):
        self.graph = {"feeds": [], "nodes": [], "fetches": [], "updates": []}
        self.persistent = []
        self.values = {}  # IR name -> the value PyTorch computed for it while lowering (for checks)
        self.fetch_names = {}
        self.feed_specs = []


# Primitives (prims::) that torch 1.13's decompositions leave in a trace, and the ATen op each one is
# (convert_element_type(a, dtype): a bool tensor's sum, e.g. a count of correct predictions).
_PRIMS = {"where": "where.self", "convert_element_type": "_to_copy"}


def op_name(target):
    """The registry name of an ATen op overload: aten::add.Tensor -> "add.Tensor" (prims::where -> "where.self")."""
    schema = target._schema
    namespace, _, base = schema.name.rpartition("::")
    if namespace == "prims" and base in _PRIMS:
        return _PRIMS[base]
    overload = schema.overload_name
    return base if overload in ("", "default") else f"{base}.{overload}"


def _is_tensor_type(t):
    if isinstance(t, torch._C.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch._C.TensorType)


def _float_attr(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return float(v)


def attr_value(v, what):
    """An AttrValue dict for a non-tensor argument, or None where the IR has no such argument."""
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, int):
        return {"i": str(v)}
    if isinstance(v, float):
        return {"f": _float_attr(v)}
    if isinstance(v, torch.dtype):
        return {"dtype": dtypes.name_of(v, what)}
    if isinstance(v, str):
        return {"s": v}
    if isinstance(v, (list, tuple)):
        if all(isinstance(e, (bool, int)) for e in v):
            return {"ints": {"values": [str(int(e)) for e in v]}}
        if all(isinstance(e, (bool, int, float)) for e in v):
            return {"floats": {"values": [_float_attr(float(e)) for e in v]}}
    if isinstance(v, (torch.device, torch.layout, torch.memory_format)):
        return None
    raise CaptureError(f"{what}: argument value {v!r} ({type(v).__name__}) has no Tandem attribute form")


def _spec(name, value):
    return {"name": name, "dtype": dtypes.name_of(value.dtype, f"tensor '{name}'"),
            "shape": [str(s) for s in value.shape]}


def _traced_values(gm, example_inputs):
    """node -> value as the trace knows it, without running anything: the example inputs for the
    placeholders, the module's constants, and the (fake) values the tracer recorded for every op, which
    carry shapes and dtypes only."""
    values = {}
    placeholders = iter(example_inputs)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            values[n] = next(placeholders)
        elif n.op == "get_attr":
            values[n] = getattr(gm, n.target)
        elif n.op == "call_function":
            if "val" in n.meta:
                values[n] = n.meta["val"]
            elif n.target is operator.getitem and n.args[0] in values:
                values[n] = values[n.args[0]][n.args[1]]
            else:
                raise CaptureError(f"internal: the trace recorded no value for {n.name}")
    return values


def run_recording(gm, example_inputs):
    """Runs the graph once on copies of the inputs; returns node -> value (tensor, tuple or None)."""
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            values[n] = out
            return out

    Recorder(gm).run(*[t.clone() if isinstance(t, torch.Tensor) else t for t in example_inputs])
    return values


class _Emitter:
    def __init__(self, gm, inputs, values, lowered):
        self.gm = gm
        self.values = values
        self.out = lowered
        self.names = {}  # fx node -> IR name (single-output nodes and getitems)
        self.used = {i.name for i in inputs}
        self.counter = 0
        self.random_nodes = 0
        # Batch norm running statistic (fx node) -> IR name of its newest value. The trace reads a running
        # statistic from the placeholder at every training-mode batch norm (the op's in-place update is hidden
        # from functionalization), so a module that runs more than once in a step (called twice, or once per
        # accumulated micro-batch) reads its previous call's result through this, as PyTorch's in-place update
        # makes it do.
        self.running_stats = {}

    def fresh(self, base):
        name = base
        while name in self.used:
            self.counter += 1
            name = f"{base}_{self.counter}"
        self.used.add(name)
        return name

    def node(self, op, inputs, outputs, attrs=None, label="", declared=None):
        entry = {"op": op, "inputs": list(inputs), "outputs": list(outputs)}
        if attrs:
            entry["attrs"] = attrs
        if label:
            entry["label"] = label
        if declared:
            entry["declared_outputs"] = declared
        self.out.graph["nodes"].append(entry)

    def scalar_tensor(self, value, label):
        if isinstance(value, bool):
            dtype, attr = "BOOL", {"i": str(int(value))}
        elif isinstance(value, int):
            dtype, attr = "INT64", {"i": str(value)}
        else:
            dtype, attr = "FLOAT64", {"f": _float_attr(float(value))}
        name = self.fresh("scalar")
        self.node("scalar_tensor", [], [name], {"s": attr, "dtype": {"dtype": dtype}}, label)
        return name

    def constant(self, n):
        value = self.values[n]
        label = n.meta.get("tandem_label", "")
        # A rank-0 constant of any IR dtype (16-bit floats too: their values are exact as Python floats)
        # becomes a scalar_tensor node rather than a persistent tensor.
        if value.dim() == 0 and value.dtype in dtypes.TO_CODE:
            name = self.fresh(n.name)
            s = value.item()
            attr = {"i": str(int(s))} if isinstance(s, (bool, int)) else {"f": _float_attr(s)}
            self.node("scalar_tensor", [], [name], {"s": attr, "dtype": {"dtype": dtypes.name_of(value.dtype)}},
                      label)
            return name
        name = self.fresh(f"const/{n.target}")
        self.out.persistent.append((name, value.detach().clone()))
        return name

    def seed_feed(self):
        """The IR name of the per-iteration seed (an int64 rank-0 feed), declared at its first use."""
        if SEED_FEED not in self.used:
            self.used.add(SEED_FEED)
            self.out.graph["feeds"].append({"name": SEED_FEED, "dtype": "INT64", "shape": []})
            self.out.feed_specs.append((SEED_FEED, torch.int64, ()))
        return SEED_FEED

    def promotion(self, n, name):
        """PyTorch's type promotion made explicit for the pointwise ops that promote (the registry takes equal
        dtypes, or a rank-0 operand of another dtype): ({argument names to convert}, dtype). An operand with
        dims whose dtype is not the one PyTorch computes in (an int64 mask times a float gradient, which
        decompositions write) is converted by a _to_copy node first; rank-0 operands are left to the registry's
        rule."""
        promoting = _PROMOTING.get(name)
        if promoting is None:
            return set(), None
        schema_args = n.target._schema.arguments
        operands = []
        for i, arg in enumerate(schema_args):
            v = n.args[i] if i < len(n.args) else n.kwargs.get(arg.name)
            if arg.name in promoting and v is not None:
                operands.append((arg.name, self.values.get(v) if isinstance(v, torch.fx.Node) else v))
        if len(operands) < 2 or not all(isinstance(v, (torch.Tensor, bool, int, float)) for _, v in operands):
            return set(), None
        # Plain stand-ins of the traced values (shapes and dtypes only; they may be fake tensors).
        stand_ins = [torch.empty((1,) if v.dim() > 0 else (), dtype=v.dtype) if isinstance(v, torch.Tensor) else v
                     for _, v in operands]
        acc = stand_ins[0]
        for v in stand_ins[1:]:
            with_dims = any(isinstance(x, torch.Tensor) and x.dim() > 0 for x in (acc, v))
            acc = torch.empty((1,) if with_dims else (), dtype=torch.result_type(acc, v))
        dtype = acc.dtype
        convert = {a for a, v in operands if isinstance(v, torch.Tensor) and v.dim() > 0 and v.dtype != dtype}
        return convert, dtype

    def promoted(self, v, dtype, label):
        """The IR name of fx node `v` converted to `dtype` (a _to_copy node)."""
        name = self.fresh(f"{v.name}.to_{str(dtype).split('.')[-1]}")
        self.node("_to_copy", [self.ref(v)], [name], {"dtype": {"dtype": dtypes.name_of(dtype, name)}}, label)
        return name

    def ref(self, n):
        try:
            return self.names[n]
        except KeyError:
            raise CaptureError(f"internal: node {n.name} used before it is defined") from None

    def output_names(self, n, count):
        names = [None] * count
        for user in n.users:
            if user.op == "call_function" and user.target is operator.getitem:
                name = self.fresh(user.name)
                names[user.args[1]] = name
                self.names[user] = name
        return [nm if nm is not None else self.fresh(f"{n.name}.unused{i}") for i, nm in enumerate(names)]

    def declared(self, outputs, value):
        vals = value if isinstance(value, (tuple, list)) else [value]
        specs = []
        for name, v in zip(outputs, vals):
            if not isinstance(v, torch.Tensor):
                break
            specs.append(_spec(name, v))
        return specs

    def op(self, n, op, inputs, attrs):
        value = self.values.get(n)
        label = n.meta.get("tandem_label", "")
        if isinstance(value, (tuple, list)):
            outputs = self.output_names(n, len(value))
        else:
            outputs = [self.fresh(n.name)]
            self.names[n] = outputs[0]
        outputs += [self.fresh(f"{n.name}.scratch{i}") for i in range(_SCRATCH_OUTPUTS.get(op, 0))]
        self.node(op, inputs, outputs, attrs, label, self.declared(outputs, value))
        return outputs

    def generic(self, n, skip_args=()):
        target = n.target
        name = op_name(target)
        name = _RENAMES.get(name, name)
        skip_args = set(skip_args) | _skipped_args(name, n)
        label = n.meta.get("tandem_label", "")
        inputs, attrs = [], {}
        args = list(n.args)
        promoted_args, promote_to = self.promotion(n, name)
        if name in _INT64_ACCUMULATING and isinstance(n.args[0], torch.fx.Node):
            traced_in, traced_out = self.values.get(n.args[0]), self.values.get(n)
            if (isinstance(traced_in, torch.Tensor) and traced_in.dtype in _NARROW_INTEGERS
                    and isinstance(traced_out, torch.Tensor) and traced_out.dtype == torch.int64):
                promoted_args, promote_to = {target._schema.arguments[0].name}, torch.int64
        for i, arg in enumerate(target._schema.arguments):
            if i < len(args):
                v = args[i]
            elif arg.name in n.kwargs:
                v = n.kwargs[arg.name]
            elif name == "bernoulli.p" and arg.name == "p":
                v = arg.default_value  # the probability has a default (0.5) that the registry does not
            else:
                continue
            if arg.name in skip_args or v is None:
                continue
            if isinstance(v, torch.fx.Node):
                inputs.append(self.promoted(v, promote_to, label) if arg.name in promoted_args else self.ref(v))
            elif isinstance(v, (list, tuple)) and any(isinstance(e, torch.fx.Node) for e in v):
                inputs.extend(self.ref(e) for e in v if e is not None)
                if name in _OPTIONAL_INDEX_OPS and arg.name == "indices":
                    attrs["indexed_dims"] = attr_value([i for i, e in enumerate(v) if e is not None], name)
            elif _is_tensor_type(arg.type) and isinstance(v, (bool, int, float)):
                if name in _SCALAR_VARIANTS and arg.name == "other":
                    name = _SCALAR_VARIANTS[name]
                    attrs["other"] = attr_value(v, f"{name} in {label or n.name}")
                else:
                    inputs.append(self.scalar_tensor(v, label))
            elif arg.name in _DROPPED_ARGS:
                continue
            else:
                a = attr_value(v, f"{name} ({label or n.name}) argument '{arg.name}'")
                if a is not None:
                    attrs[arg.name] = a
        if op_name(target) == "_native_batch_norm_legit_no_training":
            attrs["training"] = {"b": False}
        if name in _RANDOM_OPS:
            inputs.append(self.seed_feed())
            self.random_nodes += 1
            attrs["seed"] = {"i": str(self.random_nodes)}
        if name in _CUDNN_CONVOLUTION_OPS:
            # PyTorch's cuDNN settings at capture time (TF32 allowed and any algorithm by default).
            attrs["allow_tf32"] = {"b": bool(torch.backends.cudnn.allow_tf32)}
            attrs["deterministic"] = {"b": bool(torch.backends.cudnn.deterministic
                                                or torch.are_deterministic_algorithms_enabled())}
        return self.op(n, name, inputs, attrs)


def _skipped_args(name, n):
    """Arguments that carry eager-mode layout details, not values, in a functional graph."""
    if name in ("_reshape_alias", "_reshape_alias_copy"):
        # The strides describe the eager tensor's memory layout (views of views); the values are
        # those of reshape(self, size), and every Tandem tensor is contiguous.
        return {"stride"}
    if name == "convolution_backward":
        mask = n.args[-1] if n.args and isinstance(n.args[-1], (list, tuple)) else n.kwargs.get("output_mask")
        if mask is not None and not mask[2]:
            # No bias gradient is asked for: the bias sizes ([0] for a bias-free convolution) say nothing.
            return {"bias_sizes"}
    return set()


def _live_nodes(gm, roots):
    live = set(roots)
    for n in reversed(list(gm.graph.nodes)):
        if n in live:
            live.update(n.all_input_nodes)
    return live


def lower(gm, inputs, outputs, example_inputs, record_values=False):
    """Lowers `gm` (placeholders in the order of `inputs`, returning a flat tuple matching
    `outputs`, where an Output may be None for values to ignore) to a Lowered. With `record_values` the
    graph runs once on the example inputs, so that Lowered.values holds what PyTorch computed for every
    tensor (for check.check_lowering); otherwise nothing runs and Lowered.values stays empty."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise CaptureError(f"internal: the traced graph has {len(placeholders)} inputs, expected {len(inputs)}")
    ph_input = dict(zip(placeholders, inputs))
    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat_out = output_node.args[0]
    if not isinstance(flat_out, (list, tuple)):
        flat_out = [flat_out]
    if len(flat_out) != len(outputs):
        raise CaptureError(f"internal: the traced graph has {len(flat_out)} outputs, expected {len(outputs)}")

    # Updates: functionalization's write-backs first, explicit outputs override them.
    updates = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and getattr(n.target, "_schema", None) is not None and \
                op_name(n.target) == "copy_" and n.args[0] in ph_input and ph_input[n.args[0]].kind == "persistent":
            updates[ph_input[n.args[0]].name] = n.args[1]
    fetches = {}
    for node, out in zip(flat_out, outputs):
        if out is None or node is None:
            continue
        if out.kind == "update":
            updates[out.name] = node
        else:
            fetches[out.name] = node

    # Batch norm in training mode: the running statistics become explicit updates.
    bn_nodes = [n for n in gm.graph.nodes if n.op == "call_function" and hasattr(n.target, "_schema")
                and op_name(n.target) in _BATCH_NORM_OPS and _bn_training(n)]
    for n in bn_nodes:
        for stat in _bn_running_stats(n):
            if stat in ph_input:
                updates.pop(ph_input[stat].name, None)

    roots = [v for v in list(updates.values()) + list(fetches.values()) if isinstance(v, torch.fx.Node)]
    roots += bn_nodes
    live = _live_nodes(gm, roots)
    # A real-mode trace (torch 1.13) records no values: the graph runs once for them.
    traced = all("val" in n.meta or n.target is operator.getitem for n in gm.graph.nodes if n.op == "call_function")
    values = _traced_values(gm, example_inputs) if traced and not record_values else run_recording(gm, example_inputs)

    lowered = Lowered()
    em = _Emitter(gm, inputs, values, lowered)
    for ph, spec in ph_input.items():
        em.names[ph] = spec.name
        if spec.kind == "persistent":
            lowered.persistent.append((spec.name, spec.tensor))
        else:
            # Every feed is declared, used or not: the caller sends all of them.
            lowered.graph["feeds"].append(_spec(spec.name, spec.tensor))
            lowered.feed_specs.append((spec.name, spec.tensor.dtype, tuple(spec.tensor.shape)))

    bn_updates = {}
    for n in gm.graph.nodes:
        if n not in live or n.op in ("placeholder", "output"):
            continue
        if n.op == "get_attr":
            em.names[n] = em.constant(n)
            continue
        if n.op != "call_function":
            raise CaptureError(f"internal: unexpected node kind {n.op} ({n.name})")
        if n.target is operator.getitem:
            if n not in em.names:
                raise CaptureError(f"internal: getitem {n.name} of a node that was not lowered")
            continue
        if not hasattr(n.target, "_schema"):
            raise CaptureError(
                f"the traced step calls {n.target} ({n.meta.get('tandem_label', n.name)}), which is not an ATen op; "
                "Tandem can only run steps that trace to ATen ops")
        if n.target._schema.name in _TANDEM_OPS:
            _lower_tandem_op(em, n)
            continue
        name = op_name(n.target)
        if name == "copy_":
            raise CaptureError(f"internal: in-place copy into a non-input ({n.name}) in a functionalized graph")
        if name in _BATCH_NORM_OPS or name in _RENAMES and _RENAMES[name] == "native_batch_norm":
            _widen_norm_stats(em, n)
            if name in _BATCH_NORM_OPS and _bn_training(n):
                bn_updates.update(_lower_batch_norm(em, n, ph_input))
                continue
        if name == "native_layer_norm":
            _widen_norm_stats(em, n)
        em.generic(n)

    if record_values:
        for node, name in em.names.items():
            value = values.get(node)
            if isinstance(value, torch.Tensor) and node.op != "placeholder":
                lowered.values[name] = value
    for persistent, node in updates.items():
        if not isinstance(node, torch.fx.Node):
            continue
        value = em.names[node]
        if value == persistent:
            continue
        if node.op == "placeholder" or node.op == "get_attr":
            copy = em.fresh(f"{persistent}.next")
            em.node("clone", [value], [copy])
            value = copy
        lowered.graph["updates"].append({"persistent": persistent, "value": value})
    for persistent, value in bn_updates.items():
        lowered.graph["updates"].append({"persistent": persistent, "value": value})
    for key, node in fetches.items():
        value = em.names[node]
        if node.op == "placeholder":
            copy = em.fresh(f"{key}.fetch")
            em.node("clone", [value], [copy])
            value = copy
        lowered.fetch_names[key] = value
        if value not in lowered.graph["fetches"]:
            lowered.graph["fetches"].append(value)
    return lowered


def _lower_tandem_op(em, n):
    """A tandem:: op: the registry op of the same name, its tensor arguments as inputs in schema order, and
    `allow_tf32`. Every output is named and declared, also those nothing reads (the backward ops' grad_gates)."""
    schema = n.target._schema
    arguments = list(n.args) + [n.kwargs[a.name] for a in schema.arguments[len(n.args):] if a.name in n.kwargs]
    if len(arguments) != len(schema.arguments) or not all(isinstance(a, torch.fx.Node) for a in arguments):
        raise CaptureError(f"internal: {schema.name} node {n.name} does not have its {len(schema.arguments)} "
                           "tensor arguments")
    # The CUDA kernels' matrix products follow torch.backends.cudnn.allow_tf32 at capture time, as PyTorch's
    # cuDNN LSTM does (TF32 by default).
    em.op(n, _TANDEM_OPS[schema.name], [em.ref(a) for a in arguments],
          {"allow_tf32": {"b": bool(torch.backends.cudnn.allow_tf32)}})


def _widen_norm_stats(em, n):
    """A 16-bit native_layer_norm's mean and rstd, and a 16-bit native_batch_norm's save_mean and save_invstd, are
    float32 in the IR (the registry's rule: PyTorch's CUDA kernels keep these statistics in float32, for batch norm
    whether the weight and running statistics are 16-bit or float32). PyTorch's CPU kernels, which the trace ran,
    round them to the input's dtype (batch norm's only when the weight is 16-bit: float32 weights give float32
    statistics already). Their recorded values (outputs 1 and 2; so their declared types and those of every getitem
    of them) are widened to float32; the backward reads them as they are. Batch norm's running statistics keep
    their dtype."""
    value = em.values.get(n)
    if not isinstance(value, (tuple, list)) or len(value) != 3 or value[0].dtype not in _HALF_DTYPES:
        return
    em.values[n] = (value[0], value[1].float(), value[2].float())
    for user in n.users:
        if user.op == "call_function" and user.target is operator.getitem and user.args[1] in (1, 2):
            em.values[user] = em.values[n][user.args[1]]


# ---- batch norm ----
# native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)

def _bn_arg(n, index, name, default=None):
    if index < len(n.args):
        return n.args[index]
    return n.kwargs.get(name, default)


def _bn_training(n):
    return bool(_bn_arg(n, 5, "training"))


def _bn_running_stats(n):
    return [s for s in (_bn_arg(n, 3, "running_mean"), _bn_arg(n, 4, "running_var")) if s is not None]


def _lower_batch_norm(em, n, ph_input):
    """Emits a training-mode native_batch_norm as _native_batch_norm_legit_functional, which returns the updated
    running statistics PyTorch's kernel writes in place (running = (1 - momentum) * running + momentum * batch
    statistic, with the unbiased batch variance) in the same pass over the input. Returns {persistent name: IR
    name of its new value}."""
    x = n.args[0]
    weight, bias = _bn_arg(n, 1, "weight"), _bn_arg(n, 2, "bias")
    rm, rv = _bn_arg(n, 3, "running_mean"), _bn_arg(n, 4, "running_var")
    label = n.meta.get("tandem_label", "")
    if rm is None or rv is None:
        em.generic(n)
        return {}
    xv = em.values[x]
    channels = xv.shape[1]
    count = xv.numel() // channels
    if count < 2:
        raise CaptureError(f"batch norm ({label or n.name}) in training mode needs more than one value per "
                           f"channel; the example batch gives {count}")
    if weight is None or bias is None:
        # The fused op takes an affine transform; without one, the statistics are spelled out.
        return _lower_batch_norm_unfused(em, n, ph_input, x, rm, rv, label)
    momentum = float(_bn_arg(n, 6, "momentum"))
    eps = float(_bn_arg(n, 7, "eps"))
    outputs = em.output_names(n, 3)
    new_stats = [em.fresh(f"{n.name}.new_running_mean"), em.fresh(f"{n.name}.new_running_var")]
    declared = em.declared(outputs, em.values[n]) + [_spec(new_stats[0], em.values[rm]),
                                                     _spec(new_stats[1], em.values[rv])]
    attrs = {"training": {"b": True}, "momentum": {"f": _float_attr(momentum)}, "eps": {"f": _float_attr(eps)}}
    em.node("_native_batch_norm_legit_functional",
            [em.ref(v) for v in (x, weight, bias)] + [_running_stat_ref(em, s) for s in (rm, rv)],
            outputs + new_stats, attrs, label, declared)
    return _running_stat_updates(em, ph_input, rm, rv, *new_stats)


def _running_stat_ref(em, stat):
    """The IR name of running statistic `stat`'s current value: its newest update in this step, else its own."""
    return em.running_stats.get(stat) or em.ref(stat)


def _running_stat_updates(em, ph_input, rm, rv, new_mean, new_var):
    """Records the new running statistics as current; returns {persistent name: new value} for those that are
    persistent tensors."""
    result = {}
    em.running_stats[rm], em.running_stats[rv] = new_mean, new_var
    for stat, value in ((rm, new_mean), (rv, new_var)):
        if stat in ph_input and ph_input[stat].kind == "persistent":
            result[ph_input[stat].name] = value
    return result


def _lower_batch_norm_unfused(em, n, ph_input, x, rm, rv, label):
    """native_batch_norm without its running statistics, then their update in elementwise ops."""
    momentum = float(_bn_arg(n, 6, "momentum"))
    outputs = em.generic(n, skip_args=("running_mean", "running_var"))
    xv = em.values[x]
    channels = xv.shape[1]
    count = xv.numel() // channels
    save_mean = outputs[1]
    view_shape = [1, channels] + [1] * (xv.dim() - 2)
    dims = [0] + list(range(2, xv.dim()))
    fresh = em.fresh

    def op(name, inputs, attrs=None):
        out = fresh(f"{n.name}.{name.split('.')[0]}")
        em.node(name, inputs, [out], attrs, label)
        return out

    mean_view = op("view", [save_mean], {"size": {"ints": {"values": [str(s) for s in view_shape]}}})
    centered = op("sub.Tensor", [em.ref(x), mean_view])
    squared = op("mul.Tensor", [centered, centered])
    var = op("mean.dim", [squared], {"dim": {"ints": {"values": [str(d) for d in dims]}},
                                     "keepdim": {"b": False}})
    keep = {"other": {"f": 1.0 - momentum}}
    new_mean = op("add.Tensor", [op("mul.Scalar", [_running_stat_ref(em, rm)], keep),
                                 op("mul.Scalar", [save_mean], {"other": {"f": momentum}})])
    new_var = op("add.Tensor", [op("mul.Scalar", [_running_stat_ref(em, rv)], keep),
                                op("mul.Scalar", [var], {"other": {"f": momentum * count / (count - 1)}})])
    return _running_stat_updates(em, ph_input, rm, rv, new_mean, new_var)
