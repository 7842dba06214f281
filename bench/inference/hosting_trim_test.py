#!/usr/bin/env python3
"""hosting.trim_models: what a search's JSON keeps of each probe (runs without a GPU or a daemon)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosting  # noqa: E402


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
        hosting.trim_models(out)
        # The hosted and first failing probes keep everything.
        self.assertEqual(len(hosted["tandemd"]["events"]), 2)
        self.assertEqual(len(failing["tandemd"]["events"]), 2)
        self.assertIn("models", failing)
        # The others: no models; events from EVENT_LEAD_S before a bin to EVENT_LAG_S after its end.
        self.assertNotIn("models", other)
        self.assertEqual([e["at_s"] for e in other["tandemd"]["events"]], [0.9, 1.0, 1.04, 1.08, 1.95])
        self.assertEqual(quiet["tandemd"]["events"], [])


if __name__ == "__main__":
    unittest.main()
