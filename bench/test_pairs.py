#!/usr/bin/env python3
"""Unit check of pairs.py: the pairing, what makes a pair say nothing, and
the judgement, on Prometheus' and nccl_ref.py's own JSON shapes.

Run: python3 bench/test_pairs.py
"""
import contextlib
import io
import json
import math
import os
import statistics
import tempfile
import unittest

import pairs

SIZE = 64 << 20


def dump(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f)


def write_run(d, probes, refs):
    """probes: [(t, seconds, send_recv, all_reduce)]; refs: [(start, end, send_recv, all_reduce)]."""
    def series(collective, i):
        return {"metric": {"__name__": "gpulink_node_probe_bus_bandwidth_bytes_per_second", "collective": collective},
                "values": [[t, str(p[i])] for p in probes for t in [p[0]]]}
    dump({"data": {"result": [series("send_recv", 2), series("all_reduce", 3)]}},
         os.path.join(d, "prom-samples.json"))
    dump({"data": {"result": [{"metric": {"__name__": "probe_duration_seconds"},
                               "values": [[p[0], str(p[1])] for p in probes]}]}},
         os.path.join(d, "prom-durations.json"))
    for k, (start, end, sr, ar) in enumerate(refs, 1):
        with open(os.path.join(d, "pair-%d.window" % k), "w") as f:
            f.write("%.9f\n%.9f\n" % (start, end))
        dump({"ranks": 2, "results": [
            {"collective": "send_recv", "size_bytes": SIZE, "bus_bytes_per_second": sr},
            {"collective": "all_reduce", "size_bytes": SIZE, "bus_bytes_per_second": ar},
            {"collective": "send_recv", "size_bytes": 8192, "bus_bytes_per_second": 1.0},
        ]}, os.path.join(d, "pair-%d-0.json" % k))


def run(probes, refs, tolerance=0.05, ceiling=0.25):
    with tempfile.TemporaryDirectory() as d:
        write_run(d, probes, refs)
        samples, rs = pairs.load(d, SIZE)
        ps, unpaired = pairs.pair(samples, rs)
        return ps, unpaired, pairs.judge(ps, unpaired, "send_recv", tolerance, ceiling)


class PairsTest(unittest.TestCase):
    # A run as the script makes it: a scrape every 50 s, a 10 s probe, then
    # a 20 s reference. The moment moves both tools together: a pair judged
    # against its own reference passes where a mean of the first and last
    # would not.
    T = 1_764_300_000.0
    DRIFT = [3.29e9, 3.45e9, 3.67e9, 3.50e9, 3.31e9]
    QUIET = [3.40e9, 3.42e9, 3.45e9, 3.43e9, 3.41e9]
    # The send/recv references of the second paired run on two H200s
    # (2026-11-28 16:17 UTC), and its probe samples.
    H200_REF = [4.275e9, 3.897e9, 4.406e9, 3.724e9, 3.388e9]
    H200_PROBE = [3.811e9, 3.638e9, 4.070e9, 4.472e9, 3.410e9]

    def probes(self, factor=1.0, seconds=10.0, bws=None):
        return [(self.T + 50 * i, seconds, bw * factor, bw * 0.9) for i, bw in enumerate(bws or self.DRIFT)]

    def refs(self, start=11.0, length=20.0, bws=None):
        return [(self.T + 50 * i + start, self.T + 50 * i + start + length, bw, bw * 0.9)
                for i, bw in enumerate(bws or self.DRIFT)]

    def test_in_pairs_drift_cancels(self):
        ps, unpaired, (line, ok) = run(self.probes(1.03), self.refs())
        self.assertTrue(ok, line)
        self.assertEqual(len(ps), 5)
        self.assertEqual(unpaired, [])
        self.assertTrue(line.startswith("PASS send_recv: median of 5 pair ratios +3.00%"), line)
        self.assertEqual([p.sample.t - self.T for p in ps], [0, 50, 100, 150, 200])
        self.assertEqual([p.ref.name for p in ps], ["pair-%d" % k for k in range(1, 6)])
        # What the old before-and-after mean made of the same run.
        old = statistics.median(p.sample.bw["send_recv"] for p in ps) / ((self.DRIFT[0] + self.DRIFT[-1]) / 2) - 1
        self.assertGreater(old, 0.07)

    def test_quiet_reference_keeps_the_tolerance(self):
        _, _, (line, ok) = run(self.probes(0.96, bws=self.QUIET), self.refs(bws=self.QUIET))
        self.assertTrue(ok, line)
        self.assertTrue(line.startswith("PASS send_recv: median of 5 pair ratios -4.00% against +-5.0%"), line)
        _, _, (line, ok) = run(self.probes(0.94, bws=self.QUIET), self.refs(bws=self.QUIET))
        self.assertFalse(ok)
        self.assertTrue(line.startswith("FAIL send_recv: median of 5 pair ratios -6.00% against +-5.0%"), line)

    def test_noise_of_two_runs_of_one_tool(self):
        self.assertIsNone(pairs.noise([1.0, 2.0]))
        self.assertAlmostEqual(pairs.noise([1.0, 2.0, 1.0]), math.log(2))
        self.assertAlmostEqual(pairs.noise([3.0, 3.0, 3.0, 3.0]), 0.0)
        # The H200 run: 12.3% run to run.
        self.assertAlmostEqual(pairs.noise(self.H200_REF), 0.1233, places=3)

    def test_noise_pooled_over_runs_not_across_them(self):
        # Each run's consecutive references; never the last of one run
        # against the first of the next.
        self.assertIsNone(pairs.noise([1.0], [2.0]))
        self.assertAlmostEqual(pairs.noise([1.0, 2.0], [5.0, 10.0]), math.log(2))

    def test_several_runs_judged_as_one(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            os.mkdir(a)
            os.mkdir(b)
            # Run a reads 20% high on a quiet reference, run b 1% low: as
            # one, the median of 10 pairs.
            write_run(a, self.probes(1.20, bws=self.QUIET), self.refs(bws=self.QUIET))
            probes = [(t + 1000, s, sr * 0.99, ar) for t, s, sr, ar in self.probes(bws=self.QUIET)]
            refs = [(s + 1000, e + 1000, sr, ar) for s, e, sr, ar in self.refs(bws=self.QUIET)]
            write_run(b, probes, refs)
            with contextlib.redirect_stdout(io.StringIO()) as out:
                rc = pairs.main(["pairs.py", str(SIZE), "0.05", "0.25", a, b])
            lines = out.getvalue().splitlines()
            self.assertEqual(rc, 1, lines)
            self.assertEqual(len([x for x in lines if x.startswith(a + "/pair-") or x.startswith(b + "/pair-")]), 10, lines)
            self.assertTrue(any(x.startswith("FAIL send_recv: median of 10 pair ratios +9.50%") for x in lines), lines)
            with contextlib.redirect_stdout(io.StringIO()) as out:
                rc = pairs.main(["pairs.py", str(SIZE), "0.05", "0.25", b])
            self.assertEqual(rc, 0, out.getvalue())
            with self.assertRaises(SystemExit):
                pairs.main(["pairs.py", str(SIZE), "0.05", "0.25"])

    def test_noisy_reference_widens_the_limit(self):
        # The H200 run (-6.66% from its unrounded figures) against a limit
        # of 2 x 1.2533 x 12.3% / sqrt(5).
        _, _, (line, ok) = run(self.probes(bws=self.H200_PROBE), self.refs(bws=self.H200_REF))
        self.assertTrue(ok, line)
        self.assertTrue(line.startswith("PASS send_recv: median of 5 pair ratios -6.65% against +-13.8%"), line)
        self.assertIn("run-to-run noise 12.3% resolves +-13.8% with 5 pairs", line)
        # The same noise does not hide a probe 20% low.
        probes = [(t, s, sr * 0.8, ar) for t, s, sr, ar in self.probes(bws=self.H200_PROBE)]
        _, _, (line, ok) = run(probes, self.refs(bws=self.H200_REF))
        self.assertFalse(ok)
        self.assertTrue(line.startswith("FAIL send_recv: median of 5 pair ratios -25.32% against +-13.8%"), line)

    def test_too_noisy_to_judge(self):
        wild = [3.0e9, 4.5e9, 3.0e9, 4.5e9, 3.0e9]  # 40% run to run resolves +-45%
        _, _, (line, ok) = run(self.probes(bws=wild), self.refs(bws=wild))
        self.assertFalse(ok)
        self.assertTrue(line.startswith("INCONCLUSIVE send_recv: median of 5 pair ratios +0.00%"), line)
        self.assertIn("over the 25% this check can be judged at", line)

    def test_two_pairs_keep_the_tolerance(self):
        _, _, (line, ok) = run(self.probes(1.04)[:2], self.refs()[:2])
        self.assertTrue(ok, line)
        self.assertIn("against +-5.0%", line)
        self.assertIn("too few pairs to measure the reference's noise", line)

    def test_the_median_not_the_mean(self):
        probes = self.probes()
        t, s, sr, ar = probes[2]
        probes[2] = (t, s, sr * 1.5, ar)  # one run far off: the median holds
        _, _, (line, ok) = run(probes, self.refs())
        self.assertTrue(ok, line)

    def test_reference_overlapping_the_probe_fails(self):
        # The reference starts 5 s into a 10 s probe: the GPUs time-slice.
        _, _, (line, ok) = run(self.probes(), self.refs(start=5.0))
        self.assertFalse(ok)
        self.assertIn("pairs that say nothing: pair-1, pair-2, pair-3, pair-4, pair-5", line)

    def test_reference_running_into_the_next_scrape_fails(self):
        ps, _, (line, ok) = run(self.probes(), self.refs(length=45.0))
        self.assertFalse(ok)
        self.assertIn("overlaps the probe scraped at", ps[0].problems[0])
        self.assertEqual(ps[-1].problems, [])  # nothing scraped after the last

    def test_two_references_after_one_scrape_fail(self):
        probes = self.probes()[:4]
        refs = self.refs()
        refs[4] = (refs[3][1] + 1, refs[3][1] + 21, refs[4][2], refs[4][3])
        ps, _, (line, ok) = run(probes, refs)
        self.assertFalse(ok)
        self.assertIn("no scrape between them", ps[3].problems[0])
        self.assertIn("pair-4, pair-5", line)

    def test_reference_before_any_sample_fails(self):
        refs = [(self.T - 30, self.T - 10, 3.3e9, 3.0e9)] + self.refs()[:4]
        ps, unpaired, (line, ok) = run(self.probes()[:4], refs)
        self.assertFalse(ok)
        self.assertEqual([r.name for r in unpaired], ["pair-1"])
        self.assertIn("references with no sample before them: pair-1", line)

    def test_all_reduce_is_shown_not_judged(self):
        with tempfile.TemporaryDirectory() as d:
            probes = [(t, s, sr, ar * 0.5) for t, s, sr, ar in self.probes()]
            write_run(d, probes, self.refs())
            samples, rs = pairs.load(d, SIZE)
            ps, unpaired = pairs.pair(samples, rs)
            line, ok = pairs.judge(ps, unpaired, "all_reduce", None)
            self.assertTrue(ok)
            self.assertTrue(line.startswith("shown all_reduce: median of 5 pair ratios -50.00%"), line)

    def test_a_window_without_its_end_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            write_run(d, self.probes(), self.refs())
            with open(os.path.join(d, "pair-3.window"), "w") as f:
                f.write("%.3f\n" % self.T)
            with self.assertRaises(SystemExit) as e:
                pairs.load(d, SIZE)
            self.assertIn("pair-3.window: want a start and an end", str(e.exception))


if __name__ == "__main__":
    unittest.main()
