"""Tandem's Python client: run training and inference steps in tandemd.

`tandem.torch` (import it explicitly) captures a PyTorch training step and
trains it through the daemon:

    import tandem.torch
    with tandem.torch.train(model, loss_fn, optimizer, (x, y)) as job:
        for x, y in loader:
            loss = job.step(x, y)

This module holds what needs no framework: the exceptions and the Client
(client/python/tandem). The framework adaptors are subpackages that live
with their frameworks' code in the source tree (adaptor/pytorch/tandem/torch)
and are installed into this package; `__path__` is extended so that a
source checkout with both folders on sys.path imports them too.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)  # noqa: F821  (tandem.torch from adaptor/pytorch)

from tandem.errors import (BatchError, CaptureError, DaemonUnavailableError, IterationError, JobClosedError,
                           LibraryNotFoundError, RegistrationError, TandemError, UnsupportedOpError)
from tandem.client import Client

__all__ = [
    "BatchError", "CaptureError", "Client", "DaemonUnavailableError", "IterationError", "JobClosedError",
    "LibraryNotFoundError", "RegistrationError", "TandemError", "UnsupportedOpError",
]
__version__ = "0.1.0"
