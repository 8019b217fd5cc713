#!/usr/bin/env bash
# node-probe.sh without a GPU: its whole flow (two daemons, the ring's
# token, Prometheus scraping /probe with it, the pairs, the refusals
# without it, promtool, collectives --check) against fakes, to check the
# script before a GPU machine runs it. The daemons are the real exporter
# on the simulated DGX H100 (--sim=dgx-h100, NCCL forced to sockets by the
# fault nccl_net_socket, --probe.policy=always: the profile runs a job on
# GPU 0); nvidia-smi prints that node's GPUs 0 and 1; the reference is a
# stand-in that echoes what Prometheus last stored (so the pairs say
# nothing of accuracy); nvidia.nccl is an empty package. Checks that read
# the machine rather than the flow fail by design: the simulated node's
# NICs are InfiniBand (A's /metrics "call for Socket"), its NCCL is a
# model (collectives --check's library and RDMA lines), and the third
# daemon's collective round goes over its NVLinks.
# Usage: bench/node-probe-sim.sh [OUTDIR]   (from the repo root; builds
# the exporter with go build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${1:-$work/out}
go build -o "$work/gpulink_exporter" "$root"
mkdir -p "$work/bin" "$work/py/nvidia/nccl/lib"
: >"$work/py/nvidia/__init__.py"
: >"$work/py/nvidia/nccl/__init__.py"
printf '#!/bin/sh\nprintf "00000000:18:00.0\\n00000000:2A:00.0\\n"\n' >"$work/bin/nvidia-smi"
printf 'faults:\n- {kind: nccl_net_socket}\n' >"$work/faults.yml"
cat >"$work/exporter" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case \$a in --probe.policy=*) a=--probe.policy=always ;; esac
  args+=("\$a")
done
if [ "\${args[0]:-}" = collectives ]; then exec "$work/gpulink_exporter" collectives --sim=dgx-h100 "\${args[@]:1}"; fi
exec "$work/gpulink_exporter" --sim=dgx-h100 --sim.faults="$work/faults.yml" "\${args[@]}"
EOF
chmod +x "$work/bin/nvidia-smi" "$work/exporter"
cp -r "$root/bench" "$work/bench"
cp "$root/.tools/bin/promtool" "$root/.tools/bin/prometheus" "$work/bench/"
cat >"$work/bench/ref/nccl_ref.py" <<'EOF'
#!/usr/bin/env python3
# Stand-in for nccl_ref.py: what Prometheus last stored of the probe.
import argparse, json, sys, time, urllib.parse, urllib.request
p = argparse.ArgumentParser()
for f in ("--gpus", "--world", "--rank-base", "--master", "--collectives", "--size", "--samples"):
    p.add_argument(f)
a = p.parse_args()
def stored(c):
    u = "http://127.0.0.1:9863/api/v1/query?" + urllib.parse.urlencode(
        {"query": 'gpulink_node_probe_bus_bandwidth_bytes_per_second{collective="%s"}' % c})
    r = json.load(urllib.request.urlopen(u))["data"]["result"]
    return float(r[0]["value"][1]) if r else 1e9
res = []
for c in ("send_recv", "all_reduce"):
    bw = stored(c)
    for s in (int(a.size), 8192):
        r = {"collective": c, "size_bytes": s, "ranks": 2, "seconds": s / bw, "sample_min": s / bw * 0.99,
             "sample_max": s / bw * 1.01, "alg_bytes_per_second": bw, "bus_bytes_per_second": bw, "rank_seconds": s / bw}
        if c == "send_recv":
            r.update(from_rank=0, to_rank=1)
        res.append(r)
time.sleep(1)
json.dump({"ranks": 2, "rank_base": int(a.rank_base), "gpus": [0], "results": res, "torch": "stand-in", "nccl": "stand-in"}, sys.stdout)
EOF
PATH="$work/bin:$PATH" PYTHONPATH="$work/py" BIN="$work/exporter" SAMPLES=${SAMPLES:-2} SCRAPE_INTERVAL=${SCRAPE_INTERVAL:-10s} \
  SCRAPE_TIMEOUT=${SCRAPE_TIMEOUT:-8s} bash "$work/bench/node-probe.sh" "$out" || true
