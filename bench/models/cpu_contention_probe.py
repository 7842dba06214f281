"""How many pure-Python loops a host runs at once at full speed: one loop alone, then 2, 4 and 8 at once,
each in its own process (the capture is one Python thread, so two captures at once should take one's time
on an idle many-core host). Prints JSON: the host's CPU count, its cgroup CPU limit, and per count the
slowest loop's seconds over the lone loop's."""
import json
import multiprocessing
import os
import time


def _loop(n):
    start = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - start


def main():
    n = 20_000_000
    result = {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0))}
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            result["cgroup_cpu_max"] = f.read().strip()
    except OSError:
        result["cgroup_cpu_max"] = None
    alone = _loop(n)
    result["alone_s"] = round(alone, 3)
    for count in (2, 4, 8):
        with multiprocessing.Pool(count) as pool:
            times = pool.map(_loop, [n] * count)
        result[f"{count}_at_once"] = round(max(times) / alone, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
