#!/usr/bin/env python3
"""Independent PyTorch reference for the host and local bandwidth probes of
`gpulink_exporter probe`, on the same GPUs, for bench/probe-accuracy.sh.

Usage: torch_ref.py [--kinds host,local] [--gpus 0,1] [--node N]
                    [--size BYTES] [--batch N] [--samples N] [--warmup N]
                    [--spin-cycles N]

Measures, per GPU (CUDA ordinal in PCI bus order):
  host_to_device, device_to_host   pinned host tensor, dst.copy_(src, non_blocking=True)
  host_bidirectional               both directions at once on two streams, each
                                   direction measured in its own samples: the
                                   measured direction queues --batch (L) copies,
                                   the other ceil(1.5 L) + 1, so it is still
                                   copying when the measured copies end; only the
                                   measured stream is timed. --samples samples
                                   measuring host_to_device, then --samples
                                   measuring device_to_host, median of each.
  device_local_copy                dst.copy_(src) on one GPU; 2 x bytes / time
                                   (every byte read and written counted)
Peer copies are not measured here: PyTorch's cross-device copy_ puts
cross-stream synchronisation around every copy (358-368 GB/s on an H200 pair
where nvbandwidth gets 387.6); latency_ref --kinds peer_bw measures them.

One sample = copies queued behind a GPU spin kernel (torch.cuda._sleep) on the
first stream, with a gate event recorded behind the spin that every other
stream waits on (so all streams start together when the spin ends), timed with
CUDA events around the measured stream's copies (--batch of them); the result
is the median of --samples samples after --warmup untimed ones. If the spin
ran out before the sample was queued (the GPU could idle between copies) the
sample is thrown away and the spin doubled.

Pinned host memory goes where the process's memory policy puts it: run under
`numactl --membind=N` and pass --node N to label the results with that node.
GB/s is decimal (1e9). Prints one JSON object on stdout; results use the field
names of probes.Result (probe, direction, peer, host_numa_node, size_bytes,
samples, bytes_per_second) plus gpu and pci_bus_id, so probe_compare.py
reads the probe's and this output alike.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# CUDA ordinals in PCI bus order, the order nvidia-smi numbers GPUs in.
os.environ.setdefault('CUDA_DEVICE_ORDER', 'PCI_BUS_ID')

import torch  # noqa: E402  (after CUDA_DEVICE_ORDER on purpose)


def norm_bus(s):
    """'00000000:06:00.0' or '0000:06:00.0' -> '0000:06:00.0' (sysfs form)."""
    if not s:
        return None
    s = s.strip().lower()
    try:
        dom, bus, rest = s.split(':')
        dev, fn = rest.split('.')
        return '%04x:%02x:%02x.%x' % (int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16))
    except ValueError:
        return s


def smi_bus_ids():
    """uuid (without 'GPU-') -> pci bus id, from nvidia-smi; {} if unavailable."""
    try:
        text = subprocess.run(['nvidia-smi', '--query-gpu=uuid,pci.bus_id', '--format=csv,noheader'],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    m = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(',')]
        if len(parts) == 2:
            m[parts[0].lower().removeprefix('gpu-')] = norm_bus(parts[1])
    return m


def bus_id(i, by_uuid):
    """GPU i's PCI address: nvidia-smi's, found by UUID; else the device
    properties' PCI fields (newer PyTorch); else None."""
    p = torch.cuda.get_device_properties(i)
    u = str(getattr(p, 'uuid', '')).lower().removeprefix('gpu-')
    if u in by_uuid:
        return by_uuid[u]
    if all(hasattr(p, a) for a in ('pci_domain_id', 'pci_bus_id', 'pci_device_id')):
        return '%04x:%02x:%02x.0' % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
    return None


def loaded_copies(batch):
    """Copies the other direction queues in a bidirectional sample that
    measures batch copies: ceil(1.5 * batch) + 1, so it is still copying when
    the measured copies end."""
    return (3 * batch + 1) // 2 + 1


class Timer:
    """Times copies queued behind a spin kernel."""

    def __init__(self, args):
        self.args = args
        self.spin = 'spin' if hasattr(torch.cuda, '_sleep') else 'none'
        self.cycles = args.spin_cycles
        self.retries = 0

    def sample(self, lanes, measured=0):
        """lanes: list of (stream, issue, copies) where issue() queues one
        copy on that stream (made current for it). The first lane's stream
        runs the spin kernel and records a gate event behind it; every other
        lane's stream waits on that event, so all lanes start when the spin
        ends. Each lane queues its copies; only lane `measured` is timed, by
        CUDA events on its stream around its copies. Waits for every lane
        (the others' leftover copies too). Returns the measured lane's
        seconds."""
        for _ in range(8):
            s0 = lanes[0][0]
            with torch.cuda.device(s0.device), torch.cuda.stream(s0):
                if self.spin == 'spin':
                    torch.cuda._sleep(self.cycles)
                gate = torch.cuda.Event()
                gate.record(s0)
            a = b = None
            for k, (s, issue, copies) in enumerate(lanes):
                with torch.cuda.device(s.device), torch.cuda.stream(s):
                    if k > 0:
                        s.wait_event(gate)
                    if k == measured:
                        a = torch.cuda.Event(enable_timing=True)
                        b = torch.cuda.Event(enable_timing=True)
                        a.record(s)
                    for _ in range(copies):
                        issue()
                    if k == measured:
                        b.record(s)
            # If the gate already passed, a lane may have started (and the GPU
            # idled between copies) while Python was still queueing.
            late = self.spin == 'spin' and gate.query()
            for s, _issue, _copies in lanes:
                s.synchronize()
            if not late:
                return a.elapsed_time(b) / 1e3
            self.cycles *= 2
            self.retries += 1
        raise RuntimeError('spin kernel never outlasted queueing the sample')

    def measure(self, lanes, nbytes, measured=0):
        """Median bytes/s of the measured lane over samples after warm-up;
        also every sample."""
        for _ in range(self.args.warmup):
            self.sample(lanes, measured)
        copies = lanes[measured][2]
        v = [nbytes * copies / self.sample(lanes, measured) for _ in range(self.args.samples)]
        return statistics.median(v), v


def result(gpu, bus, kind, direction, rate, allv, args, node=None, extra=None):
    r = {'gpu': gpu, 'pci_bus_id': bus, 'probe': kind, 'direction': direction,
         'size_bytes': args.size, 'samples': args.samples, 'bytes_per_second': rate,
         'all_bytes_per_second': allv}
    if node is not None:
        r['host_numa_node'] = node
    if extra:
        r.update(extra)
    return r


def err(gpu, bus, kind, e, direction=None, node=None):
    r = {'gpu': gpu, 'pci_bus_id': bus, 'probe': kind, 'error': '%s: %s' % (type(e).__name__, e)}
    if direction is not None:
        r['direction'] = direction
    if node is not None:
        r['host_numa_node'] = node
    return r


def host_kinds(i, bus, t, args, out):
    n = args.size
    dev = torch.device('cuda', i)
    node = args.node
    dirs = {'host_to_device': ['host_to_device'], 'device_to_host': ['device_to_host'],
            'host_bidirectional': ['host_to_device', 'device_to_host']}

    def fail(kind, e):
        for d in dirs[kind]:
            out.append(err(i, bus, kind, e, direction=d, node=node))

    try:
        h_src = torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(7)
        h_dst = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        h_src2 = torch.empty(n, dtype=torch.uint8, pin_memory=True).fill_(9)
        h_dst2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        d_dst = torch.empty(n, dtype=torch.uint8, device=dev)
        d_src = torch.empty(n, dtype=torch.uint8, device=dev).fill_(3)
        d_dst2 = torch.empty(n, dtype=torch.uint8, device=dev)
        d_src2 = torch.empty(n, dtype=torch.uint8, device=dev).fill_(5)
        s1 = torch.cuda.Stream(device=dev)
        s2 = torch.cuda.Stream(device=dev)
        torch.cuda.synchronize(dev)
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
        for kind in dirs:
            fail(kind, e)
        return
    L = args.batch
    for kind, issue in (('host_to_device', lambda: d_dst.copy_(h_src, non_blocking=True)),
                        ('device_to_host', lambda: h_dst.copy_(d_src, non_blocking=True))):
        try:
            rate, allv = t.measure([(s1, issue, L)], n)
            out.append(result(i, bus, kind, kind, rate, allv, args, node=node, extra={'copies': L}))
        except Exception as e:  # noqa: BLE001
            fail(kind, e)
    # Both directions at once, each measured in its own samples: the measured
    # direction queues L copies, the other ceil(1.5 L) + 1 so that it is still
    # copying when the measured copies end; the spin is on the host-to-device
    # stream, the device-to-host stream waits on its gate event.
    h2d = lambda: d_dst2.copy_(h_src2, non_blocking=True)  # noqa: E731
    d2h = lambda: h_dst2.copy_(d_src2, non_blocking=True)  # noqa: E731
    load = loaded_copies(L)
    try:
        res = [t.measure([(s1, h2d, L), (s2, d2h, load)], n, measured=0),
               t.measure([(s1, h2d, load), (s2, d2h, L)], n, measured=1)]
    except Exception as e:  # noqa: BLE001
        fail('host_bidirectional', e)
        return
    for d, (rate, allv) in zip(dirs['host_bidirectional'], res):
        out.append(result(i, bus, 'host_bidirectional', d, rate, allv, args, node=node,
                          extra={'copies': L, 'loaded_copies': load}))


def local_kind(i, bus, t, args, out):
    n = args.size
    dev = torch.device('cuda', i)
    try:
        src = torch.empty(n, dtype=torch.uint8, device=dev).fill_(1)
        dst = torch.empty(n, dtype=torch.uint8, device=dev)
        s = torch.cuda.Stream(device=dev)
        torch.cuda.synchronize(dev)
        # 2 x bytes: every byte is read once and written once.
        rate, allv = t.measure([(s, lambda: dst.copy_(src, non_blocking=True), args.batch)], 2 * n)
        out.append(result(i, bus, 'device_local_copy', 'local', rate, allv, args, extra={'copies': args.batch}))
    except Exception as e:  # noqa: BLE001
        out.append(err(i, bus, 'device_local_copy', e, direction='local'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--kinds', default='host,local',
                    help='comma list of host, local (default both); peer copies are measured by '
                         'latency_ref --kinds peer_bw')
    ap.add_argument('--gpus', default='all', help='comma list of CUDA ordinals (PCI order) or all')
    ap.add_argument('--node', type=int, default=None,
                    help='NUMA node the pinned memory is bound to by the caller (label only)')
    ap.add_argument('--size', type=int, default=64 << 20, help='bytes per copy (default 64 MiB)')
    ap.add_argument('--batch', type=int, default=16,
                    help='copies per timed sample (L; in host_bidirectional the other direction '
                         'queues ceil(1.5 L) + 1)')
    ap.add_argument('--samples', type=int, default=7)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--spin-cycles', type=int, default=10_000_000,
                    help='GPU clock cycles the spin kernel holds the stream (about 5 ms)')
    args = ap.parse_args()
    kinds = set(args.kinds.split(','))
    if 'peer' in kinds:
        ap.error('peer copies moved to latency_ref (--kinds peer_bw): PyTorch synchronises streams '
                 'around every cross-device copy_')
    bad = kinds - {'host', 'local'}
    if bad:
        ap.error('unknown kinds: %s' % ','.join(sorted(bad)))
    if args.batch < 1 or args.samples < 1 or args.warmup < 0 or args.size < 1:
        ap.error('--size, --batch and --samples must be positive, --warmup not negative')

    started = time.time()
    ngpu = torch.cuda.device_count()
    gpus = list(range(ngpu)) if args.gpus == 'all' else [int(g) for g in args.gpus.split(',')]
    by_uuid = smi_bus_ids()
    buses = {i: bus_id(i, by_uuid) for i in gpus}
    t = Timer(args)
    out = []
    for i in gpus:
        if 'host' in kinds:
            host_kinds(i, buses[i], t, args, out)
        if 'local' in kinds:
            local_kind(i, buses[i], t, args, out)
    doc = {
        'tool': 'torch_ref',
        'torch': torch.__version__,
        'cuda_runtime': torch.version.cuda,
        'cuda_device_order': os.environ.get('CUDA_DEVICE_ORDER'),
        'host_numa_node': args.node,
        'size_bytes': args.size, 'batch': args.batch, 'bidirectional_loaded_copies': loaded_copies(args.batch),
        'samples': args.samples, 'warmup': args.warmup,
        'spin': t.spin, 'spin_cycles_final': t.cycles, 'spin_retries': t.retries,
        'gpus': [{'gpu': i, 'pci_bus_id': buses[i], 'name': torch.cuda.get_device_name(i)} for i in gpus],
        'seconds': time.time() - started,
        'results': out,
    }
    json.dump(doc, sys.stdout, indent=1)
    print()


if __name__ == '__main__':
    main()
