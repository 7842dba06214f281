"""The count search of the hosting benchmark: the largest number of models a mode hosts, in few probes.

Growth: from `start`, x4 up to 64, then x2 (4, 16, 64, 128, 256, ...), each count clipped to the mode's
cap: --max_count, or a lower one found on the way (the memory that fits, the MPS server's client limit, the
first model whose worker could not start). The first failing count starts a bisection between the largest
passing count and it, until the bracket is within `resolution` of the passing count. With `counts`, exactly
those counts are probed instead.

Why the search stopped is recorded (STOP_REASONS). A count is the mode's capacity when a failing count brackets
it, or when the mode can host no more (the memory, the MPS client limit: CAPACITY_REASONS); otherwise it is a
lower bound (the mode passed at --max_count, a worker failed, or time ran out).

Pure: probing is the caller's (probe(n, ahead) -> PASS, FAIL, BUDGET or CAPPED); nothing here starts processes
or reads clocks, so the tests drive it with a simulated capacity.
"""

PASS, FAIL, BUDGET, CAPPED = "pass", "fail", "budget", "capped"

STOP_REASONS = {
    "failed": "a failing count brackets the hosted one (within --resolution)",
    "max_count": "passed at --max_count: a lower bound",
    "mps_client_limit": "passed at the MPS server's client limit (--mps_max_clients): MPS hosts no more processes",
    "memory": "passed at the most models whose processes fit the free memory",
    "worker_failed": "passed below the first model whose worker could not start",
    "budget": "the next probe did not fit this mode's share of the time budget",
    "counts": "probed the given --counts",
}
# Stop reasons after which a mode's count is its capacity (it cannot host more), not only a lower bound.
CAPACITY_REASONS = ("failed", "mps_client_limit", "memory")
GROWTH_X4_BELOW = 64


def grow(n):
    """The next count of the growth phase after n."""
    return min(n * 4, GROWTH_X4_BELOW) if n < GROWTH_X4_BELOW else n * 2


def ladder(start, cap):
    """The counts the growth phase probes when every one passes: [start, ..., cap]."""
    counts, n = [], min(start, cap)
    while True:
        counts.append(n)
        if n >= cap:
            return counts
        n = min(grow(n), cap)


def ahead_of(n, cap, steps):
    """The count `steps` growth steps beyond n (at most cap): how far workers are started before they are due."""
    for _ in range(steps):
        n = min(grow(n), cap)
    return n


def search(probe, cap, start, resolution, counts=None, ahead_steps=1):
    """Runs the search. probe(n, ahead) probes n models (ahead: the largest count that may come next, whose
    workers the caller may start now; None when no larger count can follow) and answers PASS, FAIL, BUDGET (it
    did not fit the time left) or CAPPED (the cap fell below n on the way; the search asks cap() again).
    cap() -> (count, reason): the most models the mode can host now and why (a STOP_REASONS key).

    Returns {hosted, first_failing, stop_reason, lower_bound, at_cap, search}: hosted is the largest count that
    passed (0 if none), first_failing the smallest that failed above it (None if none), lower_bound whether
    hosted may be below the capacity (no failing count brackets it, and the cap was not one of
    CAPACITY_REASONS), at_cap whether it passed at the cap."""
    if counts:
        return _probe_counts(probe, cap, counts)
    lo, hi, n = 0, None, start
    while hi is None:  # growth
        limit, why = cap()
        n = min(n, limit)
        if n <= lo:
            return _result(lo, None, why, at_cap=True)
        ahead = ahead_of(n, limit, ahead_steps) if n < limit else None
        got = probe(n, ahead)
        if got == CAPPED:
            continue
        if got == BUDGET:
            return _result(lo, None, "budget")
        if got == PASS:
            lo, n = n, grow(n)
        else:
            hi = n
    while hi - lo > max(1, lo * resolution):  # bisection
        limit, why = cap()
        if limit < hi:  # counts from limit on cannot be probed any more
            if limit <= lo:
                return _result(lo, hi, why, at_cap=True)
        m = min((lo + hi) // 2, limit)
        got = probe(m, None)
        if got == CAPPED:
            continue
        if got == BUDGET:
            return _result(lo, hi, "budget")
        lo, hi = (m, hi) if got == PASS else (lo, m)
    return _result(lo, hi, "failed")


def _probe_counts(probe, cap, counts):
    outcome = {}
    i = 0
    why = "counts"
    while i < len(counts):
        n = counts[i]
        limit, cap_why = cap()
        if n > limit:
            why = cap_why
            break
        got = probe(n, counts[i + 1] if i + 1 < len(counts) else None)
        if got == CAPPED:
            continue
        if got == BUDGET:
            why = "budget"
            break
        outcome[n] = got == PASS
        i += 1
    passed = [n for n, ok in outcome.items() if ok]
    hosted = max(passed) if passed else 0
    failing = [n for n, ok in outcome.items() if not ok and n > hosted]
    return _result(hosted, min(failing) if failing else None, why, at_cap=why not in ("counts", "budget"))


def _result(lo, hi, reason, at_cap=False):
    lower_bound = hi is None and reason not in CAPACITY_REASONS
    if reason == "failed" or (hi is not None and reason == "counts"):
        text = f"hosts {lo}: {hi} failed" + (f" (bracket within {hi - lo})" if lo else "")
    elif hi is not None:
        text = f"hosts {lo}, {hi} failed; stopped: {STOP_REASONS.get(reason, reason)}"
    else:
        text = f"hosts {'at least ' if lower_bound else ''}{lo}; stopped: {STOP_REASONS.get(reason, reason)}"
    return {"hosted": lo, "first_failing": hi, "stop_reason": reason, "lower_bound": lower_bound,
            "at_cap": bool(at_cap and hi is None), "search": text}
