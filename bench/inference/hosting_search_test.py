"""Tests of the hosting benchmark's count search (hosting_search.py) against a simulated capacity, of the
summary's bounds (hosting_summary.py) and of the latency split (worker.py, hosting_stats.py): no processes start.

    /usr/bin/python3 -m unittest discover -s bench/inference -p '*_test.py'
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosting_search as hs  # noqa: E402


class Simulated:
    """A mode that hosts `capacity` models; probe() records what was asked."""

    def __init__(self, capacity, cap=(256, "max_count"), budget_probes=None):
        self.capacity = capacity
        self.cap_value = cap
        self.budget_probes = budget_probes
        self.asked = []
        self.aheads = []

    def cap(self):
        return self.cap_value

    def probe(self, n, ahead):
        if self.budget_probes is not None and len(self.asked) >= self.budget_probes:
            return hs.BUDGET
        assert 1 <= n <= self.cap_value[0], (n, self.cap_value)
        self.asked.append(n)
        self.aheads.append(ahead)
        return hs.PASS if n <= self.capacity else hs.FAIL


class LadderTest(unittest.TestCase):
    def test_ladder_grows_by_four_then_two_and_ends_at_the_cap(self):
        self.assertEqual(hs.ladder(4, 256), [4, 16, 64, 128, 256])
        self.assertEqual(hs.ladder(4, 48), [4, 16, 48])
        self.assertEqual(hs.ladder(4, 3), [3])
        self.assertEqual(hs.ladder(2, 100), [2, 8, 32, 64, 100])

    def test_ahead_follows_the_ladder(self):
        self.assertEqual(hs.ahead_of(4, 256, 2), 64)
        self.assertEqual(hs.ahead_of(64, 256, 2), 256)
        self.assertEqual(hs.ahead_of(16, 48, 2), 48)
        self.assertEqual(hs.ahead_of(16, 256, 0), 16)


class SearchTest(unittest.TestCase):
    def run_search(self, sim, resolution=0.25, counts=None, start=4, ahead_steps=1):
        return hs.search(sim.probe, sim.cap, start, resolution, counts=counts, ahead_steps=ahead_steps)

    def test_brackets_the_capacity_within_the_resolution(self):
        for capacity in (1, 3, 5, 17, 19, 40, 63, 64, 65, 100, 150, 200, 255):
            sim = Simulated(capacity)
            got = self.run_search(sim)
            self.assertEqual(got["stop_reason"], "failed", capacity)
            self.assertFalse(got["lower_bound"])
            self.assertLessEqual(got["hosted"], capacity)
            self.assertGreater(got["first_failing"], capacity)
            self.assertLessEqual(got["first_failing"] - got["hosted"], max(1, got["hosted"] * 0.25), capacity)
            self.assertLessEqual(len(sim.asked), 10, (capacity, sim.asked))
            self.assertEqual(len(set(sim.asked)), len(sim.asked), sim.asked)  # no count probed twice

    def test_exact_resolution_finds_the_capacity(self):
        for capacity in (7, 33, 130):
            got = self.run_search(Simulated(capacity), resolution=0)
            self.assertEqual((got["hosted"], got["first_failing"]), (capacity, capacity + 1))

    def test_passing_at_max_count_is_a_lower_bound(self):
        sim = Simulated(1000)
        got = self.run_search(sim)
        self.assertEqual(sim.asked, [4, 16, 64, 128, 256])
        self.assertEqual((got["hosted"], got["stop_reason"]), (256, "max_count"))
        self.assertTrue(got["lower_bound"])
        self.assertTrue(got["at_cap"])
        self.assertIsNone(got["first_failing"])

    def test_mps_client_limit_caps_the_ladder(self):
        sim = Simulated(100, cap=(48, "mps_client_limit"))
        got = self.run_search(sim)
        self.assertEqual(sim.asked, [4, 16, 48])
        self.assertEqual((got["hosted"], got["stop_reason"]), (48, "mps_client_limit"))
        self.assertTrue(got["at_cap"])
        self.assertFalse(got["lower_bound"])  # MPS hosts no more processes: 48 is its capacity

    def test_aheads_name_the_next_counts_in_growth_only(self):
        sim = Simulated(40)
        self.run_search(sim, ahead_steps=2)
        self.assertEqual(sim.asked[:3], [4, 16, 64])
        self.assertEqual(sim.aheads[:3], [64, 128, 256])
        self.assertTrue(all(a is None for a in sim.aheads[3:]), sim.aheads)

    def test_budget_stops_with_the_last_passing_count(self):
        sim = Simulated(1000, budget_probes=2)
        got = self.run_search(sim)
        self.assertEqual((got["hosted"], got["stop_reason"]), (16, "budget"))
        self.assertTrue(got["lower_bound"])
        self.assertFalse(got["at_cap"])
        sim = Simulated(50, budget_probes=4)  # 4, 16, 64 (fails), 40; then out of time
        got = self.run_search(sim)
        self.assertEqual((got["hosted"], got["first_failing"], got["stop_reason"]), (40, 64, "budget"))
        self.assertFalse(got["lower_bound"])

    def test_a_cap_that_falls_on_the_way_is_followed(self):
        sim = Simulated(100)
        real_probe = sim.probe

        def probe(n, ahead):
            if n == 64 and sim.cap_value[0] > 20:  # the worker of model 20 died before N=64 could run
                sim.cap_value = (20, "worker_failed")
                return hs.CAPPED
            return real_probe(n, ahead)

        got = hs.search(probe, sim.cap, 4, 0.25)
        self.assertEqual(sim.asked, [4, 16, 20])
        self.assertEqual((got["hosted"], got["stop_reason"]), (20, "worker_failed"))
        self.assertTrue(got["lower_bound"])

    def test_nothing_passes(self):
        got = self.run_search(Simulated(0))
        self.assertEqual((got["hosted"], got["first_failing"], got["stop_reason"]), (0, 1, "failed"))

    def test_counts_are_probed_as_given(self):
        sim = Simulated(10)
        got = self.run_search(sim, counts=[4, 8, 16])
        self.assertEqual(sim.asked, [4, 8, 16])
        self.assertEqual(sim.aheads, [8, 16, None])
        self.assertEqual((got["hosted"], got["first_failing"], got["stop_reason"]), (8, 16, "counts"))
        self.assertFalse(got["lower_bound"])
        got = self.run_search(Simulated(100), counts=[4, 8])
        self.assertTrue(got["lower_bound"])


class SummaryTest(unittest.TestCase):
    def test_ratio_bounds_follow_the_counts(self):
        import hosting_summary
        result = {"modes": {
            "tandem": {"hosted": 128, "lower_bound": True, "at_cap": True, "stop_reason": "max_count",
                       "probes": []},
            "timeslice": {"hosted": 16, "first_failing": 20, "lower_bound": False, "stop_reason": "failed",
                          "probes": []},
            "mps": {"hosted": 32, "lower_bound": True, "stop_reason": "budget", "probes": []}}}
        s = hosting_summary.summary(result)
        self.assertEqual(s["tandem_over_timeslice"], 8.0)
        self.assertEqual(s["tandem_over_mps"], 4.0)
        self.assertEqual(s["ratio_bounds"], {"tandem_over_noshare": "lower_bound",
                                             "tandem_over_timeslice": "lower_bound",
                                             "tandem_over_mps": "unknown"})
        self.assertTrue(s["lower_bound"])
        result["modes"]["tandem"].update(lower_bound=False, first_failing=150, stop_reason="failed")
        s = hosting_summary.summary(result)
        self.assertEqual(s["ratio_bounds"]["tandem_over_timeslice"], "bracketed")
        self.assertEqual(s["ratio_bounds"]["tandem_over_mps"], "upper_bound")
        self.assertFalse(s["lower_bound"])

    def test_tandem_over_server_and_its_goal(self):
        import hosting_summary
        result = {"modes": {
            "tandem": {"hosted": 96, "first_failing": 104, "lower_bound": False, "stop_reason": "failed",
                       "probes": []},
            "server": {"hosted": 48, "first_failing": 52, "lower_bound": False, "stop_reason": "failed",
                       "probes": []}}}
        s = hosting_summary.summary(result)
        self.assertEqual(s["tandem_over_server"], 2.0)
        self.assertEqual(s["ratio_bounds"]["tandem_over_server"], "bracketed")
        self.assertEqual(s["server_goal"], {"ratio": 1.5, "met": True})
        result["modes"]["server"]["hosted"] = 80  # 1.2x, both bracketed: missed
        self.assertFalse(hosting_summary.summary(result)["server_goal"]["met"])
        result["modes"]["tandem"]["lower_bound"] = True  # 1.2x, but Tandem may host more: the bounds do not tell
        self.assertIsNone(hosting_summary.summary(result)["server_goal"]["met"])
        result["modes"]["server"]["hosted"] = 16  # 6x, and Tandem's count may only grow: met
        self.assertTrue(hosting_summary.summary(result)["server_goal"]["met"])


class LatencySplitTest(unittest.TestCase):
    def test_parts_add_up_and_merge_weighs_by_requests(self):
        import hosting_stats
        import worker
        a = worker.LatencySplit()
        self.assertIsNone(a.means_ms())
        a.add(0.001, 0.010, (0.004, 0.002))  # 1 ms behind; of a 10 ms call 4 queued, 2 on the device
        a.add(0.003, 0.002, None)             # torch backend: the whole call is "other"
        self.assertEqual(a.means_ms(), {"requests": 2, "behind": 2.0, "queue": 2.0, "run": 1.0, "other": 3.0})
        b = worker.LatencySplit()
        b.add(0.0, 0.001, (0.0, 0.0015))      # the daemon's account over the call's: "other" is not negative
        self.assertEqual(b.means_ms()["other"], 0.0)
        models = [{"split_ms": a.means_ms()}, {"split_ms": b.means_ms()}, {"split_ms": None}, {}]
        merged = hosting_stats.merge_splits(models, "split_ms")
        self.assertEqual(merged["requests"], 3)
        self.assertAlmostEqual(merged["behind"], 4.0 / 3, places=3)
        self.assertAlmostEqual(merged["run"], 3.5 / 3, places=3)
        self.assertIsNone(hosting_stats.merge_splits(models, "slow_split_ms"))


if __name__ == "__main__":
    unittest.main()
