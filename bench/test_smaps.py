#!/usr/bin/env python3
"""Unit check of smaps.py: a capture from the exporter on two H200s (Rss
lines only, 2026-11-26 02:29 UTC) and a made-up map of every kind.

Run: python3 bench/test_smaps.py
"""
import os
import tempfile
import unittest

import smaps

HERE = os.path.dirname(os.path.abspath(__file__))


class SmapsTest(unittest.TestCase):
    def test_h200_capture(self):
        s = smaps.summary(os.path.join(HERE, "testdata", "h200-pair-exporter.smaps"),
                          "/work/main/.device/gpulink_exporter")
        # What rss.sh recorded for that run (bench/RESULTS.md).
        self.assertEqual([s[c] for c in smaps.COLUMNS], [45156, 16008, 2080, 13800, 3948, 2292, 7028])
        self.assertEqual(s["total"], sum(s[c] for c in smaps.COLUMNS[1:]))

    def test_every_kind(self):
        text = "".join(
            "%08x-%08x %s 00000000 00:00 0 %s\nRss: %d kB\n" % (i << 12, (i + 1) << 12, perms, name, rss)
            for i, (perms, name, rss) in enumerate([
                ("r-xp", "/opt/x/exporter", 100),
                ("rw-p", "", 1),  # after the binary: its .bss, anonymous
                ("r-xp", "/usr/lib/libnvidia-ml.so.580", 20),
                ("rw-p", "/usr/lib/libnvidia-ml.so.580", 2),
                ("rw-p", "", 300),  # NVML's .bss
                ("r--p", "/usr/lib/libcuda.so.580", 40),
                ("rw-p", "", 4),  # libcuda's .bss
                ("r-xp", "/usr/lib/libc.so.6", 10),
                ("rw-p", "[heap]", 7),
                ("rw-p", "", 50),
                ("rw-p", "[stack]", 3),
            ]))
        with tempfile.NamedTemporaryFile("w", suffix=".smaps") as f:
            f.write(text)
            f.flush()
            s = smaps.summary(f.name, "/opt/x/exporter")
        self.assertEqual(s, {"total": 537, "binary": 100, "nvml": 22, "nvml_bss": 300, "libcuda": 44,
                             "other_files": 10, "anon": 61})


if __name__ == "__main__":
    unittest.main()
