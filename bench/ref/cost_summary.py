#!/usr/bin/env python3
"""Summarise bench/probe-cost.sh: GEMM throughput alone vs while the daemon
probes, and the probe cost the daemon itself exports.

Usage: cost_summary.py --samples GEMM.jsonl --phases PHASES.txt --gpu 0
                       [--metrics-always METRICS.txt] [--metrics-idle METRICS.txt]
                       [--split NAME=METRICS.txt ...] [--max-loss PCT] [--json OUT.json]

GEMM.jsonl is gemm_loop.py's output; PHASES.txt lines of "NAME EPOCH" marking
alone_start, with_start, with_end, and optionally idle_start, idle_end,
after_start, after_end, and split_NAME_start, split_NAME_end for each
--split: a phase that probed with only some probe kinds, to tell which of
them costs the job (reported, not judged). A one-second window counts for a phase only when it
lies wholly inside it. loss % = (alone - with) / alone * 100 of the mean
TFLOP/s; exits 1 when it exceeds --max-loss (default 1) or when the daemon
ran no probe round on the GEMM's GPU in the "with" phase (nothing measured).
Standard library only.
"""
import argparse
import json
import re
import statistics
import sys

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(path):
    series = []
    try:
        f = open(path)
    except OSError:
        return series
    with f:
        for line in f:
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            m = LINE.match(line)
            if not m:
                continue
            try:
                v = float(m.group(4))
            except ValueError:
                continue
            series.append((m.group(1), dict(LABEL.findall(m.group(3) or '')), v))
    return series


def phase_stats(samples, start, end):
    v = [s['tflops'] for s in samples if s['t0'] >= start and s['t1'] <= end]
    g = [s['tflops_gpu'] for s in samples if s['t0'] >= start and s['t1'] <= end]
    if not v:
        return None
    return {'windows': len(v), 'mean': statistics.fmean(v), 'median': statistics.median(v), 'min': min(v),
            'max': max(v), 'stdev': statistics.stdev(v) if len(v) > 1 else 0.0,
            'mean_by_events': statistics.fmean(g)}


def per_gpu(series):
    """gpu label -> {metric name (without gpulink_probe_) [+ {labels}]: value} for gpulink_probe_* series."""
    out = {}
    for name, labels, v in series:
        if not name.startswith('gpulink_probe_') or 'gpu' not in labels:
            continue
        rest = {k: x for k, x in labels.items() if k not in ('gpu', 'uuid', 'pci_bus_id')}
        key = name[len('gpulink_probe_'):]
        if rest:
            key += '{%s}' % ','.join('%s=%s' % kv for kv in sorted(rest.items()))
        d = out.setdefault(labels['gpu'], {})
        d[key] = d.get(key, 0.0) + v
    return out


def first(d, *names):
    for n in names:
        if n in d:
            return d[n]
    return None


def derived(d):
    """Per-round figures from one GPU's gpulink_probe_* values."""
    runs = {k[len('runs_total{result='):-1]: v for k, v in d.items() if k.startswith('runs_total{result=')}
    total = sum(runs.values())
    busy = first(d, 'busy_seconds_total')
    ctx = first(d, 'context_seconds_total')
    if first(d, 'round_duration_seconds_count'):
        dur = d['round_duration_seconds_sum'] / d['round_duration_seconds_count']
    else:
        dur = first(d, 'round_duration_seconds')
    skips = {k: v for k, v in d.items() if 'skip' in k}
    return {'runs': runs, 'runs_total': total,
            'busy_seconds_total': busy, 'busy_seconds_per_round': busy / total if busy is not None and total else None,
            'context_seconds_total': ctx, 'context_seconds_per_round': ctx / total if ctx is not None and total else None,
            'device_memory_bytes': first(d, 'device_memory_bytes'),
            'context_memory_bytes': first(d, 'context_memory_bytes'),
            'round_duration_seconds': dur, 'skips': skips}


def splits(args, samples, phases, alone):
    """Each split phase: GEMM throughput and loss against alone, and the
    probed GPU's busy seconds per round in it."""
    out = {}
    if args.split:
        print('\n== split phases: policy always, only some probe kinds (loss against alone)')
        print('%-24s %7s %8s %8s %8s %10s' % ('kinds', 'windows', 'mean', 'loss %', 'rounds', 'busy/round'))
    for spec in args.split:
        name, _, path = spec.partition('=')
        a, b = 'split_%s_start' % name, 'split_%s_end' % name
        st = phase_stats(samples, phases[a], phases[b]) if a in phases and b in phases else None
        d = derived(per_gpu(parse_metrics(path)).get(str(args.gpu), {})) if path else derived({})
        loss = (alone['mean'] - st['mean']) / alone['mean'] * 100 if st and alone else None
        out[name] = {'gemm': st, 'loss_pct': loss, 'rounds': d['runs_total'],
                     'busy_seconds_per_round': d['busy_seconds_per_round']}
        print('%-24s %7s %8s %8s %8d %10s' % (name, st['windows'] if st else 'none', fmt(st and st['mean'], '', 1, 1),
                                              fmt(loss, '', 1, 2), d['runs_total'],
                                              fmt(d['busy_seconds_per_round'], ' s')))
    return out


def fmt(v, unit='', scale=1.0, digits=3):
    return '-' if v is None else ('%.*f%s' % (digits, v * scale, unit))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--samples', required=True)
    ap.add_argument('--phases', required=True)
    ap.add_argument('--gpu', default='0')
    ap.add_argument('--metrics-always')
    ap.add_argument('--metrics-idle')
    ap.add_argument('--split', action='append', default=[], metavar='NAME=METRICS',
                    help='a split phase and the metrics scraped at its end')
    ap.add_argument('--max-loss', type=float, default=1.0)
    ap.add_argument('--json')
    args = ap.parse_args(argv)

    samples = []
    with open(args.samples) as f:
        for line in f:
            try:
                samples.append(json.loads(line))
            except ValueError:
                pass  # a line cut short when the loop was killed
    phases = {}
    with open(args.phases) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                phases[parts[0]] = float(parts[1])

    def stats(a, b):
        return phase_stats(samples, phases[a], phases[b]) if a in phases and b in phases else None

    res = {'gpu': args.gpu, 'max_loss_pct': args.max_loss,
           'alone': stats('alone_start', 'with_start'), 'with_probes': stats('with_start', 'with_end'),
           'idle_policy': stats('idle_start', 'idle_end'), 'alone_after': stats('after_start', 'after_end')}
    problems = []
    print('== GEMM throughput on GPU %s (TFLOP/s, one-second windows, wall clock)' % args.gpu)
    print('%-28s %7s %8s %8s %8s %8s %7s %10s' % ('phase', 'windows', 'mean', 'median', 'min', 'max', 'stdev',
                                                  'by events'))
    for name, title in (('alone', 'alone'), ('with_probes', 'daemon, policy always, 10 s'),
                        ('idle_policy', 'daemon, policy idle'), ('alone_after', 'alone again')):
        s = res[name]
        if s:
            print('%-28s %7d %8.1f %8.1f %8.1f %8.1f %7.2f %10.1f' % (title, s['windows'], s['mean'], s['median'],
                                                                      s['min'], s['max'], s['stdev'],
                                                                      s['mean_by_events']))
        else:
            print('%-28s %7s' % (title, 'none'))
    a, w, z = res['alone'], res['with_probes'], res['alone_after']
    loss = None
    if a and w:
        loss = (a['mean'] - w['mean']) / a['mean'] * 100
        print('loss with probes: %.2f%% (target <= %g%%)' % (loss, args.max_loss))
        if z:
            both = (a['mean'] + z['mean']) / 2
            print('  against alone before and after averaged: %.2f%%; alone drift before -> after: %+.2f%%' % (
                (both - w['mean']) / both * 100, (z['mean'] - a['mean']) / a['mean'] * 100))
        worst = min(s['tflops'] for s in samples if s['t0'] >= phases['with_start'] and s['t1'] <= phases['with_end'])
        print('  worst one-second window with probes: %.1f TFLOP/s (%.1f%% below the alone mean)' % (
            worst, (a['mean'] - worst) / a['mean'] * 100))
    else:
        problems.append('no GEMM windows for alone or with-probes phase')
    res['loss_pct'] = loss

    for tag, path in (('always', args.metrics_always), ('idle', args.metrics_idle)):
        if not path:
            continue
        gpus = per_gpu(parse_metrics(path))
        res['metrics_' + tag] = {g: dict(derived(d), raw=d) for g, d in gpus.items()}
        print('\n== daemon, policy %s: gpulink_probe_* at the end of the phase' % tag)
        if not gpus:
            print('no gpulink_probe_* series with a gpu label')
            if tag == 'always':
                problems.append('no probe metrics from the daemon')
            continue
        print('%-4s %-34s %6s %10s %10s %11s %11s %9s %9s' % (
            'gpu', 'runs by result', 'rounds', 'busy/round', 'ctx/round', 'device mem', 'context mem', 'round s',
            'busy tot'))
        for g in sorted(gpus, key=lambda x: (len(x), x)):
            d = derived(gpus[g])
            runs = ' '.join('%s=%d' % kv for kv in sorted(d['runs'].items())) or '-'
            print('%-4s %-34s %6d %10s %10s %11s %11s %9s %9s' % (
                g, runs, d['runs_total'], fmt(d['busy_seconds_per_round'], ' s'),
                fmt(d['context_seconds_per_round'], ' s'), fmt(d['device_memory_bytes'], ' MiB', 2 ** -20, 0),
                fmt(d['context_memory_bytes'], ' MiB', 2 ** -20, 0), fmt(d['round_duration_seconds'], ' s', 1, 2),
                fmt(d['busy_seconds_total'], ' s')))
            if d['skips']:
                print('     skips: %s' % ' '.join('%s=%d' % kv for kv in sorted(d['skips'].items())))
        if tag == 'always':
            d = derived(gpus.get(str(args.gpu), {}))
            if not d['runs'].get('success') and not d['runs'].get('partial'):
                problems.append('the daemon ran no probe round on GPU %s with policy always' % args.gpu)
            if w and d['busy_seconds_total'] is not None:
                span = phases['with_end'] - phases['with_start']
                print('GPU %s: probes kept it busy %.3f s of %.0f s (%.2f%%)' % (
                    args.gpu, d['busy_seconds_total'], span, d['busy_seconds_total'] / span * 100))
        if tag == 'idle':
            d = derived(gpus.get(str(args.gpu), {}))
            print('GPU %s under policy idle: %d rounds run (expected 0: the GEMM is a compute process), skips %s' % (
                args.gpu, d['runs_total'],
                ' '.join('%s=%d' % kv for kv in sorted(d['skips'].items())) or 'none exported'))

    res['splits'] = splits(args, samples, phases, res['alone'])

    if loss is not None and loss > args.max_loss:
        problems.append('throughput loss %.2f%% > %g%%' % (loss, args.max_loss))
    res['problems'] = problems
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(res, f, indent=1)
    print('\nprobe-cost: %s' % ('PASS' if not problems else 'FAIL: ' + '; '.join(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
