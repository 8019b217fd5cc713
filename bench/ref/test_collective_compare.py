#!/usr/bin/env python3
"""Unit check of collective_compare.py's verdicts on fabricated rounds (no
GPU needed). Run: python3 bench/ref/test_collective_compare.py"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import collective_compare as cc  # noqa: E402

BIG, SMALL = 256 << 20, 8 << 10


def res(c, size, busbw, fr=None, to=None, error=None):
    r = {"collective": c, "size_bytes": size, "ranks": 2, "seconds": size / busbw if busbw else 0,
         "bus_bytes_per_second": busbw}
    if fr is not None:
        r.update(from_rank=fr, to_rank=to)
    if error:
        r = {"collective": c, "size_bytes": size, "ranks": 2, "error": error}
    return r


class CompareTest(unittest.TestCase):
    def run_cli(self, probe, ref, *extra):
        d = tempfile.mkdtemp()
        paths = []
        for name, doc in (("p.json", probe), ("r.json", ref)):
            paths.append(os.path.join(d, name))
            with open(paths[-1], "w") as f:
                json.dump(doc, f)
        sys.argv = ["collective_compare.py", "--probe", paths[0], "--ref", paths[1], *extra]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cc.main()
        return code, out.getvalue()

    def test_within_and_outside_tolerance(self):
        ref = {"results": [res("all_reduce", BIG, 370e9), res("send_recv", BIG, 380e9, 0, 1), res("all_reduce", SMALL, 1e9)]}
        probe = {"results": [res("all_reduce", BIG, 362e9), res("send_recv", BIG, 380e9, 0, 1), res("all_reduce", SMALL, 2e9)],
                 "transports": [{"kind": "p2p", "detail": "P2P/CUMEM/read", "channel": 0, "from_rank": 0, "to_rank": 1}]}
        code, out = self.run_cli(probe, ref, "--transport", "p2p")
        self.assertEqual(code, 0, out)  # -2.2% passes; the small size is not judged
        probe["results"][0] = res("all_reduce", BIG, 350e9)
        code, out = self.run_cli(probe, ref)
        self.assertEqual(code, 1, out)  # -5.4%
        self.assertIn("FAIL", out)

    def test_wrong_transport_and_missing_key(self):
        ref = {"results": [res("send_recv", BIG, 45e9, 0, 1)]}
        probe = {"results": [res("send_recv", BIG, 45e9, 0, 1)],
                 "transports": [{"kind": "shm", "detail": "SHM/direct/direct", "channel": 0, "from_rank": 0, "to_rank": 1}]}
        code, out = self.run_cli(probe, ref, "--transport", "net")
        self.assertEqual(code, 1, out)
        probe = {"results": [res("send_recv", BIG, 0, 0, 1, error="ncclSend: remote process exited")]}
        code, out = self.run_cli(probe, ref)
        self.assertEqual(code, 2, out)


if __name__ == "__main__":
    unittest.main()
