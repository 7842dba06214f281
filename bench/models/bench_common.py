"""What the GPU benchmark programs share: the reference models at the sizes of
GPU.md (or tiny), run metadata, a private tandemd, budgets, cleanup on signals.

Used by bench/models/overhead.py, bench/pairs/pair_matrix.py and
bench/memory/planner_quality.py. Import it after putting bench/models on
sys.path; importing it puts the PyTorch adaptor (adaptor/pytorch) and the
reference models (examples/pytorch/models.py) on sys.path too.

Nothing here is thread-safe; each program uses it from its main thread.
"""

import datetime
import json
import os
import platform
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
for _path in (os.path.join(REPO_ROOT, "adaptor", "pytorch"), os.path.join(REPO_ROOT, "client", "python"),
              os.path.join(REPO_ROOT, "examples", "pytorch")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import torch  # noqa: E402

import models  # noqa: E402  (examples/pytorch/models.py)

MODEL_NAMES = ("fcn5", "resnet50", "vgg19", "lstm", "transformer")

# The sizes of GPU.md. Dropout is off everywhere so that a job's losses can be
# compared with PyTorch's step for step (Tandem draws its own random numbers).
_FULL = {
    "fcn5": lambda: models.mlp(inputs=784, hidden=4096, classes=10, batch=256),
    "resnet50": lambda: models.resnet50(batch=32),
    "vgg19": lambda: models.vgg19(dropout=0.0, batch=32),
    "lstm": lambda: models.lstm_lm(vocab=10000, embed=1024, hidden=1024, layers=2, dropout=0.0, seq=35, batch=64),
    "transformer": lambda: models.transformer(dropout=0.0),
}
_TINY_NAME = {"fcn5": "mlp", "resnet50": "resnet50", "vgg19": "vgg19", "lstm": "lstm", "transformer": "transformer"}

DESCRIPTIONS = {
    "fcn5": "784-4096x4-10 MLP, batch 256",
    "resnet50": "ResNet-50, 224x224, batch 32",
    "vgg19": "VGG-19, 224x224, batch 32, no dropout",
    "lstm": "2x1024 LSTM LM, seq 35, vocab 10k, batch 64, no dropout",
    "transformer": "6x512 transformer encoder LM, seq 128, vocab 32k, batch 16, no dropout",
}

LR = 0.01
MOMENTUM = 0.9
ALIGN = 256  # the daemon's device alignment (device::kDeviceAlignment)


def build_model(name, small):
    """(model on the CPU, loss_fn, make_batch(generator) -> (input, target)), seeded so that every call
    gives the same initial weights."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODEL_NAMES)}")
    torch.manual_seed(0)
    return models.tiny(_TINY_NAME[name]) if small else _FULL[name]()


def make_batches(make_batch, count, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [make_batch(g) for _ in range(count)]


def sgd(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def eager_step(model, loss_fn, optimizer, batch):
    """One training step as a user writes it: batch = (inputs..., target); returns the loss."""
    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(*batch[:-1]), batch[-1])
        loss.backward()
        optimizer.step()
        return loss
    return step


def cuda_timed(fn, iters, warmup=3):
    """Seconds per call of `fn` on the GPU, after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def parse_models(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in MODEL_NAMES:
            raise SystemExit(f"unknown model {n!r}; choose from {', '.join(MODEL_NAMES)}")
    return names


def torch_device(requested):
    """'cuda' or 'cpu' from --device (auto: cuda when available)."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU here; use --device cpu (with --small) for a smoke test")
    return requested


def like_for_like_numerics():
    """PyTorch's default numerics, which Tandem's jobs follow: float32 matrix products without TF32, cuDNN
    convolutions with TF32 allowed (the adaptor copies torch.backends.cudnn.allow_tf32 into the job at
    capture). TANDEM_BENCH_TF32=0 turns TF32 off for the convolutions of both sides."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = os.environ.get("TANDEM_BENCH_TF32", "1") != "0"


def numerics():
    """The numerics in force, for the results' metadata."""
    return {"matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "conv_tf32": torch.backends.cudnn.allow_tf32}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def tensor_bytes(t):
    return t.numel() * t.element_size()


def aligned(nbytes):
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


# ---- metadata and output ----

def git_commit():
    """The commit the tree was built from: $TANDEM_GIT_COMMIT, else `git rev-parse HEAD`, else None."""
    env = os.environ.get("TANDEM_GIT_COMMIT")
    if env:
        return env
    if shutil.which("git") is None:
        return None
    try:
        out = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def nvidia_smi(fields):
    """{field: value} of GPU 0 from nvidia-smi (no CUDA context is created), or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.stdout.strip().split(",")]
    return dict(zip(fields, values)) if out.returncode == 0 and len(values) == len(fields) else None


def gpu_name(device):
    """The GPU's name, from nvidia-smi where possible so that asking does not create a CUDA context here."""
    if device == "cuda":
        smi = nvidia_smi(["name"])
        return smi["name"] if smi else torch.cuda.get_device_name()
    return f"cpu ({platform.processor() or platform.machine()})"


def metadata(device):
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu_name(device),
        "device": device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if device == "cuda" else None,
        "python": platform.python_version(),
        "host": platform.node(),
        "git_commit": git_commit(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv),
    }


def stopped_early(name, result, error):
    """Records why the program `name` stopped before its end, in `result` and the log; returns its exit status."""
    result["error"] = f"{type(error).__name__}: {error}"
    log(f"{name}: stopped early: {error}")
    if not isinstance(error, (KeyboardInterrupt, Terminated)):
        traceback.print_exc()
    return 1


def write_json(path, obj):
    """Writes atomically (a partial run leaves the last complete state)."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def log(*parts):
    print(*parts, flush=True)


def ms(seconds):
    return None if seconds is None else round(seconds * 1e3, 4)


class Budget:
    """A wall-clock budget: left() seconds remain; the programs skip work that would not fit."""

    def __init__(self, seconds):
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self):
        return time.monotonic() - self.start

    def left(self):
        return self.seconds - self.elapsed() if self.seconds else float("inf")


# ---- cleanup on signals ----

class Terminated(BaseException):
    """Raised in the main thread on SIGTERM/SIGHUP so that every finally: block runs (daemons, MPS)."""


def raise_on_signals():
    def handler(signum, _frame):
        raise Terminated(f"signal {signum}")

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)


def record_pid(pid, what):
    """Writes $BENCH_PIDDIR/<pid> so that a wrapper script can stop the process if we cannot."""
    piddir = os.environ.get("BENCH_PIDDIR")
    if piddir:
        try:
            os.makedirs(piddir, exist_ok=True)
            with open(os.path.join(piddir, str(pid)), "w") as f:
                f.write(what + "\n")
        except OSError:
            pass


def forget_pid(pid):
    piddir = os.environ.get("BENCH_PIDDIR")
    if piddir:
        try:
            os.remove(os.path.join(piddir, str(pid)))
        except OSError:
            pass


# ---- a private tandemd ----

def find_binary(name, env_var, build_subdir, explicit=None):
    """A program of the project: `explicit`, else $env_var, else `name` on PATH, else the newest
    build*/<build_subdir>/<name> of the tree."""
    for candidate in (explicit, os.environ.get(env_var), shutil.which(name)):
        if candidate:
            return candidate
    import glob
    builds = glob.glob(os.path.join(REPO_ROOT, "build*", build_subdir, name))
    builds.sort(key=os.path.getmtime, reverse=True)
    if not builds:
        raise SystemExit(f"{name} not found: pass --{name}, set {env_var}, or put the bundle's bin/ on PATH")
    return builds[0]


def find_tandemd(explicit=None):
    """--tandemd, else $TANDEMD, else `tandemd` on PATH, else the newest build*/server/tandemd of the tree."""
    return find_binary("tandemd", "TANDEMD", "server", explicit)


class Daemon:
    """tandemd on ipc://<tmp>/tandemd.sock, started with start() and always stopped with stop()."""

    def __init__(self, binary, device, policy="pack", extra_flags=(), log_dir=None, name="tandemd"):
        self.dir = tempfile.mkdtemp(prefix="tandem-bench-")
        self.endpoint = f"ipc://{self.dir}/tandemd.sock"
        self.flags = [f"--device={device}", f"--endpoint={self.endpoint}", f"--policy={policy}",
                      "--log_level=warning", "--session_timeout=120", *extra_flags]
        self.binary = binary
        self.policy = policy
        self.log_path = os.path.join(log_dir or self.dir, f"{name}.log")
        self.process = None
        self._log = None

    def start(self, timeout=60.0):
        import tandem
        self._log = open(self.log_path, "ab")
        self._log.write(f"=== {self.binary} {' '.join(self.flags)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen([self.binary, *self.flags], stdout=self._log, stderr=subprocess.STDOUT)
        record_pid(self.process.pid, f"tandemd {self.endpoint}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tandemd exited with {self.process.returncode}: {self.log_tail()}")
            try:
                tandem.Client(endpoint=self.endpoint, connect_timeout=0.5).close()
                log(f"tandemd up ({' '.join(self.flags)})")
                return self
            except tandem.DaemonUnavailableError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"tandemd did not answer within {timeout} s: {self.log_tail()}")

    def log_tail(self, chars=3000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stop(self):
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            forget_pid(self.process.pid)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def daemon_flags_beside_pytorch():
    """For a benchmark that runs PyTorch baselines in its own process on tandemd's GPU: half the device kept
    back from tandemd (--reserve_mib), which otherwise takes all of it at start and leaves eager and
    torch.compile out of memory (as on the H200, 2026-12-05: 133 of 140 GiB held by tandemd)."""
    import torch
    return [f"--reserve_mib={(torch.cuda.get_device_properties(0).total_memory // 2) >> 20}"]


def daemon_flags_for_large_models():
    """Registering VGG-19 sends 1.1 GiB of weights and momentum in one message (default limit 256 MiB)."""
    return [f"--max_message_bytes={3 << 30}"]


_DTYPE_BYTES = {"FLOAT32": 4, "FLOAT64": 8, "INT64": 8, "INT32": 4, "BOOL": 1, "BFLOAT16": 2, "FLOAT16": 2}
_VIEW_OPS = ("view", "view_copy", "_unsafe_view", "reshape", "_reshape_alias", "_reshape_alias_copy")
_ELEMENTWISE_PREFIXES = ("add.", "sub.", "mul.", "div.", "neg", "relu", "sqrt", "rsqrt", "pow.", "exp", "log",
                         "threshold_backward", "where.", "clone", "alias", "detach", "copy", "fill.", "tanh",
                         "sigmoid", "abs", "maximum", "minimum", "lerp.", "addcmul", "addcdiv")


def _ints(attr):
    return [int(v) for v in attr.get("ints", {}).get("values", [])]


def _broadcast(shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        out.append(max(dims) if dims else 1)
    return out


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _infer_undeclared(node, k, types):
    """(dtype, shape) of output k of a node the adaptor sent without a declared type, for the ops that are
    emitted that way (batch-norm statistics, views, unused gradients); None when unknown."""
    op, attrs = node["op"], node.get("attrs", {})
    ins = [types.get(i) for i in node["inputs"]]
    if op in _VIEW_OPS and ins and ins[0] and "size" in attrs:
        size = _ints(attrs["size"])
        if -1 in size:
            known = _numel([d for d in size if d != -1])
            size = [_numel(ins[0][1]) // max(known, 1) if d == -1 else d for d in size]
        return ins[0][0], size
    if (op.startswith("mean.dim") or op.startswith("sum.dim")) and ins and ins[0]:
        shape = ins[0][1]
        dims = [d % len(shape) for d in _ints(attrs.get("dim", {}))] or list(range(len(shape)))
        keep = attrs.get("keepdim", {}).get("b", False)
        return ins[0][0], [1 if i in dims else d for i, d in enumerate(shape)] if keep else \
            [d for i, d in enumerate(shape) if i not in dims]
    if op == "convolution_backward" and len(ins) >= 3 and ins[1] and ins[2]:
        return [ins[1], ins[2], (ins[2][0], [ins[2][1][0]])][k] if k < 3 else None
    if op.startswith(_ELEMENTWISE_PREFIXES) and ins and all(ins):
        return ins[0][0], _broadcast([t[1] for t in ins])
    return None


def graph_no_reuse_bytes(graph, persistent=()):
    """The arena without any reuse, as the daemon's planner defines it (compiler/iteration_layout.cc): the sum of
    the 256-aligned sizes of every feed and every node output. Sizes come from the feeds, `persistent`
    [(name, tensor)] and each node's declared outputs; outputs sent without a declared type are inferred for
    the ops the adaptor emits that way. Returns (bytes, number of outputs whose size stayed unknown)."""
    types = {}
    for f in graph["feeds"]:
        types[f["name"]] = (f.get("dtype", "FLOAT32"), [int(d) for d in f.get("shape", [])])
    for name, t in persistent:
        types[name] = (str(t.dtype).replace("torch.", "").upper(), list(t.shape))
    total = sum(aligned(_numel(types[f["name"]][1]) * _DTYPE_BYTES[types[f["name"]][0]]) for f in graph["feeds"])
    unknown = 0
    for node in graph["nodes"]:
        declared = {d["name"]: d for d in node.get("declared_outputs", [])}
        for k, out in enumerate(node["outputs"]):
            if out in declared:
                t = (declared[out].get("dtype", "FLOAT32"), [int(d) for d in declared[out].get("shape", [])])
            else:
                t = _infer_undeclared(node, k, types)
            if t is None or t[0] not in _DTYPE_BYTES:
                unknown += 1
                continue
            types[out] = t
            total += aligned(_numel(t[1]) * _DTYPE_BYTES[t[0]])
    return total, unknown


# ---- captures shared between the programs of one suite run ----

def _capture_cache_path(cache_dir, name, small):
    return os.path.join(cache_dir, f"{name}{'-small' if small else ''}.pt")


def save_capture(cache_dir, name, small, lowered, capture_seconds):
    """Saves the lowered step (graph and initial persistent tensors) so that a later program of the same run
    can register it without capturing again. No-op without a cache folder; failures only cost the reuse."""
    if not cache_dir:
        return
    try:
        os.makedirs(cache_dir, exist_ok=True)
        path = _capture_cache_path(cache_dir, name, small)
        tmp = f"{path}.{os.getpid()}.tmp"  # programs running side by side may save the same model
        torch.save({"graph": lowered.graph, "persistent": lowered.persistent, "capture_s": capture_seconds}, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        log(f"  (could not cache the capture of {name}: {e})")


def load_capture(cache_dir, name, small):
    """(graph, persistent [(name, tensor)], capture seconds) saved by save_capture, or None."""
    if not cache_dir:
        return None
    path = _capture_cache_path(cache_dir, name, small)
    if not os.path.exists(path):
        return None
    try:
        try:
            saved = torch.load(path, weights_only=False)  # our own file; torch >= 2.6 defaults to True
        except TypeError:  # a torch without the argument
            saved = torch.load(path)
    except (OSError, RuntimeError) as e:
        log(f"  (could not read the cached capture of {name}: {e})")
        return None
    return saved["graph"], saved["persistent"], saved.get("capture_s")


# ---- worker processes that talk JSON lines ----

class JsonLinesWorker:
    """A Python subprocess that reads one JSON command per line on stdin and writes one JSON event per line on
    stdout ({"event": ...}); events arrive on a queue, a line that is not JSON is echoed to stderr, and an
    {"event": "exit"} follows the last one. `failure(message, fatal)` builds the exception the caller's code
    raises when the worker is gone, stuck, or reports an error event."""

    def __init__(self, cmd, label, env, failure):
        self.label = label
        self.failure = failure
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     bufsize=1)
        record_pid(self.proc.pid, label)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                print(f"  [{self.label}] {line}", file=sys.stderr, flush=True)
        self.events.put({"event": "exit"})

    def send(self, obj):
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise self.failure(f"{self.label} is gone ({e})", True)

    def expect(self, event, deadline, skip_errors=False):
        """The next `event` before time.monotonic() reaches `deadline`. An error event raises failure(...,
        fatal=False) (or is skipped with skip_errors); the worker's exit or the deadline raise a fatal one."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.failure(f"{self.label}: no '{event}' in time", True)
            try:
                got = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if got.get("event") == event:
                return got
            if got.get("event") == "error" and not skip_errors:
                raise self.failure(f"{self.label}: {got.get('message')}", False)
            if got.get("event") == "exit":
                raise self.failure(f"{self.label} exited (code {self.proc.poll()})", True)

    def close(self):
        """Asks the worker to quit; kills it if it does not within 20 s."""
        if self.proc.poll() is None:
            try:
                self.send({"cmd": "quit"})
                self.proc.wait(timeout=20)
            except Exception:  # the worker's failure type, or a timeout
                self.proc.kill()
                self.proc.wait()
        forget_pid(self.proc.pid)
