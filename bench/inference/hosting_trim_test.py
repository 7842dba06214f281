#!/usr/bin/env python3
"""hosting_stats.trim_models and probe_events: what a search's JSON keeps of each probe, and
hosting_tandem.registration_summary (run without a GPU or a daemon)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosting_stats  # noqa: E402
import hosting_tandem  # noqa: E402


def probe(n, bins, events):
    return {"n": n, "models": [{"id": 0}], "stalls": {"top": [{"at_s": t} for t in bins]},
            "tandemd": {"events": [{"at_s": t, "kind": "capture"} for t in events]}}


class TrimModelsTest(unittest.TestCase):
    def test_other_probes_keep_only_the_events_beside_their_stalls(self):
        hosted = probe(16, [], [0.5, 1.0])
        failing = probe(32, [1.0], [0.1, 0.95])
        other = probe(64, [1.0, 2.0], [0.5, 0.9, 1.0, 1.04, 1.08, 1.12, 1.95])
        quiet = probe(8, [], [0.3])
        out = {"hosted": 16, "first_failing": 32, "probes": [hosted, failing, other, quiet]}
        hosting_stats.trim_models(out)
        # The hosted and first failing probes keep everything.
        self.assertEqual(len(hosted["tandemd"]["events"]), 2)
        self.assertEqual(len(failing["tandemd"]["events"]), 2)
        self.assertIn("models", failing)
        # The others: no models; events from EVENT_LEAD_S before a bin to EVENT_LAG_S after its end.
        self.assertNotIn("models", other)
        self.assertEqual([e["at_s"] for e in other["tandemd"]["events"]], [0.9, 1.0, 1.04, 1.08, 1.95])
        self.assertEqual(quiet["tandemd"]["events"], [])


class ProbeEventsTest(unittest.TestCase):
    def test_keeps_the_events_beside_stalls_before_filling_up_with_the_rest_of_the_window(self):
        start = 100.0
        # Registration's warm steps before the window, a busy first second, a stall bin at 2.0 s, a late event.
        events = ([{"t": 90.0 + i * 0.01, "kind": "warm"} for i in range(5)]
                  + [{"t": start + i * 0.001, "kind": "capture"} for i in range(10)]
                  + [{"t": start + 2.02, "kind": "slow_wait"}, {"t": start + 2.5, "kind": "move"},
                     {"t": start + 3.5, "kind": "capture"}])
        kept = hosting_stats.probe_events(events, start, 3.0, [start + 2.0], limit=4)
        self.assertEqual([round(e["t"] - start, 3) for e in kept], [0.0, 0.001, 0.002, 2.02])
        everything = hosting_stats.probe_events(events, start, 3.0, [start + 2.0], limit=400)
        # Nothing from before the window's lead or after its lag.
        self.assertEqual(len(everything), 12)
        self.assertEqual(everything[-1]["kind"], "move")


class RegistrationSummaryTest(unittest.TestCase):
    def test_the_last_sample_and_the_fullest_lane_of_each(self):
        samples = [{"t": 1.0, "lane_jobs": [3, 1], "lane_moves": 0}, {"t": 2.0, "lane_jobs": [4, 9], "lane_moves": 2}]
        self.assertEqual(hosting_tandem.registration_summary(samples),
                         {"lane_jobs": [4, 9], "lane_moves": 2, "fullest": [[1.0, 3, 0], [2.0, 9, 2]]})
        self.assertIsNone(hosting_tandem.registration_summary([]))


if __name__ == "__main__":
    unittest.main()
