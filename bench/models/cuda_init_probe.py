#!/usr/bin/env python3
"""What a fresh process pays to reach a usable CUDA context, and what keeps that cost down between two
processes (the restart after a device fault, docs/deploy.md): seconds for cuInit and for the primary context of
GPU 0 in a new process, (a) with nothing else holding the GPU, (b) while another process holds /dev/nvidia0 and
/dev/nvidiactl open (file descriptors only, no CUDA), (c) while another process holds a CUDA context. The card's
persistence mode is read, never changed.

    python3 bench/models/cuda_init_probe.py --out /tmp/out/cuda_init.json
"""

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import ctypes, json, time
t0 = time.monotonic()
cuda = ctypes.CDLL("libcuda.so.1")
t1 = time.monotonic()
rc = cuda.cuInit(0)
t2 = time.monotonic()
ctx = ctypes.c_void_p()
rc2 = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
rc3 = cuda.cuCtxSetCurrent(ctx)
free, total = ctypes.c_size_t(), ctypes.c_size_t()
rc4 = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
t3 = time.monotonic()
print(json.dumps({"dlopen_s": round(t1 - t0, 4), "cuinit_s": round(t2 - t1, 4), "context_s": round(t3 - t2, 4),
                  "rc": [rc, rc2, rc3, rc4]}))
"""

HOLD_FDS = r"""
import os, sys, time
fds = [os.open(p, os.O_RDWR) for p in ("/dev/nvidiactl", "/dev/nvidia0")]
print("held", flush=True)
sys.stdin.read()
"""

HOLD_CONTEXT = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
ctx = ctypes.c_void_p()
cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
cuda.cuCtxSetCurrent(ctx)
print("held", flush=True)
sys.stdin.read()
"""


def fresh(n):
    rows = []
    for _ in range(n):
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout
        row = json.loads(out)
        row["process_s"] = round(time.monotonic() - start, 4)
        rows.append(row)
    return rows


def with_holder(code, n):
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        return fresh(n)
    finally:
        holder.stdin.close()
        holder.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    mode = subprocess.run(["nvidia-smi", "--query-gpu=name,persistence_mode,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
    result = {"gpu": mode, "alone": fresh(args.repeats)}
    result["fds_held"] = with_holder(HOLD_FDS, args.repeats)
    result["context_held"] = with_holder(HOLD_CONTEXT, args.repeats)
    result["alone_after"] = fresh(args.repeats)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
