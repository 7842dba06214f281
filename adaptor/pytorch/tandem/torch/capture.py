"""Tracing a whole training step (or an inference step) into one ATen graph.

capture_training_step builds a pure function of flat tensors

    step(params, buffers, optimizer state, scalar feeds, batch)
        -> (loss, new trainable params, new optimizer state, buffers, named outputs)

that runs the model through functional_call, differentiates the loss with
grad (once per micro-batch when it accumulates gradients: the batch is
split along dim 0 and the gradients of loss_i / k are summed, as a PyTorch
accumulation loop sums them in .grad), clips the gradients where asked
(clipping.GradientClipping) and applies the optimizer's functional update
(optim.OptimizerPlan; traced once per parameter group and copied for every
parameter, stamp.UpdateStamper); then traces it with make_fx over functionalize on
the CPU, under fake tensors from torch 2.0 on (shapes and dtypes only: nothing of the model
runs, so capture time and memory do not grow with its FLOPs or its batch;
torch 1.13 runs the step once, compat.tracing_mode) and with PyTorch's core
decompositions (every op reaches the Core ATen opset; compat.decompositions). Module hooks label
every node with the module that produced it (forward nodes) or with
"backward" / "gradient clipping" / "optimizer", so that the daemon can name the module behind an
op it refuses. Where PyTorch allows it (fused_rnn.available()), every
nn.LSTM and nn.GRU layer traces to one tandem::lstm or tandem::gru op per
direction (and one backward op each).
Tracing needs the step's control flow to depend on shapes only; anything
else ends in a CaptureError that says so.
"""

import contextlib
import copy
import os
import threading

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from tandem.errors import BatchError, CaptureError
from tandem.torch import compat, fused_rnn, stamp
from tandem.torch.amp import Amp, autocast_region
from tandem.torch.batch import BatchLayout, as_batch
from tandem.torch.lower import Input, Output
from tandem.torch.outputs import output_function

_label_state = threading.local()


def _current_label():
    stack = getattr(_label_state, "stack", None)
    return stack[-1] if stack else getattr(_label_state, "phase", "")


@contextlib.contextmanager
def _labelled(module):
    """Labels every fx node created inside with the innermost module of `module` running at the time."""
    names = {id(m): ("model." + name if name else "model", type(m).__name__) for name, m in module.named_modules()}
    _label_state.stack = []
    _label_state.phase = ""

    def pre_hook(m, inputs):
        entry = names.get(id(m))
        if entry is not None:
            _label_state.stack.append(f"{entry[0]} ({entry[1]})")

    def post_hook(m, inputs, output):
        if id(m) in names and _label_state.stack:
            _label_state.stack.pop()

    from torch.fx.proxy import TracerBase
    original = TracerBase.create_node

    def create_node(self, *args, **kwargs):
        node = original(self, *args, **kwargs)
        label = _current_label()
        if label:
            node.meta["tandem_label"] = label
        return node

    pre = torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)
    post = torch.nn.modules.module.register_module_forward_hook(post_hook)
    TracerBase.create_node = create_node
    try:
        yield
    finally:
        TracerBase.create_node = original
        pre.remove()
        post.remove()
        _label_state.stack = []
        _label_state.phase = ""


@contextlib.contextmanager
def _rnn_weights_follow_attributes(module):
    """Makes RNN modules read their weights from their attributes while tracing.

    nn.LSTM/GRU/RNN keep a cached list of their weight tensors (_flat_weights) that functional_call does not
    refresh in every PyTorch version; the step would then use the real parameters as constants and never
    train them. A forward pre-hook rebuilds the list from the (swapped-in) attributes; the post-hook puts
    the original list back.
    """
    handles = []
    saved = {}

    def pre(m, inputs):
        saved[id(m)] = m._flat_weights
        m._flat_weights = [getattr(m, n) if hasattr(m, n) else None for n in m._flat_weights_names]

    def post(m, inputs, output):
        if id(m) in saved:
            m._flat_weights = saved.pop(id(m))

    for m in module.modules():
        if isinstance(m, torch.nn.RNNBase) and hasattr(m, "_flat_weights_names"):
            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        for m in module.modules():
            if id(m) in saved:
                m._flat_weights = saved.pop(id(m))


def _fused_rnns(module):
    """fused_rnn.fused_rnns(module) where the PyTorch version allows it: each nn.LSTM and nn.GRU layer then traces
    to one fused op per direction (and one backward op each) instead of its per-step ATen ops."""
    return fused_rnn.fused_rnns(module) if fused_rnn.available() else contextlib.nullcontext()


def _check_no_captured_state(gm, module):
    """Refuses a graph that holds one of the module's parameters or buffers as a constant: the step read it
    behind functional_call's back, and the job would silently never update it."""
    owned = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if t.numel() > 0:
            owned[t.data_ptr()] = name
    for n in gm.graph.nodes:
        if n.op != "get_attr":
            continue
        value = getattr(gm, n.target, None)
        if isinstance(value, torch.Tensor) and value.numel() > 0 and value.data_ptr() in owned:
            raise CaptureError(
                f"the step uses '{owned[value.data_ptr()]}' of the model as a constant: some code reads it other "
                "than as a module attribute (e.g. from a cached list of tensors), so Tandem cannot train it. "
                "Read parameters through their module attributes in forward().")


def _set_phase(phase):
    _label_state.phase = phase


def _cpu_model(model):
    """The model itself if it lives on the CPU, else a CPU copy (tracing always runs on the CPU)."""
    tensors = list(model.parameters()) + list(model.buffers())
    if all(t.device.type == "cpu" for t in tensors):
        return model
    return copy.deepcopy(model).cpu()


def capture_threads():
    """The intra-op threads a capture may use: $TANDEM_CAPTURE_THREADS, else 2. Under fake tensors (torch >= 2.0)
    the trace runs no kernels and is one Python thread whatever this is; under torch 1.13 the step runs once on
    the CPU, and a bound keeps captures that run at once (two clients on one host) from oversubscribing the
    cores and slowing each other down."""
    try:
        return max(1, int(os.environ.get("TANDEM_CAPTURE_THREADS", "2")))
    except ValueError:
        return 2


@contextlib.contextmanager
def _bounded_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(min(before, capture_threads()))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _writes_through_views(gm):
    """Whether a functionalized trace holds the backward of an in-place op on a view: autograd's CopySlices
    writes the view's gradient into its base's, which functionalization records as as_strided_scatter."""
    return any(n.op == "call_function" and getattr(n.target, "__name__", "").split(".")[0] == "as_strided_scatter"
               for n in gm.graph.nodes)


class _Replay(torch.fx.Interpreter):
    """Runs a traced graph node by node, labelling what it traces with each node's label."""

    def run_node(self, n):
        _label_state.stack = []
        _label_state.phase = n.meta.get("tandem_label", "")
        return super().run_node(n)


def _trace_through_autograd(fn, flat_inputs):
    """torch 1.13's trace of a step that writes through views (compat.engine_grad says why): make_fx of the step
    differentiated by the autograd engine, without functionalization (the joint graph of forward and backward,
    views and in-place ops as the model ran them), then that graph replayed under functionalize with the
    decompositions, as 1.13's AOTAutograd does. The step runs twice."""
    with compat.engine_grad():
        joint = compat.make_fx(fn, tracing_mode="real")(*[t.clone() for t in flat_inputs])
    for n in list(joint.graph.nodes):  # the engine's leaves: detach of an input is the input itself here
        if n.op == "call_function" and getattr(n.target, "__name__", "").split(".")[0] == "detach":
            n.replace_all_uses_with(n.args[0])
            joint.graph.erase_node(n)
    joint.recompile()
    gm = compat.make_fx(compat.functionalize(lambda *args: _Replay(joint).run(*args)),
                        decomposition_table=compat.decompositions(), tracing_mode="real")(*flat_inputs)
    _label_state.phase = ""
    return gm


def _trace(fn, flat_inputs, what):
    try:
        with compat.tracing_context(), _bounded_threads():
            gm = compat.make_fx(compat.functionalize(fn), decomposition_table=compat.decompositions(),
                                tracing_mode=compat.tracing_mode())(*flat_inputs)
            if compat.TORCH_VERSION < (2, 0) and _writes_through_views(gm):
                gm = _trace_through_autograd(fn, flat_inputs)
    except CaptureError:
        raise
    except Exception as e:  # the tracer reports failures as many exception types
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        hint = ""
        if any(k in str(e) for k in ("value out of a tracing tensor", "data-dependent", "_local_scalar_dense",
                                     "Data dependent", "item()")):
            hint = (" The step reads a tensor's value on the host (e.g. `if x.sum() > 0`, .item(), .tolist()) and "
                    "so its graph depends on the data. Tandem needs one static graph per step: make the control "
                    "flow depend on shapes only, or compute both branches and select with torch.where.")
        raise CaptureError(f"could not trace {what}: {type(e).__name__}: {text}.{hint}") from e
    return gm


def _micro_batch_size(batch, accumulate):
    """The size along dim 0 of one of the `accumulate` micro-batches that every batch tensor holds."""
    if not isinstance(accumulate, int) or isinstance(accumulate, bool) or accumulate < 1:
        raise CaptureError(f"accumulate must be a positive int (micro-batches per optimizer step), got {accumulate!r}")
    if accumulate == 1:
        return None
    sizes = {t.shape[0] if t.dim() > 0 else None for t in batch}
    if len(sizes) != 1 or None in sizes or next(iter(sizes)) % accumulate != 0:
        shapes = [list(t.shape) for t in batch]
        raise BatchError(f"with accumulate={accumulate} every batch tensor holds {accumulate} micro-batches along "
                         f"dim 0, so all must have one dim-0 size divisible by {accumulate}; the example's shapes "
                         f"are {shapes}")
    return next(iter(sizes)) // accumulate


def _micro_batch(data, m, micro):
    """The m-th micro-batch of (inputs, kwargs, targets): each tensor's rows [m * micro, (m + 1) * micro)."""
    inputs, kwargs, targets = data
    rows = slice(m * micro, (m + 1) * micro)
    return ([t[rows] for t in inputs], {k: t[rows] for k, t in kwargs.items()}, [t[rows] for t in targets])


def _concatenated(outputs):
    """The micro-batches' model outputs as the whole batch's: tensors, or tuples/lists/dicts of them, concatenated
    along dim 0."""
    flat = [tree_flatten(o) for o in outputs]
    leaves = [torch.cat(parts) for parts in zip(*(f[0] for f in flat))]
    return tree_unflatten(leaves, flat[0][1])


class TrainingCapture:
    """A traced training step: gm, its Inputs/Outputs for lower(), and the flat example inputs.

    batch_layout: the example batch's structure (batch.BatchLayout); batch_names its feed names in flat order.
    output_specs: {name: (fetch keys of its leaves, pytree spec)} of the step's named outputs beyond the loss.
    state_dict_sources: [(key of model.state_dict(), persistent name or None, value when None)] in
    model.state_dict()'s order: which persistent tensor holds each entry (tied names share one), or the value
    captured for an entry that is no parameter or buffer (extra state).
    amp: the amp.Amp it was captured with.
    """

    def __init__(self, gm, inputs, outputs, flat_inputs, plan, param_names, buffer_names, batch_layout,
                 output_specs, state_dict_sources, amp):
        self.gm = gm
        self.inputs = inputs
        self.outputs = outputs
        self.flat_inputs = flat_inputs
        self.plan = plan
        self.param_names = param_names
        self.buffer_names = buffer_names
        self.batch_layout = batch_layout
        self.batch_names = batch_layout.names
        self.output_specs = output_specs
        self.state_dict_sources = state_dict_sources
        self.amp = amp


def _state_dict_sources(model, param_names, buffer_names):
    owner = {}
    named = dict(model.named_parameters())
    named.update(model.named_buffers())
    for name in param_names + buffer_names:
        owner.setdefault(id(named[name]), name)
    sources = []
    for key, value in model.state_dict(keep_vars=True).items():
        source = owner.get(id(value)) if isinstance(value, torch.Tensor) else None
        if source is None and isinstance(value, torch.Tensor):
            value = value.detach().cpu().clone()
        sources.append((key, source, None if source else value))
    return sources


def capture_training_step(model, loss_fn, plan, example_batch, outputs=None, clipping=None, accumulate=1, amp=None):
    """Traces forward, loss, backward and the optimizer update of one step, and the named `outputs`
    (outputs.output_function). `example_batch` is a batch.Batch (or its short form, batch.as_batch): the step
    computes loss_fn(model(*inputs, **kwargs), *targets). `clipping` (a clipping.GradientClipping) clips the
    gradients before the update. With `accumulate` = k > 1 every batch tensor (inputs, keyword inputs and
    targets) holds k micro-batches along dim 0: the step runs forward and backward on each in turn (buffers such
    as batch norm's running statistics carried from one to the next), sums the gradients of loss_i / k and
    updates once; its loss is the sum of the loss_i / k, and the named outputs see the micro-batches' model
    outputs concatenated along dim 0 (the whole batch's). `amp` (an amp.Amp) runs forward and loss under
    autocast and scales the loss, with the optimizer's update skipped where a gradient is not finite."""
    example_batch = as_batch(example_batch)
    amp = amp or Amp()
    scaling = amp.scaling
    plan.device_steps = scaling is not None
    layout = BatchLayout(example_batch)
    extra_outputs = output_function(outputs)
    cpu_model = _cpu_model(model)
    named_params = list(model.named_parameters())
    cpu_named_params = list(cpu_model.named_parameters())
    named_buffers = list(cpu_model.named_buffers())
    param_names = [n for n, _ in named_params]
    buffer_names = [n for n, _ in named_buffers]
    index_of = {n: i for i, n in enumerate(param_names)}
    trainable = [index_of[n] for n, _ in plan.trainable]
    state_names = plan.state_names
    steps = plan.initial_steps()
    amp_state = scaling.initial_state() if scaling else []
    scalars = plan.example_scalars()
    batch = [t.detach().cpu() for t in layout.flat(example_batch)]
    micro = _micro_batch_size(batch, accumulate)

    P, B, T, S = len(param_names), len(buffer_names), len(trainable), len(scalars)
    K, G, A = len(state_names), len(steps), len(amp_state)
    output_specs = {}  # name -> (number of leaves, pytree spec) of its value, filled while tracing
    own_outputs = [0]  # how many outputs the step has before the stamper's (stamp.UpdateStamper)
    optimizer_phase = f"optimizer ({type(plan.optimizer).__name__})"
    stamper = None

    def update_one(key, p, grad, states, scalars, extras):
        """One parameter's update (key: its group's index and scalar names); with loss scaling (extras: the
        found-inf flag) none at all after an inf or NaN gradient, as GradScaler.step skips the step."""
        group, names = key
        _set_phase(optimizer_phase)
        new_p, new_states = plan.update_one(plan.groups[group], p, grad, states, dict(zip(names, scalars)))
        if extras:
            _set_phase("loss scaling")
            found_inf = extras[0]
            new_p = torch.where(found_inf, p, new_p)
            new_states = [torch.where(found_inf, old, new) for old, new in zip(states, new_states)]
            _set_phase(optimizer_phase)
        return new_p, new_states

    def step(*flat):
        if stamper:
            stamper.reset()  # _trace_through_autograd runs the step twice
        params = list(flat[:P])
        buffers = list(flat[P:P + B])
        states_flat = flat[P + B:P + B + T * K]
        states = [list(states_flat[i * K:(i + 1) * K]) for i in range(T)]
        at = P + B + T * K
        group_steps = list(flat[at:at + G])
        scale, tracker = flat[at + G:at + G + A] if scaling else (None, None)
        feed_scalars = list(flat[at + G + A:at + G + A + S])
        data = layout.split(flat[at + G + A + S:])  # (inputs, kwargs, targets)
        targets = data[2]

        def loss_of(trained, buffers, data):
            inputs, kwargs, targets = data
            full = list(params)
            for slot, t in zip(trainable, trained):
                full[slot] = t
            tensors = dict(zip(param_names, full))
            tensors.update(zip(buffer_names, buffers))
            _set_phase("")
            with amp.region():
                output = compat.functional_call(cpu_model, tensors, inputs, kwargs)
                _set_phase("loss")
                loss = loss_fn(output, *targets)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else ""
                raise CaptureError("loss_fn must return a scalar tensor (a 0-dim tensor), got "
                                   f"{type(loss).__name__}{shape}")
            if accumulate > 1:
                loss = loss / accumulate  # the accumulation loop's (loss_fn(...) / k).backward()
            _set_phase("backward")
            # GradScaler.scale: loss * scale, the scale a 1-element float32 tensor (so a 16-bit loss promotes).
            differentiated = (loss * scale).reshape(()) if scaling else loss
            # The model's output leaves the differentiated function only when named outputs need it.
            return differentiated, ((loss, buffers, output) if extra_outputs else (loss, buffers))

        # The buffers go in as an argument: grad refuses in-place updates (batch norm's running statistics)
        # of tensors the function closes over.
        trained = [params[i] for i in trainable]
        if accumulate == 1:
            grads, aux = compat.grad(loss_of, has_aux=True)(trained, buffers, data)
            grads, loss, buffers = list(grads), aux[0], aux[1]
            model_output = aux[2] if extra_outputs else None
        else:
            part_outputs = []
            for m in range(accumulate):
                _set_phase("")
                part = _micro_batch(data, m, micro)
                part_grads, aux = compat.grad(loss_of, has_aux=True)(trained, buffers, part)
                part_loss, buffers = aux[0], aux[1]
                if extra_outputs:
                    part_outputs.append(aux[2])
                _set_phase("backward")
                # .grad accumulates in order: ((g_1 + g_2) + g_3) + ...
                grads = list(part_grads) if m == 0 else [a + b for a, b in zip(grads, part_grads)]
                loss = part_loss if m == 0 else loss + part_loss
            model_output = _concatenated(part_outputs) if extra_outputs else None
        if scaling:
            _set_phase("loss scaling")
            grads, found_inf = scaling.unscale(grads, scale)
        if clipping:
            _set_phase("gradient clipping")
            grads = clipping.apply(grads)
        _set_phase(optimizer_phase)
        extras = [found_inf] if scaling else []
        if stamper is None:
            def one(g, i, p, grad, state, s):
                return update_one((g.index, tuple(s)), p, grad, state, list(s.values()), extras)
        else:
            def one(g, i, p, grad, state, s):
                return stamper.defer((g.index, tuple(s)), p, grad, state, list(s.values()), extras,
                                     (1 + i, [1 + T + i * K + k for k in range(K)]))
        new_params, new_states, new_steps = plan.update(trained, grads, states, feed_scalars, group_steps, one)
        new_amp = []
        if scaling:
            _set_phase("loss scaling")
            new_steps = [torch.where(found_inf, old, new) for old, new in zip(group_steps, new_steps)]
            new_amp = list(scaling.update(scale, tracker, found_inf))
        _set_phase("")
        flat_states = [s for per_param in new_states for s in per_param]
        leaves = []
        if extra_outputs:
            _set_phase("outputs")
            for name, value in extra_outputs(model_output, targets).items():
                flat_value, spec = tree_flatten(value)
                if not flat_value or not all(isinstance(t, torch.Tensor) for t in flat_value):
                    raise CaptureError(f"output '{name}' must be a tensor or a (nested) tuple/list/dict of "
                                       f"tensors, got {type(value).__name__}")
                output_specs[name] = (len(flat_value), spec)
                leaves += flat_value
            _set_phase("")
        own = (loss, *new_params, *flat_states, *new_steps, *new_amp, *buffers, *leaves)
        own_outputs[0] = len(own)
        return own + tuple(stamper.extra_outputs() if stamper else ())

    flat_inputs = [p.detach().cpu().clone() for _, p in cpu_named_params]
    flat_inputs += [b.detach().cpu().clone() for _, b in named_buffers]
    state_tensors = []
    for i in range(T):
        for _, value in plan.initial_state(i):
            state_tensors.append(value.detach().cpu())
    flat_inputs += state_tensors
    flat_inputs += steps + amp_state
    flat_inputs += scalars
    flat_inputs += batch

    with _labelled(cpu_model), _rnn_weights_follow_attributes(cpu_model), _fused_rnns(cpu_model):
        stamper = stamp.UpdateStamper(update_one) if stamp.enabled() else None
        gm = _trace(step, [t.clone() for t in flat_inputs], "the training step")
        if stamper and not stamper.apply(gm, lambda fn, inputs: _trace(fn, inputs, "the optimizer's update"),
                                         own_outputs[0]):
            stamper = None  # an update that depends on the parameter's shape: trace every one
            gm = _trace(step, [t.clone() for t in flat_inputs], "the training step")
    _check_no_captured_state(gm, cpu_model)

    inputs = [Input("persistent", n, t) for n, t in zip(param_names, flat_inputs[:P])]
    inputs += [Input("persistent", n, t) for n, t in zip(buffer_names, flat_inputs[P:P + B])]
    state_persistent = [f"optim/{plan.trainable[i][0]}/{s}" for i in range(T) for s in state_names]
    inputs += [Input("persistent", n, t) for n, t in zip(state_persistent, state_tensors)]
    amp_names = list(scaling.NAMES) if scaling else []
    inputs += [Input("persistent", n, t) for n, t in zip(plan.step_names() + amp_names, steps + amp_state)]
    inputs += [Input("feed", n, t) for n, t in zip(plan.scalar_names(), scalars)]
    inputs += [Input("feed", n, t) for n, t in zip(layout.names, batch)]

    outputs = [Output("fetch", "loss")]
    outputs += [Output("update", param_names[i]) for i in trainable]
    outputs += [Output("update", n) for n in state_persistent]
    outputs += [Output("update", n) for n in plan.step_names() + amp_names]
    outputs += [Output("update", n) for n in buffer_names]
    fetched = {}
    for name, (count, spec) in output_specs.items():
        keys = [f"outputs/{name}/{j}" for j in range(count)]
        outputs += [Output("fetch", k) for k in keys]
        fetched[name] = (keys, spec)
    return TrainingCapture(gm, inputs, outputs, flat_inputs, plan, param_names, buffer_names, layout, fetched,
                           _state_dict_sources(model, param_names, buffer_names), amp)


class InferenceCapture:
    def __init__(self, gm, inputs, outputs, flat_inputs, out_spec, input_names):
        self.gm = gm
        self.inputs = inputs
        self.outputs = outputs
        self.flat_inputs = flat_inputs
        self.out_spec = out_spec
        self.input_names = input_names


def capture_inference(model, example_inputs, autocast=None):
    """Traces model(*example_inputs) in eval mode without gradients (under autocast, a 16-bit dtype or None)."""
    cpu_model = _cpu_model(model)
    was_training = cpu_model.training
    named = list(cpu_model.named_parameters()) + list(cpu_model.named_buffers())
    names = [n for n, _ in named]
    data = [t.detach().cpu() for t in example_inputs]
    out_spec = {}

    def forward(*flat):
        tensors = dict(zip(names, flat[:len(names)]))
        with torch.no_grad(), autocast_region(autocast):
            out = compat.functional_call(cpu_model, tensors, flat[len(names):])
        leaves, spec = tree_flatten(out)
        out_spec["spec"] = spec
        if not all(isinstance(t, torch.Tensor) for t in leaves):
            raise CaptureError("the model's output must be a tensor or a (nested) tuple/list/dict of tensors")
        return tuple(leaves)

    flat_inputs = [t.detach().clone() for _, t in named] + data
    cpu_model.eval()
    try:
        with _labelled(cpu_model), _rnn_weights_follow_attributes(cpu_model), _fused_rnns(cpu_model):
            gm = _trace(forward, [t.clone() for t in flat_inputs], "the model's forward pass")
        _check_no_captured_state(gm, cpu_model)
    finally:
        cpu_model.train(was_training)
    input_names = [f"input/{i}" for i in range(len(data))]
    inputs = [Input("persistent", n, t) for n, t in zip(names, flat_inputs[:len(names)])]
    inputs += [Input("feed", n, t) for n, t in zip(input_names, data)]
    n_out = len(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    outputs = [Output("fetch", f"output/{i}") for i in range(n_out)]
    return InferenceCapture(gm, inputs, outputs, flat_inputs, out_spec["spec"], input_names)
