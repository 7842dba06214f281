"""A session with tandemd, over libtandem's C ABI.

Client wraps one tandem_client: it registers jobs, submits iterations
(several may be in flight: submit returns a ticket at once, wait collects
it), reads persistent tensors back and closes jobs. It knows nothing of any
framework: tensors are HostTensor (dtype code, shape, address of contiguous
host bytes, plus an object that keeps those bytes alive) going in and
Result tensors (dtype code, shape, bytes) coming out.

Thread-safety: a Client may be used from several threads (libtandem
serializes its socket); close() must not race with other calls.
"""

import collections
import ctypes
import json
import re

from tandem import _lib
from tandem import errors

# tandem.v1.DType values.
FLOAT32, FLOAT64, INT64, INT32, BOOL, BFLOAT16, FLOAT16 = 1, 2, 3, 4, 5, 6, 7
DTYPE_NAMES = {FLOAT32: "FLOAT32", FLOAT64: "FLOAT64", INT64: "INT64", INT32: "INT32", BOOL: "BOOL",
               BFLOAT16: "BFLOAT16", FLOAT16: "FLOAT16"}
DTYPE_SIZES = {FLOAT32: 4, FLOAT64: 8, INT64: 8, INT32: 4, BOOL: 1, BFLOAT16: 2, FLOAT16: 2}

# Host bytes to send. `data` is an address; `owner` keeps the memory alive
# until the call that takes it returns (libtandem copies before returning).
HostTensor = collections.namedtuple("HostTensor", ["name", "dtype", "shape", "data", "nbytes", "owner"])

# A tensor that came back: dtype code, shape tuple, bytes.
ResultTensor = collections.namedtuple("ResultTensor", ["dtype", "shape", "data"])


class Result:
    """The fetches of one iteration, with its device and queueing times."""

    def __init__(self, tensors, run_seconds, queue_seconds):
        self.tensors = tensors  # name -> ResultTensor
        self.run_seconds = run_seconds
        self.queue_seconds = queue_seconds


_UNKNOWN_OP = re.compile(r"unknown op '([^']+)'(?: in (.*?))?; ")
_NODE = re.compile(r"node \d+ \(([^ )']+)(?: '([^']*)')?\)")


def _error(lib, code, what):
    message = lib.tandem_last_error().decode("utf-8", "replace")
    text = f"{what}: {message}" if what else message
    if code == errors.UNAVAILABLE:
        if "restart" in message:  # a daemon that restarts (after a device fault; a session of an earlier one)
            return errors.DaemonUnavailableError(text, code)
        return errors.DaemonUnavailableError(
            text + ". Start the daemon (tandemd, or `tandemd --device=cpu` without a GPU) or point TANDEM_ENDPOINT "
            "(or endpoint=) at a running one.", code)
    return errors.TandemError(text, code)


def _c_tensors(tensors):
    """A ctypes array of CTensor for `tensors`, and what keeps it valid."""
    array = (_lib.CTensor * len(tensors))()
    keep = []
    for i, t in enumerate(tensors):
        shape = (ctypes.c_int64 * max(len(t.shape), 1))(*t.shape)
        name = t.name.encode()
        keep.append((shape, name, t.owner))
        array[i] = _lib.CTensor(name, t.dtype, shape, len(t.shape), ctypes.c_void_p(t.data), t.nbytes)
    return array, keep


class Client:
    """One session with tandemd."""

    def __init__(self, endpoint=None, name="tandem-python", connect_timeout=30.0):
        self._lib = _lib.load()
        handle = ctypes.c_void_p()
        rc = self._lib.tandem_connect(endpoint.encode() if endpoint else None, name.encode(),
                                      float(connect_timeout), ctypes.byref(handle))
        if rc != 0:
            raise _error(self._lib, rc, "connecting to tandemd")
        self._handle = handle
        self.endpoint = endpoint

    @property
    def session_id(self):
        self._check_open()
        return self._lib.tandem_session_id(self._handle)

    def _check_open(self):
        if self._handle is None:
            raise errors.TandemError("the tandem client is closed")

    def _call(self, rc, what):
        if rc != 0:
            raise _error(self._lib, rc, what)

    def register_job(self, request, persistent=()):
        """Registers a job; `request` is a RegisterJobRequest as a dict (protobuf's JSON mapping),
        `persistent` HostTensors whose data replaces/extends request["persistent"] by name.
        Returns (job_id, RegisterJobResponse as a dict). A refused job raises RegistrationError,
        UnsupportedOpError for an op the registry lacks."""
        self._check_open()
        array, keep = _c_tensors(list(persistent))
        job_id = ctypes.c_uint64()
        response = ctypes.c_void_p()
        rc = self._lib.tandem_register_job(self._handle, json.dumps(request).encode(), array, len(persistent),
                                           ctypes.byref(job_id), ctypes.byref(response))
        del keep
        if rc != 0:
            message = self._lib.tandem_last_error().decode("utf-8", "replace")
            if rc == errors.UNAVAILABLE:
                raise _error(self._lib, rc, "registering the job")
            unknown = _UNKNOWN_OP.search(message)
            node = _NODE.search(message)
            if unknown or rc == errors.UNIMPLEMENTED:
                op = unknown.group(1) if unknown else (node.group(1) if node else None)
                label = (unknown.group(2) if unknown and unknown.group(2) else
                         (node.group(2) if node else None))
                where = f" (from {label})" if label else ""
                raise errors.UnsupportedOpError(
                    f"Tandem cannot run op '{op}'{where}: {message}. Replace the module or function that "
                    "produces it, or run this model in plain PyTorch.", rc, op=op, label=label)
            raise errors.RegistrationError(f"tandemd refused the job: {message}", rc)
        try:
            text = ctypes.cast(response, ctypes.c_char_p).value.decode()
        finally:
            self._lib.tandem_free_string(response)
        return job_id.value, json.loads(text)

    def submit(self, job_id, feeds, fetches, iteration=0, variant=""):
        """Queues one iteration of the job's graph `variant` (a name given at registration; "" the registered
        graph); returns a ticket for wait()."""
        self._check_open()
        array, keep = _c_tensors(list(feeds))
        names = (ctypes.c_char_p * max(len(fetches), 1))(*[f.encode() for f in fetches])
        ticket = ctypes.c_uint64()
        rc = self._lib.tandem_submit_variant(self._handle, job_id, variant.encode(), array, len(feeds), names,
                                             len(fetches), iteration, ctypes.byref(ticket))
        del keep
        self._call(rc, "submitting an iteration")
        return ticket.value

    def _take_result(self, result):
        try:
            tensors = {}
            for i in range(self._lib.tandem_result_count(result)):
                t = _lib.CTensor()
                self._call(self._lib.tandem_result_tensor(result, i, ctypes.byref(t)), "reading a result")
                shape = tuple(t.shape[k] for k in range(t.rank))
                data = ctypes.string_at(t.data, t.nbytes) if t.nbytes else b""
                tensors[t.name.decode()] = ResultTensor(t.dtype, shape, data)
            return Result(tensors, self._lib.tandem_result_run_seconds(result),
                          self._lib.tandem_result_queue_seconds(result))
        finally:
            self._lib.tandem_result_free(result)

    def wait(self, ticket):
        """Waits for a submitted iteration; returns its Result. A failed iteration raises
        IterationError; a daemon that went away DaemonUnavailableError."""
        self._check_open()
        result = ctypes.c_void_p()
        rc = self._lib.tandem_wait(self._handle, ticket, ctypes.byref(result))
        if rc != 0:
            if rc == errors.UNAVAILABLE:
                raise _error(self._lib, rc, "waiting for an iteration")
            message = self._lib.tandem_last_error().decode("utf-8", "replace")
            raise errors.IterationError(f"the iteration failed in tandemd: {message}", rc)
        return self._take_result(result)

    def read_tensor(self, job_id, name):
        """A persistent tensor's value after every iteration submitted before."""
        self._check_open()
        result = ctypes.c_void_p()
        self._call(self._lib.tandem_read_tensor(self._handle, job_id, name.encode(), ctypes.byref(result)),
                   f"reading '{name}'")
        return next(iter(self._take_result(result).tensors.values()))

    def close_job(self, job_id):
        self._check_open()
        self._call(self._lib.tandem_close_job(self._handle, job_id), "closing the job")

    def _json(self, fn, what):
        self._check_open()
        out = ctypes.c_void_p()
        self._call(fn(self._handle, ctypes.byref(out)), what)
        try:
            return json.loads(ctypes.cast(out, ctypes.c_char_p).value.decode())
        finally:
            self._lib.tandem_free_string(out)

    def stats(self):
        return self._json(self._lib.tandem_stats_json, "reading the daemon's stats")

    def list_sessions(self):
        return self._json(self._lib.tandem_list_sessions_json, "listing sessions")

    def close(self):
        """Ends the session; the daemon frees its jobs. Safe to call twice."""
        if self._handle is not None:
            self._lib.tandem_disconnect(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
