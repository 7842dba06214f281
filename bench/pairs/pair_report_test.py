"""pair_report's derived figures and pair_models' random draws, on made-up measurements (no GPU, no daemon).

    cd bench/pairs && python3 -m unittest -v pair_report_test
"""

import unittest

import pair_models
import pair_plot
import pair_report


def _system(solo_ms, shared_ms):
    """A system's result with solo times {model: ms} and one pair a+b with shared times (ms_a, ms_b)."""
    (a, sa), (b, sb) = solo_ms.items()
    jobs = [{"model": m, "solo_ms": s, "shared_ms": sh, "r": sh / s, "rate": s / sh}
            for m, s, sh in ((a, sa, shared_ms[0]), (b, sb, shared_ms[1]))]
    return {"solo": {m: {"ms_per_iter": ms} for m, ms in solo_ms.items()},
            "pairs": [{"pair": f"{a}+{b}", "models": [a, b], "jobs": jobs,
                       "aggregate": sum(j["rate"] for j in jobs)}]}


class DeriveTest(unittest.TestCase):
    def result(self):
        return {"config": {"pairs": [("x", "y")], "systems": ["tandem", "time_slicing_compiled", "mps_compiled"]},
                "systems": {"tandem": _system({"x": 10.0, "y": 20.0}, (15.0, 30.0)),
                            "time_slicing_compiled": _system({"x": 8.0, "y": 16.0}, (16.0, 32.0)),
                            "mps_compiled": _system({"x": 9.0, "y": 18.0}, (12.0, 24.0))}}

    def test_throughput_in_compiled_solo_units(self):
        result = self.result()
        summary = pair_report.derive(result)
        # Tandem: 8/15 + 16/30; MPS-compiled: 8/12 + 16/24 (time_slicing_compiled's solos are the unit).
        self.assertAlmostEqual(result["systems"]["tandem"]["pairs"][0]["throughput_compiled_units"], 16 / 15, 3)
        self.assertAlmostEqual(result["systems"]["mps_compiled"]["pairs"][0]["throughput_compiled_units"], 4 / 3, 3)
        self.assertAlmostEqual(summary["pairs"][0]["tandem_over_mps_compiled"], 0.8, 3)
        self.assertAlmostEqual(summary["tandem_over_mps_compiled_geomean"], 0.8, 3)
        self.assertEqual(summary["compiled_solo_ms"]["x"], {"ms_per_iter": 8.0, "system": "time_slicing_compiled"})
        self.assertIn("| x+y | 0.67 + 0.67 = 1.33 | 0.50 + 0.50 = 1.00 | 0.75 + 0.75 = 1.50 | 0.80 |",
                      summary["table"])

    def test_mps_compiled_solos_without_time_slicing_compiled(self):
        result = self.result()
        del result["systems"]["time_slicing_compiled"]
        summary = pair_report.derive(result)
        self.assertEqual(summary["compiled_solo_ms"]["y"]["system"], "mps_compiled")
        self.assertAlmostEqual(summary["pairs"][0]["tandem_over_mps_compiled"], 0.8, 3)

    def test_skipped_system_says_why(self):
        result = self.result()
        result["systems"]["mps_compiled"] = {"skipped": "no CUDA device"}
        summary = pair_report.derive(result)
        self.assertIsNone(summary["pairs"][0]["tandem_over_mps_compiled"])
        self.assertIsNone(summary["tandem_over_mps_compiled_geomean"])
        self.assertEqual(summary["tandem_over_mps_compiled_missing"], "mps_compiled: no CUDA device")
        self.assertIn("| skipped |", summary["table"])

    def test_system_not_run_says_so(self):
        result = self.result()
        del result["systems"]["mps_compiled"]
        summary = pair_report.derive(result)
        self.assertEqual(summary["tandem_over_mps_compiled_missing"], "mps_compiled: not run")

    def test_geomean(self):
        self.assertAlmostEqual(pair_report.geomean([2.0, 0.5]), 1.0)
        self.assertIsNone(pair_report.geomean([]))

    def test_plot_segments(self):
        result = self.result()
        rows = pair_plot.segments(result)
        self.assertEqual([(pair, units) for pair, units, _ in rows], [("x+y", "compiled")])
        parts = rows[0][2]
        self.assertEqual(list(parts), ["tandem", "time_slicing_compiled", "mps_compiled"])
        self.assertAlmostEqual(sum(parts["tandem"]), 16 / 15, 3)  # the table's compiled units, job by job
        self.assertAlmostEqual(parts["mps_compiled"][0], 8 / 12, 3)
        del result["systems"]["time_slicing_compiled"], result["systems"]["mps_compiled"]
        result["systems"]["time_slicing"] = _system({"x": 12.0, "y": 24.0}, (24.0, 48.0))
        rows = pair_plot.segments(result)
        self.assertEqual(rows[0][1], "eager")
        self.assertAlmostEqual(rows[0][2]["tandem"][0], 12 / 15, 3)
        del result["systems"]["time_slicing"]
        rows = pair_plot.segments(result)
        self.assertEqual(rows[0][1], "own")
        self.assertAlmostEqual(rows[0][2]["tandem"][0], 10 / 15, 3)


class DrawTest(unittest.TestCase):
    def test_a_seed_draws_the_same_distinct_pairs(self):
        first, meta = pair_models.draw_pairs(5, 3, small=True)
        self.assertEqual(first, pair_models.draw_pairs(5, 3, small=True)[0])
        self.assertEqual(len({tuple(sorted(p)) for p in first}), 5)
        self.assertEqual(meta["drawn"], [list(p) for p in first])
        self.assertEqual((meta["seed"], meta["pool"]), (3, "catalog.CI_NAMES"))

    def test_zoo_names_that_reference_models_have_are_prefixed(self):
        self.assertEqual(pair_models.qualified("resnet50"), "zoo:resnet50")
        self.assertIsNone(pair_models.zoo_name("resnet50"))
        self.assertEqual(pair_models.zoo_name("zoo:resnet50"), "resnet50")
        with self.assertRaises(ValueError):
            pair_models.parse_pairs("fcn5+nosuchmodel")


if __name__ == "__main__":
    unittest.main()
