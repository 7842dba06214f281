"""Tests of daemon_stats.py: snapshots from a stand-in client's stats reply (protobuf JSON), and the window
between two of them. No daemon starts.

    /usr/bin/python3 -m unittest discover -s bench/models -p 'daemon_stats_test.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import daemon_stats  # noqa: E402


def reply(iterations, busy, handlers, lanes=(), executors=()):
    """A stats reply as tandem.Client.stats() gives it: 64-bit integers as strings."""
    return {"pid": 42, "loop_handlers": [
                {"name": n, "count": str(c), "total_seconds": t, "max_seconds": m, "wait_seconds": w}
                for n, c, t, m, w in handlers],
            "devices": [{"iterations": str(iterations), "busy_seconds": busy, "lanes": len(lanes),
                         "lane_moves": "1", "graph_captures": "2",
                         "lane_info": [{"lane": i, "jobs": ["1"] * jobs, "iterations": str(it),
                                        "busy_seconds": b, "occupied_seconds": o}
                                       for i, (jobs, it, b, o) in enumerate(lanes)],
                         "executors": [{"name": n, "items": str(k), "busy_seconds": b, "wait_seconds": w}
                                       for n, k, b, w in executors]}]}


class Client:
    def __init__(self, replies):
        self.replies = list(replies)

    def stats(self):
        r = self.replies.pop(0)
        if isinstance(r, Exception):
            raise r
        return r


class DaemonStatsTest(unittest.TestCase):
    def test_window_between_two_snapshots(self):
        before = reply(100, 1.0, [("Transport.OnMessage", 10, 0.001, 0.0002, 0.0005),
                                  ("Message/parse", 10, 0.0001, 0.00002, 0.0)], lanes=[(2, 50, 0.5, 0.6)],
                       executors=[("cuda:0/0", 50, 0.2, 0.01)])
        after = reply(160, 1.9, [("Transport.OnMessage", 30, 0.003, 0.004, 0.0025),
                                 ("Executor.OnIterationDone", 60, 0.0024, 0.0001, 0.0012),
                                 ("Message/parse", 30, 0.0003, 0.00005, 0.0)],
                      lanes=[(2, 110, 1.3, 1.5), (1, 5, 0.1, 0.2)],
                      executors=[("cuda:0/0", 110, 0.5, 0.016), ("cuda:0/1", 5, 0.001, 0.0005)])
        client = Client([before, after])
        d = daemon_stats.delta(daemon_stats.snapshot(client), daemon_stats.snapshot(client))
        self.assertEqual(d["iterations"], 60)
        self.assertAlmostEqual(d["busy_s"], 0.9)
        self.assertEqual(d["lane_moves"], 0)
        # Per lane: what the window added; a lane opened during it counts from zero.
        self.assertEqual(d["per_lane"], [{"lane": 0, "jobs": 2, "iterations": 60, "busy_s": 0.8, "occupied_s": 0.9},
                                         {"lane": 1, "jobs": 1, "iterations": 5, "busy_s": 0.1, "occupied_s": 0.2}])
        # Work items: the window's count, mean time and mean wait, busiest first; sections apart, without waits.
        top = {x["name"]: x for x in d["loop_top"]}
        self.assertEqual(list(top), ["Executor.OnIterationDone", "Transport.OnMessage"])
        self.assertEqual(top["Transport.OnMessage"]["count"], 20)
        self.assertAlmostEqual(top["Transport.OnMessage"]["mean_us"], 100.0)
        self.assertAlmostEqual(top["Transport.OnMessage"]["mean_wait_us"], 100.0)
        self.assertAlmostEqual(top["Executor.OnIterationDone"]["mean_wait_us"], 20.0)
        self.assertAlmostEqual(d["loop_busy_s"], 0.004, places=6)  # 0.002 + 0.0024, rounded
        self.assertEqual([x["name"] for x in d["loop_sections"]], ["Message/parse"])
        self.assertNotIn("mean_wait_us", d["loop_sections"][0])
        # Per enqueuing thread: the window's items, busy seconds, mean time and wait; a new thread from zero.
        self.assertEqual(d["executors"], [
            {"name": "cuda:0/0", "items": 60, "busy_s": 0.3, "mean_us": 5000.0, "mean_wait_us": 100.0},
            {"name": "cuda:0/1", "items": 5, "busy_s": 0.001, "mean_us": 200.0, "mean_wait_us": 100.0}])
        # The longest item is reported only where the window raised it.
        self.assertEqual(d["loop_new_max_ms"], {"Transport.OnMessage": 4.0, "Executor.OnIterationDone": 0.1})
        # The sections apart: which part of a handler raised its longest.
        self.assertEqual(d["loop_sections_new_max_ms"], {"Message/parse": 0.05})

    def test_no_window_without_both_snapshots(self):
        good = reply(1, 0.0, [])
        self.assertIsNone(daemon_stats.snapshot(None))
        failed = daemon_stats.snapshot(Client([RuntimeError("daemon gone")]))
        self.assertIn("daemon gone", failed["error"])
        self.assertIsNone(daemon_stats.delta(failed, daemon_stats.snapshot(Client([good]))))
        self.assertIsNone(daemon_stats.delta(None, daemon_stats.snapshot(Client([good]))))

    def test_journal_events_of_the_window(self):
        def with_events(events, dropped):
            r = reply(1, 0.0, [])
            r["devices"][0]["events"] = events
            r["devices"][0]["events_dropped"] = str(dropped)
            return r

        # As protobuf JSON writes them: lane 0 and from_lane 0 left out, 64-bit job ids as strings.
        early = {"unix_seconds": 99.5, "kind": "move", "job": "7", "lane": 2, "seconds": 0.0}
        move = {"unix_seconds": 100.2, "kind": "move", "job": "7", "lane": 3, "from_lane": 1}
        capture = {"unix_seconds": 100.25, "kind": "capture", "job": "7", "lane": 3, "seconds": 0.004,
                   "run_seconds": 0.001, "graph_seconds": 0.0025}
        wait = {"unix_seconds": 100.3, "kind": "slow_wait", "job": "9", "seconds": 0.012}
        segmented = {"unix_seconds": 100.35, "kind": "segmented", "job": "9", "lane": 1, "seconds": 0.03,
                     "run_seconds": 0.02, "pauses": 3}
        late = {"unix_seconds": 101.5, "kind": "slow_wait", "job": "9", "lane": 1, "seconds": 0.02}
        client = Client([with_events([early], 3), with_events([early, move, capture, wait, segmented, late], 5)])
        before, after = daemon_stats.snapshot(client), daemon_stats.snapshot(client)
        self.assertEqual(after["events"][3], {"t": 100.3, "kind": "slow_wait", "job": 9, "lane": 0, "from_lane": 0,
                                              "seconds": 0.012, "run_seconds": 0.0, "graph_seconds": 0.0,
                                              "pauses": 0})
        before["at"], after["at"] = 100.0, 101.0
        d = daemon_stats.delta(before, after)
        # Only the events between the two snapshots, and how many the journal dropped meanwhile.
        self.assertEqual([e["kind"] for e in d["events"]], ["move", "capture", "slow_wait", "segmented"])
        self.assertEqual(d["event_counts"], {"capture": 1, "move": 1, "segmented": 1, "slow_wait": 1})
        self.assertEqual(d["events_dropped"], 2)
        self.assertEqual(d["events"][0]["from_lane"], 1)
        # Near a moment: what happened, per kind, on which lanes.
        self.assertEqual(daemon_stats.summarize(daemon_stats.near(d["events"], 100.22, 100.4)),
                         {"capture": {"n": 1, "lanes": [3], "ms": 4.0, "max_ms": 4.0, "run_ms": 1.0, "graph_ms": 2.5},
                          "segmented": {"n": 1, "lanes": [1], "ms": 30.0, "max_ms": 30.0, "run_ms": 20.0, "pauses": 3},
                          "slow_wait": {"n": 1, "lanes": [0], "ms": 12.0, "max_ms": 12.0}})
        self.assertEqual(daemon_stats.near(d["events"], 100.36, 100.4), [])


if __name__ == "__main__":
    unittest.main()
