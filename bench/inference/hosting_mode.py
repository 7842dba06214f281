"""One mode's search for the most models it hosts: start what serves them, probe the counts hosting_search asks
for (hosting_probe), stop everything, also on errors.

A mode is a Mode (hosting_tandem, hosting_processes, hosting_server): open() starts its servers and the pool
of hosts the probes go through, caps() names what limits the count besides --max_count, close() stops what it
started. A pool is a hosting_pool.Pool of worker processes, or anything with the part of its interface used
here and in hosting_probe (hosting_server.ServerHost): spawn, wait_ready, go, cap_from_failure, preparing,
pause_preparing, resume, kill_preparing, ready_pids, go_notes, solo_ms, summary, close.

A probe that fails while hosts of larger counts were starting is repeated once with them paused (SIGSTOP), and
one that failed while the mode's server rebalanced (Mode.settling) once more; only the repeat counts. A probe
whose host died caps the pool below that host's first model.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))

import bench_common as bc  # noqa: E402

from hosting_pool import Pool, ProbeFailed, can_start_idle  # noqa: E402
from hosting_probe import log_probe, probe_seconds, run_probe  # noqa: E402
from hosting_search import BUDGET, CAPPED, FAIL, PASS, ahead_of, ladder, search  # noqa: E402
from hosting_stats import trim_models  # noqa: E402


class Mode:
    """A way to host the models, driven by run_mode. Used from the main thread only.

    Subclasses set the class attributes and implement open(); the other hooks default to a mode without a
    daemon. `out` is the mode's entry of the JSON (run_mode sets it before open()), `pool` the pool of hosts
    once open() made it (run_mode closes it), `stats_client` a tandem.Client of the mode's tandemd, if any (the
    probes record the daemon's account of them)."""

    name = None
    spawn_ahead = 0  # growth steps whose hosts start (in the background) while a probe runs; --spawn_ahead
    prespawn = False  # every host, up to the cap, ready before the first probe; --prespawn
    weight = 1.0  # the mode's share of --budget_s, relative to the other modes still to run

    def __init__(self, args, state, result):
        self.args, self.state, self.result = args, state, result
        self.out, self.pool, self.stats_client = None, None, None

    def fixed_cap(self):
        """(count, reason): a cap known before anything starts, or None."""
        return None

    def open(self, counts, idle):
        """Starts the mode's servers and self.pool, with hosts started for each of `counts` (one step each, the
        first under the normal policy, the others under SCHED_IDLE where `idle`); returns the pool."""
        raise NotImplementedError

    def wait_prespawned(self, count, deadline):
        """Waits for the hosts of `count` models before the first probe (prespawn): wait_ready's answer."""
        return self.pool.wait_ready(count, deadline)

    def caps(self):
        """[(count, reason, detail or None)]: what limits the count now, besides --max_count and the failures."""
        return []

    def check(self):
        """Raises when a server of the mode died (before each probe)."""

    def before_probe(self):
        """Called once the hosts of a probe are ready, before it runs."""

    def settling(self, probe):
        """Whether a failing probe ran while the mode's server rebalanced once-only work (it is repeated)."""
        return False

    def close(self):
        """Stops what open() started besides the pool (run_mode has closed that), recording into self.out."""


def environment_without_mps():
    """This process's environment without MPS's variables, which would make a PyTorch process an MPS client."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}


def start_pool(backend, args, specs, counts, idle, **kw):
    """A hosting_pool.Pool with one spawn per count of `counts`, so that the first probe waits only for its own
    workers; those of the later counts start under SCHED_IDLE where `idle`."""
    pool = Pool(backend, args, specs, idle=idle, **kw)
    for k, c in enumerate(counts):
        pool.spawn(c, idle=k > 0)
    return pool


def spawned_first(args, cap_count, steps, prespawn):
    """The count whose hosts start before the first probe."""
    if args.counts:
        return min(args.counts[0], cap_count)
    if prespawn:
        return cap_count
    return ahead_of(min(args.start, cap_count), cap_count, steps)


def run_mode(mode, args, result, deadline, save):
    """Searches how many models `mode` hosts, probing only while time.monotonic() + a probe < `deadline`; its
    JSON entry is result["modes"][mode.name] (save() writes the JSON after each probe)."""
    out = mode.out = result["modes"][mode.name] = {"probes": []}
    probes = out["probes"]
    began = time.monotonic()
    idle = args.idle_start and can_start_idle()
    out["background_start"] = "SCHED_IDLE" if idle else "normal"
    fixed = mode.fixed_cap()
    static_cap = min(args.max_count, fixed[0]) if fixed else args.max_count
    steps = args.spawn_ahead if args.spawn_ahead is not None else mode.spawn_ahead
    out["spawn_ahead"] = steps
    prespawn = not args.counts and (args.prespawn or mode.prespawn)
    out["prespawn"] = prespawn
    try:
        pool = mode.open(ladder(min(args.start, static_cap), spawned_first(args, static_cap, steps, prespawn)),
                         idle)
        out["specs"] = mode.state["specs"]
        if prespawn:  # every host ready before the first probe
            out["prespawn_wait"] = mode.wait_prespawned(
                static_cap, deadline - probe_seconds(args, min(args.start, static_cap)))
        out["setup_s"] = round(time.monotonic() - began, 2)

        def cap():
            options = [(args.max_count, "max_count", None)] + ([(*fixed, None)] if fixed else []) + mode.caps()
            failed = pool.cap_from_failure()
            if failed:
                options.append((failed[0], failed[1], None))
            return min(options, key=lambda o: o[0])

        def attempt(n):
            background = len(pool.preparing())
            try:
                r = run_probe(n, pool, args, mode.stats_client, args.device)
            except ProbeFailed as e:
                return {"n": n, "pass": False, "error": str(e)}
            r["background_starting"] = background
            return r

        def probe(n, ahead):
            mode.check()
            need = probe_seconds(args, n)
            if time.monotonic() + need > deadline:
                bc.log(f"  N={n}: skipped (budget: {max(0.0, deadline - time.monotonic()):.1f} s left of this "
                       f"mode's share, a probe takes {need:.1f} s)")
                return BUDGET
            if ahead:
                for c in ladder(n, ahead):
                    pool.spawn(c)
            ready = pool.wait_ready(n, deadline - need)
            if ready == "capped":
                return CAPPED
            if ready == "budget":
                bc.log(f"  N={n}: skipped (budget: its workers were not ready within this mode's share)")
                out["budget_note"] = f"the workers of N={n} were not ready within this mode's share"
                return BUDGET
            mode.before_probe()
            r = attempt(n)
            if not r["pass"] and r.get("background_starting") and time.monotonic() + need <= deadline:
                r["discarded"] = (f"failed while {r['background_starting']} worker(s) were starting; repeated "
                                  "with them paused")
                probes.append(r)
                log_probe(r, "  -> repeated with them paused")
                paused = pool.pause_preparing()
                try:
                    r = attempt(n)
                finally:
                    pool.resume(paused)
                r.update(repeat=True, background_paused=len(paused), background_starting=0)
            elif not r["pass"] and mode.settling(r) and time.monotonic() + need <= deadline:
                moved, captured = r["tandemd"]["lane_moves"], r["tandemd"]["graph_captures"]
                r["discarded"] = (f"failed while tandemd moved {moved} job(s) between lanes and captured {captured} "
                                  "graph(s); repeated once")
                probes.append(r)
                log_probe(r, "  -> repeated once, the moves and captures behind it")
                r = attempt(n)
                r.update(repeat=True)
            probes.append(r)
            save()
            log_probe(r)
            if "error" in r:
                return CAPPED  # the pool marked the host that failed: the cap is below n now
            if not r["pass"]:
                pool.kill_preparing()  # they host counts above a failing one: no probe needs them any more
            return PASS if r["pass"] else FAIL

        searched = time.monotonic()
        out.update(search(probe, lambda: cap()[:2], args.start, args.resolution, counts=args.counts,
                          ahead_steps=steps))
        out["search_s"] = round(time.monotonic() - searched, 2)
        count, reason, detail = cap()
        out["cap"] = {"count": count, "reason": reason}
        if detail:
            out["cap"]["detail"] = detail
        bc.log(f"  {mode.name}: {out['search']}")
    finally:
        if mode.pool is not None:
            out["workers"] = mode.pool.summary()
            closing = time.monotonic()
            mode.pool.close()
            out["close_s"] = round(time.monotonic() - closing, 2)
        mode.close()
        trim_models(out)
        out["mode_s"] = round(time.monotonic() - began, 2)
