"""The exceptions of the tandem package.

Every failure the package reports is a TandemError. Each subclass names one
thing that went wrong and its message says what to do about it; `code` is the
daemon's absl::StatusCode value where the daemon (or libtandem) answered, else
None.

    TandemError
    ├── LibraryNotFoundError     libtandem.so could not be loaded
    ├── DaemonUnavailableError   no tandemd answers (not running, or it went away)
    ├── CaptureError             the training step could not be traced
    ├── RegistrationError        the daemon refused the job
    │   └── UnsupportedOpError   ... because an op has no Tandem equivalent
    ├── BatchError               a batch does not match the example batch
    ├── IterationError           an iteration failed in the daemon
    └── JobClosedError           the job was used after close()
"""

# absl::StatusCode values used below.
CANCELLED = 1
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
UNAVAILABLE = 14


class TandemError(Exception):
    """Base class of every error raised by the tandem package."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class LibraryNotFoundError(TandemError):
    """libtandem.so was not found or could not be loaded."""


class DaemonUnavailableError(TandemError, ConnectionError):
    """No tandemd answers at the endpoint: it is not running or it went away."""


class CaptureError(TandemError):
    """The model's training step could not be traced into one static graph."""


class RegistrationError(TandemError):
    """The daemon refused to register the job (bad graph, no memory, ...)."""


class UnsupportedOpError(RegistrationError):
    """An op of the captured step is not in Tandem's op registry.

    `op` is the op's registry name (e.g. "_adaptive_avg_pool2d") and `label`
    the module it came from, where known.
    """

    def __init__(self, message, code=None, op=None, label=None):
        super().__init__(message, code)
        self.op = op
        self.label = label


class BatchError(TandemError, ValueError):
    """A batch given to step() or a served model does not match the example."""


class IterationError(TandemError):
    """An iteration failed in the daemon (its updates were not applied)."""


class JobClosedError(TandemError):
    """The job was used after close()."""
