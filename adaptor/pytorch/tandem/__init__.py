"""Tandem's Python client: run training and inference steps in tandemd.

`tandem.torch` (import it explicitly) captures a PyTorch training step and
trains it through the daemon:

    import tandem.torch
    with tandem.torch.train(model, loss_fn, optimizer, (x, y)) as job:
        for x, y in loader:
            loss = job.step(x, y)

This module holds what needs no framework: the exceptions and the Client.
"""

from tandem.errors import (BatchError, CaptureError, DaemonUnavailableError, IterationError, JobClosedError,
                           LibraryNotFoundError, RegistrationError, TandemError, UnsupportedOpError)
from tandem.client import Client

__all__ = [
    "BatchError", "CaptureError", "Client", "DaemonUnavailableError", "IterationError", "JobClosedError",
    "LibraryNotFoundError", "RegistrationError", "TandemError", "UnsupportedOpError",
]
__version__ = "0.1.0"
