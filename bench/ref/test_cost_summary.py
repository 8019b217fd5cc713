#!/usr/bin/env python3
"""Unit check of cost_summary.py on a fabricated GEMM log, phase marks and
scrapes (no GPU needed). Run: python3 bench/ref/test_cost_summary.py"""
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import cost_summary as cs  # noqa: E402

METRICS = '''# HELP gpulink_probe_runs_total Probe rounds by result.
# TYPE gpulink_probe_runs_total counter
gpulink_probe_runs_total{gpu="0",pci_bus_id="0000:00:06.0",result="success",uuid="GPU-a"} 6
gpulink_probe_runs_total{gpu="0",pci_bus_id="0000:00:06.0",result="timeout",uuid="GPU-a"} 0
gpulink_probe_runs_total{gpu="1",pci_bus_id="0000:00:07.0",result="success",uuid="GPU-b"} 5
gpulink_probe_runs_total{gpu="1",pci_bus_id="0000:00:07.0",result="partial",uuid="GPU-b"} 1
gpulink_probe_busy_seconds_total{gpu="0",pci_bus_id="0000:00:06.0",uuid="GPU-a"} 0.9
gpulink_probe_busy_seconds_total{gpu="1",pci_bus_id="0000:00:07.0",uuid="GPU-b"} 1.2
gpulink_probe_context_seconds_total{gpu="0",pci_bus_id="0000:00:06.0",uuid="GPU-a"} 12
gpulink_probe_device_memory_bytes{gpu="0",pci_bus_id="0000:00:06.0",uuid="GPU-a"} 2.01326592e+08
gpulink_probe_context_memory_bytes{gpu="0",pci_bus_id="0000:00:06.0",uuid="GPU-a"} 7.34003200e+08
gpulink_probe_round_duration_seconds{gpu="0",pci_bus_id="0000:00:06.0",uuid="GPU-a"} 2.5
gpulink_gpu_temperature_celsius{gpu="0"} 40
'''
IDLE = '''gpulink_probe_runs_total{gpu="0",result="success"} 0
gpulink_probe_skips_total{gpu="0",reason="busy_other_process"} 4
'''


class Test(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def path(self, name, text):
        p = os.path.join(self.dir, name)
        with open(p, 'w') as f:
            f.write(text)
        return p

    def run_summary(self, with_tflops, with_runs=True, split=False):
        t, lines = 1000.0, []
        # 10 s warm-up, 60 alone at 700, 62 with, 2 gap, 20 idle, 2 gap, 20 after at 698,
        # then a 30 s split phase at 693.
        plan = [(10, 650), (60, 700), (62, with_tflops), (2, 700), (20, 700), (2, 700), (20, 698), (30, 693)]
        for n, v in plan:
            for _ in range(n):
                lines.append(json.dumps({'t0': t, 't1': t + 1.0, 'matmuls': 10, 'tflops': v, 'tflops_gpu': v + 1}))
                t += 1.0
        lines.append('{"t0": 1')  # cut short by the kill
        samples = self.path('g.jsonl', '\n'.join(lines) + '\n')
        phases = self.path('p.txt', 'warm_start 1000\nalone_start 1010\nwith_start 1070\nwith_end 1132\n'
                           'idle_start 1134\nidle_end 1154\nafter_start 1156\nafter_end 1176\n'
                           'split_chase_start 1176\nsplit_chase_end 1206\n')
        m = self.path('m.txt', METRICS if with_runs else METRICS.replace('} 6', '} 0'))
        i = self.path('i.txt', IDLE)
        js = os.path.join(self.dir, 's.json')
        buf = io.StringIO()
        old, sys.stdout = sys.stdout, buf
        extra = ['--split', 'chase=' + m] if split else []
        try:
            rc = cs.main(['--samples', samples, '--phases', phases, '--gpu', '0', '--metrics-always', m,
                          '--metrics-idle', i, '--json', js] + extra)
        finally:
            sys.stdout = old
        with open(js) as f:
            return rc, buf.getvalue(), json.load(f)

    def test_small_loss_passes(self):
        rc, text, res = self.run_summary(696.5)
        self.assertEqual(rc, 0, text)
        self.assertEqual(res['alone']['windows'], 60)
        self.assertEqual(res['with_probes']['windows'], 62)
        self.assertAlmostEqual(res['loss_pct'], 0.5)
        g0 = res['metrics_always']['0']
        self.assertEqual(g0['runs_total'], 6)
        self.assertAlmostEqual(g0['busy_seconds_per_round'], 0.15)
        self.assertAlmostEqual(g0['context_seconds_per_round'], 2.0)
        self.assertEqual(g0['device_memory_bytes'], 192 << 20)
        self.assertEqual(res['metrics_always']['1']['runs'], {'partial': 1, 'success': 5})
        self.assertIn('loss with probes: 0.50%', text)
        self.assertIn('drift before -> after: -0.29%', text)
        self.assertIn('192 MiB', text)
        self.assertIn('700 MiB', text)
        self.assertIn('0 rounds run (expected 0', text)
        self.assertIn('skips_total{reason=busy_other_process}', text)
        self.assertIn('probe-cost: PASS', text)

    def test_loss_over_target_fails(self):
        rc, text, res = self.run_summary(690.0)
        self.assertEqual(rc, 1)
        self.assertIn('throughput loss 1.43% > 1%', text)

    def test_split_phase_reported_not_judged(self):
        rc, text, res = self.run_summary(696.5, split=True)
        self.assertEqual(rc, 0, text)
        sp = res['splits']['chase']
        self.assertEqual(sp['gemm']['windows'], 30)
        self.assertAlmostEqual(sp['loss_pct'], 1.0)
        self.assertEqual(sp['rounds'], 6)
        self.assertAlmostEqual(sp['busy_seconds_per_round'], 0.15)
        self.assertIn('== split phases', text)

    def test_no_rounds_fails(self):
        rc, text, _ = self.run_summary(700.0, with_runs=False)
        self.assertEqual(rc, 1)
        self.assertIn('ran no probe round on GPU 0', text)


if __name__ == '__main__':
    unittest.main()
