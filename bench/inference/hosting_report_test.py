#!/usr/bin/env python3
"""hosting_report: the one-line-per-probe view of a hosting search (runs without a GPU)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hosting_report  # noqa: E402


def result():
    passing = {"n": 16, "pass": True, "p99_ms_max": 3.2, "models_over_target": 0, "latency_split_ms": None,
               "tandemd": {"lane_moves": 0, "graph_captures": 0, "arena_moves": 0}}
    failing = {"n": 32, "pass": False, "p99_ms_max": 28.5, "models_over_target": 3,
               "latency_split_ms": {"slow": {"requests": 4, "behind": 1.0, "queue": 15.5, "run": 6.0, "other": 0.5}},
               "stalls": {"top": [
                   {"at_s": 1.2, "requests": 4, "models": 3, "processes": 2,
                    "tandemd": {"capture": {"n": 1, "lanes": [2], "ms": 26.8, "max_ms": 26.8, "run_ms": 3.0,
                                            "graph_ms": 23.5},
                                "move": {"n": 1, "lanes": [2], "ms": 0.0},
                                "slow_wait": {"n": 2, "lanes": [2], "ms": 29.0, "max_ms": 15.5}}},
                   {"at_s": 0.4, "requests": 1, "models": 1, "processes": 1, "tandemd": {}}]},
               "tandemd": {"lane_moves": 5, "graph_captures": 6, "arena_moves": 0,
                           "per_lane": [{"lane": 0, "jobs": 9, "busy_s": 1.65}, {"lane": 1, "jobs": 23, "busy_s": 0.8}],
                           "journal": {"capture": {"n": 2, "lanes": [0, 2], "ms": 27.8, "max_ms": 26.8,
                                                   "run_ms": 3.5, "graph_ms": 23.6},
                                       "slow_wait": {"n": 3, "lanes": [2], "ms": 40.0, "max_ms": 15.5},
                                       "move": {"n": 5, "lanes": [2], "ms": 0.0}},
                           "events": [
                               {"at_s": 1.15, "kind": "capture", "job": 7, "lane": 2, "seconds": 0.0268,
                                "run_seconds": 0.003, "graph_seconds": 0.0235},
                               {"at_s": 1.1, "kind": "move", "job": 7, "lane": 2, "from_lane": 1, "seconds": 0.0},
                               {"at_s": 0.2, "kind": "capture", "job": 9, "lane": 0, "seconds": 0.001}]}}
    return {"modes": {"tandem": {"hosted": 16, "first_failing": 32, "probes": [passing, failing]}}}


class HostingReportTest(unittest.TestCase):
    def test_probes_their_stalls_and_the_longest_captures(self):
        lines = hosting_report.report(result())
        self.assertEqual(lines[0], "tandem hosted 16 (first failing 32)")
        self.assertIn("N=  16 pass", lines[1])
        self.assertIn("N=  32 FAIL", lines[2])
        self.assertIn("moves   5  captures   6  arena  0  lane jobs 9-23, busy 0.80-1.65 s", lines[2])
        self.assertNotIn("lane jobs", lines[1])  # no per-lane numbers
        self.assertIn("slow b/q/r/o ms 1.0/15.5/6.0/0.5", lines[2])
        # The whole window's journal: captures and slow waits, each with its longest.
        self.assertIn("; capture longest 26.8 ms (run 3.5, graph 23.6 of 27.8 ms in all), slow_wait 3 longest "
                      "15.5 ms", lines[2])
        self.assertNotIn("journal", lines[1])
        self.assertIn("slow_wait 2 on [2] 29.0 ms (longest 15.5)", lines[3])
        self.assertIn("at 1.20 s: 4 requests, 3 models, 2 processes", lines[3])
        self.assertIn("capture 1 on [2] 26.8 ms (longest 26.8, run 3.0, graph 23.5)", lines[3])
        self.assertTrue(lines[4].endswith("nothing journaled"))
        # The longest capture first, then the other; the move is no capture.
        head = "longest captures kept (ms: whole, run, graph, rest; job, lane, probe, at_s):"
        captures = lines[lines.index(head) + 1:]
        self.assertEqual(len(captures), 2)
        self.assertEqual(captures[0].split()[:4], ["26.80", "3.00", "23.50", "0.30"])
        self.assertIn("job 7 lane 2 N=32", captures[0])
        self.assertIn("job 9 lane 0", captures[1])

    def test_a_file_from_before_the_journal(self):
        old = {"modes": {"tandem": {"hosted": 8, "first_failing": 16, "probes": [
            {"n": 16, "pass": False, "p99_ms_max": None, "models_over_target": 2,
             "stalls": {"top": [{"at_s": 0.5, "requests": 3, "models": 2}]}, "tandemd": {"lane_moves": 4}}]}}}
        lines = hosting_report.report(old)
        self.assertIn("N=  16 FAIL  p99        - ms", lines[1])
        self.assertIn("arena  -", lines[1])
        self.assertEqual(lines[2], "    at 0.50 s: 3 requests, 2 models, ? processes; nothing journaled")

    def test_a_file_without_the_tandem_mode(self):
        self.assertEqual(hosting_report.report({"modes": {"mps": {}}}), ["no tandem mode in this file"])


class RegistrationLineTest(unittest.TestCase):
    def test_the_end_and_the_fullest_lane_over_time_with_the_last_sample_always(self):
        r = {"lane_jobs": [33, 99, 40], "lane_moves": 4,
             "fullest": [[1.0, 5, 0], [2.0, 40, 0], [3.0, 80, 2], [4.0, 99, 4], [5.0, 99, 4]]}
        line = hosting_report.registration_line(r, samples=2)
        self.assertEqual(line, "registration: lane jobs 33-99, 4 moves; fullest lane (s: jobs/moves) "
                               "1: 5/0, 4: 99/4, 5: 99/4")
        self.assertTrue(hosting_report.registration_line(r).endswith("3: 80/2, 4: 99/4, 5: 99/4"))

    def test_the_report_shows_it_under_the_header(self):
        res = result()
        res["modes"]["tandem"]["registration"] = {"lane_jobs": [9, 23], "lane_moves": 0, "fullest": [[1.0, 23, 0]]}
        lines = hosting_report.report(res)
        self.assertTrue(lines[1].startswith("registration: lane jobs 9-23, 0 moves"), lines[1])
        self.assertIn("N=  16 pass", lines[2])


if __name__ == "__main__":
    unittest.main()
