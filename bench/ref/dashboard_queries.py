#!/usr/bin/env python3
"""Run every query of the shipped Grafana dashboards against a Prometheus and
say which return data.

Usage: dashboard_queries.py --prometheus URL --instance HOST:PORT
                            [--dashboards DIR] [--json OUT.json]

Variables are set as Grafana would for one node and every GPU: $instance the
node (regex-quoted), $gpu ".*", $__rate_interval 1m, $__range 5m. Template
variables given as label_values(selector, label) run as
group by (label) (selector). Prints one line per query (ok, EMPTY or ERROR,
with the number of series) and a summary; exits 1 if any query errs or
returns nothing, 2 if no dashboard was found. The e2e test
(e2e/dashboards_test.go) does the same against the simulated node.
Standard library only: it runs on the GPU machine.
"""
import argparse
import glob
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

LABEL_VALUES = re.compile(r'^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$')


def expand(expr, instance):
    # Regex-quoted as Grafana quotes a regex variable, then each backslash
    # doubled: the value lands inside a PromQL double-quoted string.
    inst = re.escape(instance).replace('\\', '\\\\')
    for k, v in (('$__rate_interval', '1m'), ('$__range', '5m'), ('$instance', inst), ('$gpu', '.*')):
        expr = expr.replace(k, v)
    return expr


def query(prom, expr):
    url = prom.rstrip('/') + '/api/v1/query?' + urllib.parse.urlencode({'query': expr})
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    except (OSError, ValueError) as e:
        return None, str(e)
    if body.get('status') != 'success':
        return None, body.get('error', 'no error given')
    res = body['data']['result']
    return (len(res) if isinstance(res, list) else 1), None


def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get('panels', []))


def queries(d):
    for v in d.get('templating', {}).get('list', []):
        q = v.get('query')
        q = q.get('query') if isinstance(q, dict) else q
        m = LABEL_VALUES.match(q or '')
        if m:
            yield 'variable ' + v['name'], 'group by (%s) (%s)' % (m.group(2), m.group(1))
    for p in panels(d.get('panels', [])):
        for t in p.get('targets', []):
            if t.get('expr'):
                yield 'panel %s %s' % (p.get('title', '?'), t.get('refId', '?')), t['expr']


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument('--prometheus', required=True)
    ap.add_argument('--instance', required=True)
    ap.add_argument('--dashboards', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'dashboards'))
    ap.add_argument('--json')
    args = ap.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.dashboards, '*.json')))
    if not files:
        print('no dashboards in %s' % args.dashboards)
        return 2
    rows = []
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        for where, expr in queries(d):
            n, err = query(args.prometheus, expand(expr, args.instance))
            status = 'ERROR' if err else ('EMPTY' if n == 0 else 'ok')
            rows.append({'dashboard': d.get('uid'), 'where': where, 'expr': expr, 'series': n, 'error': err,
                         'status': status})
            print('%-5s %-14s %-70s %s' % (status, d.get('uid'), where[:70], err or n))
    bad = [r for r in rows if r['status'] != 'ok']
    print('\n%d queries: %d returned data, %d empty, %d errors' % (
        len(rows), len(rows) - len(bad), sum(r['status'] == 'EMPTY' for r in bad),
        sum(r['status'] == 'ERROR' for r in bad)))
    if args.json:
        with open(args.json, 'w') as fh:
            json.dump(rows, fh, indent=1)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
