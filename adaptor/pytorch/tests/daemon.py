"""A private tandemd for a test: started on an ipc endpoint in a temporary folder, stopped at the end.

The daemon binary is $TANDEMD (set by the ctest registration); without it the
newest build*/server/tandemd of the source tree is used. TANDEM_LIB is
likewise set by ctest; without it the package finds libtandem in the build
tree.
"""

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
SOURCE_ROOT = os.path.dirname(os.path.dirname(PACKAGE_ROOT))
for _path in (PACKAGE_ROOT, os.path.join(SOURCE_ROOT, "client", "python")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import tandem  # noqa: E402


def _alive(pid):
    """Whether process `pid` runs (a zombie nobody reaped does not: a container's first process may never reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def tandemd_path():
    path = os.environ.get("TANDEMD")
    if path:
        return path
    builds = glob.glob(os.path.join(SOURCE_ROOT, "build*", "server", "tandemd"))
    builds.sort(key=os.path.getmtime, reverse=True)
    if not builds:
        raise RuntimeError("tandemd not found: set TANDEMD or build the tandemd target")
    return builds[0]


class Daemon:
    """tandemd --device=cpu on ipc://<tmp>/tandemd.sock. Use as a context manager or start()/stop()."""

    def __init__(self, *extra_flags, session_timeout=3):
        self.dir = tempfile.mkdtemp(prefix="tandem-test-")
        self.endpoint = f"ipc://{self.dir}/tandemd.sock"
        self.flags = ["--device=cpu", f"--endpoint={self.endpoint}", f"--session_timeout={session_timeout}",
                      "--log_level=warning", *extra_flags]
        self.process = None
        self.log_path = os.path.join(self.dir, "tandemd.log")

    def start(self, timeout=20.0):
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen([tandemd_path(), *self.flags], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tandemd exited with {self.process.returncode}: {self.log()}")
            try:
                tandem.Client(endpoint=self.endpoint, connect_timeout=0.5).close()
                return self
            except tandem.DaemonUnavailableError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tandemd did not answer within {timeout} s: {self.log()}")

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def kill(self):
        """Ends the daemon abruptly (SIGKILL), as a crash would: the process started, and the worker that serves
        under it (server/standby.h: it dies with its keeper, a moment later), which this waits for."""
        if self.process is not None and self.process.poll() is None:
            worker = self._worker_pid()
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            deadline = time.monotonic() + 5
            while worker and _alive(worker) and time.monotonic() < deadline:
                time.sleep(0.01)

    def _worker_pid(self):
        try:
            with tandem.Client(endpoint=self.endpoint, connect_timeout=0.5) as client:
                return int(client.stats().get("worker_pid", 0))
        except (tandem.TandemError, ValueError, OSError):
            return 0

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
