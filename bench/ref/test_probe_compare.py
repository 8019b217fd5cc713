#!/usr/bin/env python3
"""Unit check of probe_compare.py's matching and verdicts, on fabricated
rounds and references (no GPU needed).

Run: python3 bench/ref/test_probe_compare.py      (or python3 -m unittest from bench/ref)
     python3 bench/ref/test_probe_compare.py --write-testdata
       rewrites bench/ref/testdata/ (a two-GPU, two-run sample to try the CLI on:
       probe_compare.py --run testdata/run1/probe.json testdata/run1/ref-*.json
                        --run testdata/run2/probe.json testdata/run2/ref-*.json
       prints 21 PASS and one FAIL, GPU 1's peer copy in run 2, and exits 1)
"""
import copy
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import probe_compare as pc  # noqa: E402

G0, G1 = '0000:00:06.0', '0000:00:07.0'
GB = 1e9


def bw(kind, direction, v, peer=None, node=None, size=64 << 20, error=None):
    r = {'probe': kind, 'direction': direction, 'size_bytes': size, 'samples': 5}
    if peer:
        r['peer'] = peer
    if node is not None:
        r['host_numa_node'] = node
    if error:
        r['error'] = error
    else:
        r['bytes_per_second'] = v
    return r


def lat(kind, v, peer=None, node=None, size=2 << 20, error=None):
    r = {'probe': kind, 'size_bytes': size, 'samples': 5}
    if peer:
        r['peer'] = peer
    if node is not None:
        r['host_numa_node'] = node
    if error:
        r['error'] = error
    else:
        r['seconds'] = v
    return r


def probe_results(me, peer, node=0):
    return [
        bw('host_to_device', 'host_to_device', 55.3 * GB, node=node),
        bw('device_to_host', 'device_to_host', 55.2 * GB, node=node),
        bw('host_bidirectional', 'host_to_device', 52.1 * GB, node=node),
        bw('host_bidirectional', 'device_to_host', 51.0 * GB, node=node),
        bw('device_local_copy', 'local', 3950 * GB, size=64 << 20),
        bw('peer_copy', 'to_peer', 387 * GB, peer=peer),
        bw('peer_bidirectional', 'to_peer', 385 * GB, peer=peer),
        bw('peer_bidirectional', 'from_peer', 384 * GB, peer=peer),
        lat('host_latency', 1170e-9, node=node),
        lat('peer_latency', 828e-9, peer=peer),
        lat('launch_latency', 10.5e-6),
    ]


def round_(gpus):
    return {'version': 1, 'started': '2026-11-22T10:00:00Z', 'seconds': 4.2, 'cuda_driver_version': 13000,
            'gpus': [{'pci_bus_id': bus, 'cuda_device': i, 'name': 'NVIDIA H200', 'results': res,
                      'busy_seconds': 0.61, 'context_seconds': 1.9, 'device_memory_bytes': 3 << 26,
                      'context_memory_bytes': 600 << 20, 'host_memory_bytes': 2 << 26,
                      'link_under_load': {'generation': 5, 'width': 16, 'confirmed': True}}
                     for i, (bus, res) in enumerate(gpus)]}


# Kinds each reference measures: torch_ref.py the host and local copies,
# latency_ref the latencies and (--kinds peer_bw) the peer copies.
TORCH_KINDS = {'host_to_device', 'device_to_host', 'host_bidirectional', 'device_local_copy'}


def torch_ref(results, node=0):
    """A torch_ref.py document; bus ids spelled as nvidia-smi does."""
    out = []
    for bus, gpu, r in results:
        r = dict(r, gpu=gpu, pci_bus_id='0000' + bus.upper())  # 00000000:00:06.0
        if 'peer' in r:
            r['peer'] = '0000' + r['peer'].upper()
        out.append(r)
    return {'tool': 'torch_ref', 'host_numa_node': node, 'gpus': [{'gpu': 0, 'pci_bus_id': '00000000:00:06.0'},
                                                                   {'gpu': 1, 'pci_bus_id': '00000000:00:07.0'}],
            'results': out}


def lat_ref(results):
    """A latency_ref document (latencies and peer copies); bus ids as
    cudaDeviceGetPCIBusId spells them."""
    return {'tool': 'latency_ref', 'gpus': [{'gpu': 0, 'pci_bus_id': G0.upper()}, {'gpu': 1, 'pci_bus_id': G1.upper()}],
            'results': [dict(r, gpu=gpu, pci_bus_id=bus.upper()) for bus, gpu, r in results]}


def scale(results, f):
    """Copies of results with every value multiplied by f."""
    out = []
    for r in results:
        r = dict(r)
        for k in ('bytes_per_second', 'seconds'):
            if k in r:
                r[k] *= f
        out.append(r)
    return out


def reference_for(probe_round, f=1.0, node=0):
    """torch and latency references equal to the probe round times f, each
    kind in the reference that measures it."""
    t, lt = [], []
    for i, g in enumerate(probe_round['gpus']):
        for r in scale(g['results'], f):
            r.pop('error', None)
            if 'host_numa_node' in r:
                r['host_numa_node'] = node
            (t if r['probe'] in TORCH_KINDS else lt).append((g['pci_bus_id'], i, r))
    return torch_ref(t, node), lat_ref(lt)


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.n = 0

    def write(self, doc):
        self.n += 1
        p = os.path.join(self.dir, 'f%d.json' % self.n)
        with open(p, 'w') as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return p

    def run_compare(self, *runs, extra=()):
        """runs: (probe_doc, [ref_docs]) -> (exit code, printed text, rows by key)."""
        argv = []
        for probe, refs in runs:
            argv += ['--run', self.write(probe)] + [self.write(r) for r in refs]
        js = os.path.join(self.dir, 'out.json')
        argv += ['--json', js] + list(extra)
        buf = io.StringIO()
        old, sys.stdout = sys.stdout, buf
        try:
            rc = pc.main(argv)
        finally:
            sys.stdout = old
        with open(js) as f:
            doc = json.load(f)
        rows = {(r['key']['gpu'], r['key']['probe'], r['key']['direction'], r['key']['peer'], r['key']['node']): r
                for r in doc['rows']}
        return rc, buf.getvalue(), rows, doc


def two_gpus(node=0):
    return round_([(G0, probe_results(G0, G1, node)), (G1, probe_results(G1, G0, node))])


class TestMatching(Base):
    def test_all_agree_across_bus_spellings(self):
        p = two_gpus()
        rc, text, rows, doc = self.run_compare((p, list(reference_for(p, 1.01))))
        self.assertEqual(rc, 0, text)
        self.assertEqual(len(rows), 22)
        self.assertTrue(all(r['status'] == 'PASS' for r in rows.values()), text)
        r = rows[(G0, 'peer_copy', 'to_peer', G1, None)]
        self.assertAlmostEqual(r['runs'][0]['diff_pct'], 100 * (1 / 1.01 - 1), places=6)
        self.assertIn('compare: 22 passed, 0 failed', text)
        self.assertEqual(doc['ref_only'], [])
        # GPU and peer shown by index, units human.
        self.assertRegex(text, r'\n0 +peer_copy +to_peer +1 +- +387\.0 GB/s +390\.9 GB/s')
        self.assertRegex(text, r'host_latency +- +- +0 +1170 ns')
        self.assertRegex(text, r'launch_latency +- +- +- +10\.50 us +10\.61 us')

    def test_thresholds(self):
        p = two_gpus()
        t, lr = reference_for(p)
        ref_of = {(r['pci_bus_id'].lower()[4:], r['probe'], r.get('direction')): r for r in t['results']}
        ref_of.update({(r['pci_bus_id'].lower(), r['probe'], r.get('direction')): r for r in lr['results']})
        # probe = ref * (1 + x): bandwidth 2.9% pass, 3.1% fail, -3.1% fail;
        # latency 9.5% pass, 10.5% fail.
        ref_of[(G0, 'host_to_device', 'host_to_device')]['bytes_per_second'] = 55.3 * GB / 1.029
        ref_of[(G0, 'device_to_host', 'device_to_host')]['bytes_per_second'] = 55.2 * GB / 1.031
        ref_of[(G1, 'device_local_copy', 'local')]['bytes_per_second'] = 3950 * GB / 0.969
        ref_of[(G0, 'host_latency', None)]['seconds'] = 1170e-9 / 1.095
        ref_of[(G1, 'launch_latency', None)]['seconds'] = 10.5e-6 / 1.105
        rc, text, rows, _ = self.run_compare((p, [t, lr]))
        self.assertEqual(rc, 1)
        st = {k: r['status'] for k, r in rows.items()}
        self.assertEqual(st[(G0, 'host_to_device', 'host_to_device', None, 0)], 'PASS')
        self.assertEqual(st[(G0, 'device_to_host', 'device_to_host', None, 0)], 'FAIL')
        self.assertEqual(st[(G1, 'device_local_copy', 'local', None, None)], 'FAIL')
        self.assertEqual(st[(G0, 'host_latency', None, None, 0)], 'PASS')
        self.assertEqual(st[(G1, 'launch_latency', None, None, None)], 'FAIL')
        self.assertEqual(rows[(G0, 'host_latency', None, None, 0)]['target_pct'], 10.0)
        self.assertEqual(rows[(G0, 'host_to_device', 'host_to_device', None, 0)]['target_pct'], 3.0)
        self.assertIn('compare: 19 passed, 3 failed', text)
        # Tolerances are flags.
        rc, _, rows, _ = self.run_compare((p, [t, lr]), extra=['--bw-tol', '3.5', '--lat-tol', '11'])
        self.assertEqual(rc, 0)

    def test_directions_kept_apart(self):
        p = two_gpus()
        t, lr = reference_for(p)
        for r in lr['results']:  # swap the bidirectional pair's directions in the reference
            if r['probe'] == 'peer_bidirectional' and r['gpu'] == 0:
                r['bytes_per_second'] = 384 * GB if r['direction'] == 'to_peer' else 385 * GB
        _, _, rows, _ = self.run_compare((p, [t, lr]))
        d = rows[(G0, 'peer_bidirectional', 'to_peer', G1, None)]['runs'][0]['diff_pct']
        self.assertAlmostEqual(d, (385 / 384 - 1) * 100, places=6)
        d = rows[(G0, 'peer_bidirectional', 'from_peer', G1, None)]['runs'][0]['diff_pct']
        self.assertAlmostEqual(d, (384 / 385 - 1) * 100, places=6)

    def test_direction_named_on_one_side_only(self):
        p = round_([(G0, [lat('peer_latency', 830e-9, peer=G1), bw('device_local_copy', '', 3900 * GB)])])
        p['gpus'][0]['results'][0]['direction'] = 'to_peer'
        lr = lat_ref([(G0, 0, lat('peer_latency', 828e-9, peer=G1))])
        t = torch_ref([(G0, 0, bw('device_local_copy', 'local', 3910 * GB))])
        rc, text, rows, doc = self.run_compare((p, [t, lr]))
        self.assertEqual(rc, 0, text)
        self.assertEqual(rows[(G0, 'peer_latency', 'to_peer', G1, None)]['status'], 'PASS')
        self.assertEqual(rows[(G0, 'device_local_copy', None, None, None)]['status'], 'PASS')
        self.assertIn("direction 'to_peer' vs ''", text)
        self.assertEqual(doc['ref_only'], [])
        # Two reference directions and none named by the probe: no guess.
        t = torch_ref([(G0, 0, bw('device_local_copy', 'local', 3910 * GB)),
                       (G0, 0, bw('device_local_copy', 'other', 3910 * GB))])
        rc, text, rows, doc = self.run_compare((p, [t, lr]))
        self.assertEqual(rows[(G0, 'device_local_copy', None, None, None)]['status'], 'NOREF')
        self.assertEqual(len(doc['ref_only']), 2)

    def test_peers_kept_apart(self):
        g2 = '0000:00:08.0'
        p = round_([(G0, [bw('peer_copy', 'to_peer', 380 * GB, peer=G1), bw('peer_copy', 'to_peer', 300 * GB, peer=g2)])])
        t = lat_ref([(G0, 0, bw('peer_copy', 'to_peer', 380 * GB, peer=G1)),
                     (G0, 0, bw('peer_copy', 'to_peer', 380 * GB, peer=g2))])
        rc, _, rows, _ = self.run_compare((p, [t]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'peer_copy', 'to_peer', G1, None)]['status'], 'PASS')
        self.assertEqual(rows[(G0, 'peer_copy', 'to_peer', g2, None)]['status'], 'FAIL')


class TestNodes(Base):
    def test_unbound_probe_matches_the_only_reference_node(self):
        p = two_gpus(node=-1)
        rc, text, rows, doc = self.run_compare((p, list(reference_for(p, node=0))))
        self.assertEqual(rc, 0, text)
        r = rows[(G0, 'host_to_device', 'host_to_device', None, -1)]
        self.assertEqual(r['status'], 'PASS')
        self.assertIn('ref node 0', r['runs'][0]['note'])
        self.assertEqual(doc['ref_only'], [])

    def test_nodes_matched_exactly(self):
        res = [bw('host_to_device', 'host_to_device', 55 * GB, node=0),
               bw('host_to_device', 'host_to_device', 40 * GB, node=1)]
        p = round_([(G0, res)])
        t0 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 55 * GB, node=0))], node=0)
        t1 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 40.5 * GB, node=1))], node=1)
        rc, text, rows, _ = self.run_compare((p, [t0, t1]))
        self.assertEqual(rc, 0, text)
        self.assertAlmostEqual(rows[(G0, 'host_to_device', 'host_to_device', None, 1)]['runs'][0]['diff_pct'],
                               (40 / 40.5 - 1) * 100, places=6)
        # The far node measured 27% lower; matching it to node 0 would fail.
        rc, text, rows, _ = self.run_compare((p, [t0]))
        self.assertEqual(rc, 1)
        r = rows[(G0, 'host_to_device', 'host_to_device', None, 1)]
        self.assertEqual(r['status'], 'NOREF')
        self.assertIn('no ref on node 1', text)

    def test_unbound_probe_with_two_reference_nodes_is_ambiguous(self):
        p = round_([(G0, [bw('host_to_device', 'host_to_device', 55 * GB)])])
        t0 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 55 * GB, node=0))], node=0)
        t1 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 40 * GB, node=1))], node=1)
        rc, text, rows, _ = self.run_compare((p, [t0, t1]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'host_to_device', 'host_to_device', None, None)]['status'], 'NOREF')

    def test_unbound_reference_matches_a_bound_probe(self):
        p = round_([(G0, [bw('host_to_device', 'host_to_device', 55 * GB, node=0)])])
        t = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 55 * GB))], node=None)
        rc, text, rows, _ = self.run_compare((p, [t]))
        self.assertEqual(rc, 0, text)
        self.assertIn('ref unbound', text)


class TestErrors(Base):
    def test_error_verdicts(self):
        p = two_gpus()
        t, lr = reference_for(p)
        g0 = p['gpus'][0]['results']
        # probe failed, reference fine
        g0[0] = bw('host_to_device', 'host_to_device', 0, node=0, error='CUDA_ERROR_OUT_OF_MEMORY')
        # both failed: no peer access on this pair
        g0[9] = lat('peer_latency', 0, peer=G1, error='peer access not supported')
        for r in lr['results']:
            if r['probe'] == 'peer_latency' and r['gpu'] == 0:
                r.pop('seconds')
                r['error'] = 'cudaDeviceCanAccessPeer: no peer access'
            if r['probe'] == 'launch_latency' and r['gpu'] == 1:  # reference failed, probe fine
                r.pop('seconds')
                r['error'] = 'cudaErrorLaunchFailure'
        rc, text, rows, _ = self.run_compare((p, [t, lr]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'host_to_device', 'host_to_device', None, 0)]['status'], 'PROBE-ERR')
        self.assertEqual(rows[(G0, 'peer_latency', None, G1, None)]['status'], 'BOTH-ERR')
        self.assertEqual(rows[(G1, 'launch_latency', None, None, None)]['status'], 'REF-ERR')
        self.assertIn('CUDA_ERROR_OUT_OF_MEMORY', text)
        self.assertIn('compare: 19 passed, 2 failed', text)
        # BOTH-ERR alone is no failure.
        g0[0] = bw('host_to_device', 'host_to_device', 55.3 * GB, node=0)
        for r in lr['results']:
            if r['probe'] == 'launch_latency' and r['gpu'] == 1:
                r.pop('error')
                r['seconds'] = 10.5e-6
        rc, text, _, _ = self.run_compare((p, [t, lr]))
        self.assertEqual(rc, 0, text)
        self.assertIn('BOTH-ERR 1', text)

    def test_gpu_error_fails(self):
        p = two_gpus()
        t, lr = reference_for(p)
        p['gpus'][1] = {'pci_bus_id': G1, 'cuda_device': 1, 'results': [], 'busy_seconds': 0,
                        'context_seconds': 0, 'device_memory_bytes': 0, 'host_memory_bytes': 0,
                        'error': 'cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY'}
        rc, text, rows, doc = self.run_compare((p, [t, lr]))
        self.assertEqual(rc, 1)
        self.assertIn('GPU 1 (0000:00:07.0) not probed: cuCtxCreate', text)
        self.assertIn('compare: 11 passed, 1 failed', text)
        self.assertEqual(len(doc['ref_only']), 11)  # GPU 1's references, listed

    def test_missing_and_broken_references(self):
        p = two_gpus()
        t, _ = reference_for(p)
        rc, text, rows, _ = self.run_compare((p, [t, '{not json']))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'launch_latency', None, None, None)]['status'], 'NOREF')
        self.assertIn('reference problem', text)
        self.assertEqual(rows[(G0, 'peer_copy', 'to_peer', G1, None)]['status'], 'NOREF')
        self.assertIn('compare: 10 passed, 12 failed', text)

    def test_reference_only_results_listed_not_failed(self):
        p = round_([(G0, [bw('peer_copy', 'to_peer', 380 * GB, peer=G1)])])
        t = lat_ref([(G0, 0, bw('peer_copy', 'to_peer', 380 * GB, peer=G1)),
                     (G1, 1, bw('peer_copy', 'to_peer', 381 * GB, peer=G0))])
        rc, text, _, doc = self.run_compare((p, [t]))
        self.assertEqual(rc, 0, text)
        self.assertEqual(len(doc['ref_only']), 1)
        self.assertIn('run 1: gpu 1 peer_copy to_peer peer 0', text)

    def test_unusable_probe_round(self):
        buf = io.StringIO()
        old, sys.stderr = sys.stderr, buf
        try:
            rc = pc.main(['--run', self.write('not json'), self.write({})])
            rc2 = pc.main(['--run', self.write({'results': []})])
            rc3 = pc.main(['--run', os.path.join(self.dir, 'absent.json')])
        finally:
            sys.stderr = old
        self.assertEqual((rc, rc2, rc3), (2, 2, 2))

    def test_empty_round_fails(self):
        buf = io.StringIO()
        old_out, old_err, sys.stdout, sys.stderr = sys.stdout, sys.stderr, buf, buf
        try:
            rc = pc.main(['--run', self.write(round_([]))])
        finally:
            sys.stdout, sys.stderr = old_out, old_err
        self.assertEqual(rc, 1)


class TestDuplicates(Base):
    """Each key must come from exactly one reference result."""

    def test_two_references_for_one_key(self):
        # torch_ref asked for peer copies as well as latency_ref: an error,
        # not one of them silently picked.
        p = two_gpus()
        t, lr = reference_for(p)
        old = torch_ref([(G0, 0, bw('peer_copy', 'to_peer', 360 * GB, peer=G1))])
        rc, text, rows, doc = self.run_compare((p, [t, lr, old]))
        self.assertEqual(rc, 1)
        row = rows[(G0, 'peer_copy', 'to_peer', G1, None)]
        self.assertEqual(row['status'], 'DUP-REF')
        self.assertIsNone(row['runs'][0]['ref'])
        self.assertIsNone(row['runs'][0]['diff_pct'])
        self.assertIn('2 reference results for this key', row['runs'][0]['ref_error'])
        self.assertEqual(rows[(G1, 'peer_copy', 'to_peer', G0, None)]['status'], 'PASS')
        self.assertIn('error: keys given by more than one reference result', text)
        self.assertRegex(text, r'run 1: gpu 0 peer_copy to_peer peer 1 node -: \S+f3\.json, \S+f4\.json\n')
        self.assertIn('DUP-REF 1', text)
        self.assertIn('compare: 21 passed, 1 failed', text)
        self.assertEqual(doc['ref_only'], [])
        self.assertEqual(len(doc['duplicates']), 1)
        d = doc['duplicates'][0]
        self.assertEqual((d['run'], d['key']['probe'], d['key']['peer'], d['probe_row']), (1, 'peer_copy', G1, True))
        self.assertEqual(len(d['files']), 2)
        self.assertEqual(doc['failed'], 1)

    def test_same_key_twice_in_one_file(self):
        p = round_([(G0, [bw('device_local_copy', 'local', 3900 * GB)])])
        t = torch_ref([(G0, 0, bw('device_local_copy', 'local', 3900 * GB)),
                       (G0, 0, bw('device_local_copy', 'local', 3950 * GB))])
        rc, text, rows, doc = self.run_compare((p, [t]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'device_local_copy', 'local', None, None)]['status'], 'DUP-REF')
        self.assertEqual(doc['duplicates'][0]['files'][0], doc['duplicates'][0]['files'][1])

    def test_duplicate_with_no_probe_result_fails(self):
        p = round_([(G0, [bw('peer_copy', 'to_peer', 380 * GB, peer=G1)])])
        lr = lat_ref([(G0, 0, bw('peer_copy', 'to_peer', 380 * GB, peer=G1)),
                      (G1, 1, bw('peer_copy', 'to_peer', 381 * GB, peer=G0))])
        t = torch_ref([(G1, 1, bw('peer_copy', 'to_peer', 362 * GB, peer=G0))])
        rc, text, rows, doc = self.run_compare((p, [lr, t]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'peer_copy', 'to_peer', G1, None)]['status'], 'PASS')
        self.assertIn('run 1: gpu 1 peer_copy to_peer peer 0 node -: ', text)
        self.assertIn('(no probe result either)', text)
        self.assertIn('compare: 1 passed, 1 failed', text)
        self.assertEqual(doc['ref_only'], [])  # listed as duplicates, not as reference-only
        self.assertEqual(doc['duplicates'][0]['probe_row'], False)

    def test_duplicates_through_node_fallbacks(self):
        # Unbound probe, two references of node 0: a duplicate, not "refs on
        # several nodes".
        p = round_([(G0, [bw('host_to_device', 'host_to_device', 55 * GB)])])
        t0 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 55 * GB, node=0))], node=0)
        t1 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 54 * GB, node=0))], node=0)
        rc, text, rows, _ = self.run_compare((p, [t0, t1]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'host_to_device', 'host_to_device', None, None)]['status'], 'DUP-REF')
        self.assertIn('ref node 0', text)
        # Bound probe, two unbound references.
        p = round_([(G0, [bw('host_to_device', 'host_to_device', 55 * GB, node=1)])])
        t0 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 55 * GB))], node=None)
        t1 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 54 * GB))], node=None)
        rc, text, rows, _ = self.run_compare((p, [t0, t1]))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[(G0, 'host_to_device', 'host_to_device', None, 1)]['status'], 'DUP-REF')

    def test_same_key_on_other_nodes_or_runs_is_no_duplicate(self):
        p = round_([(G0, [bw('host_to_device', 'host_to_device', 55 * GB, node=0),
                          bw('host_to_device', 'host_to_device', 40 * GB, node=1)])])
        t0 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 55 * GB, node=0))], node=0)
        t1 = torch_ref([(G0, 0, bw('host_to_device', 'host_to_device', 40 * GB, node=1))], node=1)
        rc, text, _, doc = self.run_compare((p, [t0, t1]), (p, [t0, t1]))
        self.assertEqual(rc, 0, text)
        self.assertEqual(doc['duplicates'], [])
        self.assertNotIn('more than one reference', text)


class TestTwoRuns(Base):
    def test_drift_and_either_run_failing(self):
        p1 = two_gpus()
        p2 = copy.deepcopy(p1)
        for g in p2['gpus']:
            g['results'] = scale(g['results'], 0.99)  # probe drifts 1% down
        r1 = list(reference_for(p1, 1.005))
        r2 = list(reference_for(p2, 1.0))
        rc, text, rows, _ = self.run_compare((p1, r1), (p2, r2))
        self.assertEqual(rc, 0, text)
        r = rows[(G1, 'device_local_copy', 'local', None, None)]
        self.assertAlmostEqual(r['probe_drift_pct'], -1.0, places=6)
        self.assertAlmostEqual(r['ref_drift_pct'], (0.99 / 1.005 - 1) * 100, places=6)
        self.assertIn('probe drift', text.splitlines()[0])
        self.assertIn('diff2', text.splitlines()[0])
        # Run 2's H2D reference 7% off: the medians of two runs are their
        # means, 3.5% apart, and the row fails though run 1 passed.
        for r in r2[0]['results']:
            if r['probe'] == 'host_to_device' and r['gpu'] == 0:
                r['bytes_per_second'] *= 1.07
        rc, text, rows, _ = self.run_compare((p1, r1), (p2, r2))
        self.assertEqual(rc, 1)
        row = rows[(G0, 'host_to_device', 'host_to_device', None, 0)]
        self.assertEqual([c['status'] for c in row['runs']], ['PASS', 'FAIL'])
        self.assertEqual(row['status'], 'FAIL')
        self.assertIn('diff med', text.splitlines()[0])

    def test_verdict_on_medians_across_three_runs(self):
        p = [two_gpus() for _ in range(3)]
        refs = [list(reference_for(x, 1.0)) for x in p]

        def off(run, factor):
            for r in refs[run][0]['results']:
                if r['probe'] == 'host_to_device' and r['gpu'] == 0:
                    r['bytes_per_second'] *= factor
        key = (G0, 'host_to_device', 'host_to_device', None, 0)
        # One reference run 8% off: the medians agree, the row passes and
        # still shows the failing run.
        off(1, 1.08)
        rc, text, rows, _ = self.run_compare(*zip(p, refs))
        self.assertEqual(rc, 0, text)
        self.assertEqual([c['status'] for c in rows[key]['runs']], ['PASS', 'FAIL', 'PASS'])
        self.assertAlmostEqual(rows[key]['median']['diff_pct'], 0.0, places=6)
        # Two of three off: the reference's median moves and the row fails.
        off(2, 1.08)
        rc, text, rows, _ = self.run_compare(*zip(p, refs))
        self.assertEqual(rc, 1)
        self.assertEqual(rows[key]['status'], 'FAIL')
        self.assertAlmostEqual(rows[key]['median']['diff_pct'], (1 / 1.08 - 1) * 100, places=6)

    def test_result_missing_from_one_run(self):
        p1 = two_gpus()
        p2 = copy.deepcopy(p1)
        del p2['gpus'][0]['results'][4]  # GPU 0 local copy gone in run 2
        rc, text, rows, _ = self.run_compare((p1, list(reference_for(p1))), (p2, list(reference_for(p2))))
        self.assertEqual(rc, 1)
        row = rows[(G0, 'device_local_copy', 'local', None, None)]
        self.assertEqual([c['status'] for c in row['runs']], ['PASS', 'PROBE-ERR'])
        self.assertIn('not in this round', text)


class TestTestdata(unittest.TestCase):
    def test_sample_as_documented(self):
        base = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')
        argv = []
        for n in (1, 2):
            d = os.path.join(base, 'run%d' % n)
            argv += ['--run', os.path.join(d, 'probe.json'), os.path.join(d, 'ref-lat-n0.json'),
                     os.path.join(d, 'ref-torch-n0.json')]
        buf = io.StringIO()
        old, sys.stdout = sys.stdout, buf
        try:
            rc = pc.main(argv)
        finally:
            sys.stdout = old
        text = buf.getvalue()
        self.assertEqual(rc, 1, text)
        self.assertIn('compare: 21 passed, 1 failed', text)
        self.assertRegex(text, r'\n1 +peer_copy +to_peer +0 .* FAIL')
        self.assertNotIn('more than one reference', text)
        # The peer copies come from latency_ref, as bench/probe-accuracy.sh runs it.
        with open(os.path.join(base, 'run1', 'ref-lat-n0.json')) as f:
            self.assertIn('peer_bidirectional', {r['probe'] for r in json.load(f)['results']})
        with open(os.path.join(base, 'run1', 'ref-torch-n0.json')) as f:
            self.assertFalse({r['probe'] for r in json.load(f)['results']} - TORCH_KINDS)


def write_testdata():
    base = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')
    p1 = two_gpus()
    p2 = copy.deepcopy(p1)
    for g in p2['gpus']:
        g['results'] = scale(g['results'], 0.995)
    refs = [reference_for(p1, 1.004), reference_for(p2, 1.0)]
    p2['gpus'][1]['results'][5]['bytes_per_second'] = 360 * GB  # GPU 1 -> 0 copy 7% low in run 2: one FAIL
    for n, (p, (t, lr)) in enumerate(zip((p1, p2), refs), 1):
        d = os.path.join(base, 'run%d' % n)
        os.makedirs(d, exist_ok=True)
        for name, doc in (('probe.json', p), ('ref-torch-n0.json', t), ('ref-lat-n0.json', lr)):
            with open(os.path.join(d, name), 'w') as fh:
                json.dump(doc, fh, indent=1)
                fh.write('\n')


if __name__ == '__main__':
    if sys.argv[1:] == ['--write-testdata']:
        write_testdata()
    else:
        unittest.main()
