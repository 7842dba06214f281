"""Loading libtandem (the client library's C ABI, client/tandem_c.h) with ctypes.

The library is looked for, in order: the file named by $TANDEM_LIB; next to
the package (an install puts libtandem.so in the package folder or in a lib/
folder above it); in a build folder of the source tree the package sits in
(build*/client/libtandem.so, the newest first); then the system's library
path. The loaded library is shared by the process; ctypes releases the GIL
during every call, so blocking calls (waiting for an iteration) do not stall
other Python threads.
"""

import ctypes
import ctypes.util
import glob
import os
import threading

from tandem.errors import LibraryNotFoundError

C_API_VERSION = 1

_NAMES = ("libtandem.so", "libtandem.so.0")


class CTensor(ctypes.Structure):
    """tandem_tensor: a named, typed view of host bytes."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("rank", ctypes.c_int32),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
    ]


def _candidates():
    env = os.environ.get("TANDEM_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _NAMES:
        yield os.path.join(here, name)
    parent = here
    for _ in range(5):
        parent = os.path.dirname(parent)
        for name in _NAMES:
            yield os.path.join(parent, "lib", name)
            yield os.path.join(parent, "lib64", name)
    # The source tree: <root>/client/python/tandem.
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    builds = glob.glob(os.path.join(root, "build*", "client", "libtandem.so"))
    builds.sort(key=os.path.getmtime, reverse=True)
    yield from builds
    found = ctypes.util.find_library("tandem")
    if found:
        yield found


def _declare(lib):
    c_client_p = ctypes.c_void_p
    c_result_p = ctypes.c_void_p
    sigs = {
        "tandem_c_api_version": (ctypes.c_int, []),
        "tandem_last_error": (ctypes.c_char_p, []),
        "tandem_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_double,
                                          ctypes.POINTER(c_client_p)]),
        "tandem_disconnect": (None, [c_client_p]),
        "tandem_session_id": (ctypes.c_uint64, [c_client_p]),
        "tandem_register_job": (ctypes.c_int, [c_client_p, ctypes.c_char_p, ctypes.POINTER(CTensor),
                                               ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64),
                                               ctypes.POINTER(ctypes.c_void_p)]),
        "tandem_submit": (ctypes.c_int, [c_client_p, ctypes.c_uint64, ctypes.POINTER(CTensor), ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.c_uint64,
                                         ctypes.POINTER(ctypes.c_uint64)]),
        "tandem_submit_variant": (ctypes.c_int, [c_client_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.POINTER(CTensor),
                                                 ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                                 ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
        "tandem_wait": (ctypes.c_int, [c_client_p, ctypes.c_uint64, ctypes.POINTER(c_result_p)]),
        "tandem_read_tensor": (ctypes.c_int, [c_client_p, ctypes.c_uint64, ctypes.c_char_p,
                                              ctypes.POINTER(c_result_p)]),
        "tandem_close_job": (ctypes.c_int, [c_client_p, ctypes.c_uint64]),
        "tandem_stats_json": (ctypes.c_int, [c_client_p, ctypes.POINTER(ctypes.c_void_p)]),
        "tandem_list_sessions_json": (ctypes.c_int, [c_client_p, ctypes.POINTER(ctypes.c_void_p)]),
        "tandem_result_count": (ctypes.c_size_t, [c_result_p]),
        "tandem_result_tensor": (ctypes.c_int, [c_result_p, ctypes.c_size_t, ctypes.POINTER(CTensor)]),
        "tandem_result_run_seconds": (ctypes.c_double, [c_result_p]),
        "tandem_result_queue_seconds": (ctypes.c_double, [c_result_p]),
        "tandem_result_free": (None, [c_result_p]),
        "tandem_free_string": (None, [ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


_lock = threading.Lock()
_lib = None


def load():
    """The loaded libtandem; raises LibraryNotFoundError naming where it looked."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if not path or (os.path.sep in path and not os.path.exists(path)):
                tried.append(path)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            _declare(lib)
            version = lib.tandem_c_api_version()
            if version != C_API_VERSION:
                raise LibraryNotFoundError(
                    f"{path} has C API version {version}; this package needs {C_API_VERSION}. "
                    "Install matching versions of libtandem and the tandem Python package.")
            _lib = lib
            return lib
        raise LibraryNotFoundError(
            "libtandem.so not found (looked at: " + ", ".join(tried[:8]) + (", ..." if len(tried) > 8 else "") +
            "). Build the `tandem` target (cmake --build <build> --target tandem) or set TANDEM_LIB to the "
            "library's path.")
