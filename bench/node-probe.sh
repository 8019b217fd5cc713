#!/usr/bin/env bash
# Node-to-node probes on one GPU host, emulated as issue 13 asks: two
# exporter daemons, each owning one GPU (--node-probe.gpu, and
# CUDA_VISIBLE_DEVICES for its children), on two ports, with NCCL held to
# its network transport through the documented pass-through
# (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 in the daemons' environment), and
# a real Prometheus scraping /probe?target=<B>&module=net on A in
# blackbox style. Beside it, in the same command, the reference:
# ref/nccl_ref.py as two processes (one GPU each, world 2) under the same
# settings. Checks: the send/recv bus bandwidth Prometheus stored within
# 5% of the reference's, every channel reported as network, probe_success
# 1, promtool check metrics clean on a /probe answer.
# With one GPU (an x1 machine) both daemons own GPU 0 and NCCL_HOSTID tells
# NCCL they are two hosts (two processes on one GPU time-slice it, so the
# figure says less; the script says so).
# NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are exported for every process.
# Needs no Go: carry .device (bench/device-build.sh --dashboards, for
# Prometheus) and run
#   .device/node-probe.sh OUTDIR
# Exits 1 when a check fails. SIZE (default 64 MiB) is the module's and the
# reference's size; SAMPLES (default 4) the /probe scrapes, 20 s apart,
# whose median Prometheus gives is judged against the mean of the
# reference runs before and after; MODULE_SAMPLES (default 10) the timed
# samples of each result, the module's and the reference's alike (sockets
# over the VM's loopback spread 16.5-20.9 ms an operation within one run).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
bin=$here/gpulink_exporter
SIZE=${SIZE:-$((64 << 20))}
SAMPLES=${SAMPLES:-4}
MODULE_SAMPLES=${MODULE_SAMPLES:-10}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING=false
nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])')
lib=$nccl_dir/lib/libnccl.so.2
for t in promtool prometheus; do
  [ -x "$here/$t" ] || { gunzip -kf "$here/$t.gz" && chmod +x "$here/$t"; }
done
fail=0
check() { # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "PASS $what"; else echo "FAIL $what"; fail=1; fi
}

mapfile -t addrs < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | sed 's/^0000//' | tr 'A-F' 'a-f')
ngpu=${#addrs[@]}
if [ "$ngpu" -ge 2 ]; then
  ga=${addrs[0]} gb=${addrs[1]} va=0 vb=1 hosta= hostb=
else
  ga=${addrs[0]} gb=${addrs[0]} va=0 vb=0 hosta=nodeA hostb=nodeB
  echo "one GPU: both daemons own $ga; NCCL_HOSTID makes them two hosts"
fi
echo "A owns $ga, B owns $gb" | tee "$out/setup.txt"

cat >"$out/modules.yml" <<EOF
modules:
  net:
    collectives: [send_recv, all_reduce]
    size: $((SIZE >> 20))MiB
    gpus_per_node: 1
    samples: $MODULE_SAMPLES
    timeout: 50s
EOF
# ref NAME: the reference, nccl_ref.py as two processes under the same
# settings, into $out/NAME-{0,1}.json. It runs once before the daemons start
# and once after they stop, and the probe is judged against the mean of the
# two: over the VM's loopback, sockets are bound by CPU, and the reference
# itself moved 3.40 -> 4.52 GB/s between two machines of one kind.
ref() {
  echo "== $1: nccl_ref.py as two processes, same settings"
  for r in 0 1; do
    v=$va h=$hosta; [ $r = 1 ] && v=$vb h=$hostb
    env CUDA_VISIBLE_DEVICES=$v ${h:+NCCL_HOSTID=$h} NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE="$out/$1-nccl-$r.log" \
      timeout 200 python3 "$here/ref/nccl_ref.py" --gpus 0 --world 2 --rank-base $r --master 127.0.0.1:29611 \
      --collectives send_recv,all_reduce --size "$SIZE" --samples "$MODULE_SAMPLES" >"$out/$1-$r.json" 2>"$out/$1-$r.err" &
  done
  wait
}
ref reference-before
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
start() { # start NAME PORT GPU VISIBLE HOSTID
  env CUDA_VISIBLE_DEVICES="$4" ${5:+NCCL_HOSTID=$5} LD_LIBRARY_PATH="$nccl_dir/lib" "$bin" \
    --web.listen-address=127.0.0.1:"$2" --node-probe.enabled --node-probe.gpu="$3" \
    --node-probe.config.file="$out/modules.yml" --node-probe.min-interval=0s \
    --probe.policy=idle --probe.first-delay=1h --log.level=debug >"$out/exporter-$1.log" 2>&1 &
  pids+=($!)
}
start a 9861 "$ga" "$va" "$hosta"
start b 9862 "$gb" "$vb" "$hostb"
for _ in $(seq 60); do
  curl -sf 127.0.0.1:9861/metrics >/dev/null && curl -sf 127.0.0.1:9862/metrics >/dev/null && break
  sleep 0.5
done

cat >"$out/prometheus.yml" <<EOF
global: {scrape_interval: 20s, scrape_timeout: 19s}
scrape_configs:
  - job_name: gpulink-node-probe
    metrics_path: /probe
    params: {module: [net]}
    static_configs: [{targets: ['127.0.0.1:9862']}]
    relabel_configs:
      - {source_labels: [__address__], target_label: __param_target}
      - {source_labels: [__param_target], target_label: instance}
      - {target_label: __address__, replacement: '127.0.0.1:9861'}
EOF
"$here/prometheus" --config.file="$out/prometheus.yml" --storage.tsdb.path="$out/tsdb" \
  --web.listen-address=127.0.0.1:9863 >"$out/prometheus.log" 2>&1 &
pids+=($!)
q() { curl -sfG 127.0.0.1:9863/api/v1/query --data-urlencode "query=$1"; }
t0=$SECONDS
for _ in $(seq 200); do
  n=$(q "count_over_time(probe_success[10m]) >= $SAMPLES" | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2>/dev/null)
  [ "${n:-0}" != 0 ] && break
  sleep 1
done
echo "$SAMPLES /probe samples in Prometheus after $((SECONDS - t0)) s"
for m in probe_success probe_duration_seconds gpulink_node_probe_bus_bandwidth_bytes_per_second \
  gpulink_node_probe_expected_bus_bandwidth_bytes_per_second gpulink_node_probe_latency_seconds \
  gpulink_node_probe_channels gpulink_node_probe_attempts gpulink_node_probe_failure_info; do
  q "$m" >"$out/prom-$m.json"
done
# Every sample of the window, and their median: the figure judged.
q 'gpulink_node_probe_bus_bandwidth_bytes_per_second[10m]' >"$out/prom-samples.json"
q 'quantile_over_time(0.5, gpulink_node_probe_bus_bandwidth_bytes_per_second[10m])' >"$out/prom-median.json"
python3 - "$out" <<'EOF' | tee "$out/prometheus-values.txt"
import json, os, sys
out = sys.argv[1]
for f in sorted(os.listdir(out)):
    if f.startswith("prom-") and f.endswith(".json") and f != "prom-samples.json":
        for r in json.load(open(os.path.join(out, f)))["data"]["result"]:
            print(r["metric"].get("__name__"), {k: v for k, v in r["metric"].items() if k not in ("__name__", "job")}, r["value"][1])
EOF
# One more /probe straight from A, for promtool and the round's details.
curl -s --max-time 60 "127.0.0.1:9861/probe?target=127.0.0.1:9862&module=net" >"$out/probe.txt"
"$here/promtool" check metrics <"$out/probe.txt" >"$out/promtool.txt" 2>&1
check "promtool check metrics on a /probe answer" [ ! -s "$out/promtool.txt" ]
grep -E "^(probe_|gpulink_node_probe_)" "$out/probe.txt"
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; pids=()

ref reference-after
grep -h " via " "$out"/reference-*-nccl-*.log | sed 's/.*via //' | sort | uniq -c
python3 - "$out" "$SIZE" <<'EOF' | tee "$out/compare.txt"
import json, sys
out, size = sys.argv[1], int(sys.argv[2])
refs = []
for name in ("reference-before", "reference-after"):
    refs.append({r["collective"]: r for r in json.load(open("%s/%s-0.json" % (out, name)))["results"] if r["size_bytes"] == size})
for r in json.load(open(out + "/prom-samples.json"))["data"]["result"]:
    print("probe samples %s: %s GB/s" % (r["metric"]["collective"], ", ".join("%.3f" % (float(v) / 1e9) for _, v in r["values"])))
prom = {}
for r in json.load(open(out + "/prom-median.json"))["data"]["result"]:
    prom[r["metric"]["collective"]] = float(r["value"][1])
ch = json.load(open(out + "/prom-gpulink_node_probe_channels.json"))["data"]["result"]
kinds = sorted({r["metric"]["transport"] for r in ch if float(r["value"][1]) > 0})
ok = True
for c, tol in (("send_recv", 0.05), ("all_reduce", None)):
    p, each = prom.get(c), [x.get(c, {}).get("bus_bytes_per_second") for x in refs]
    rf = sum(each) / len(each) if all(each) else None
    if p is None or not rf:
        print("FAIL %s: probe %s, reference %s" % (c, p, rf)); ok = ok and tol is None; continue
    d = p / rf - 1
    verdict = "shown" if tol is None else ("PASS" if abs(d) <= tol else "FAIL")
    ok = ok and verdict != "FAIL"
    print("%s %s: probe %.3f GB/s (median of the samples in Prometheus), reference %.3f GB/s (mean of %s), %+.2f%%" % (
        verdict, c, p / 1e9, rf / 1e9, " and ".join("%.3f" % (e / 1e9) for e in each), d * 100))
v = "PASS" if kinds == ["net"] else "FAIL"
ok = ok and v == "PASS"
print("%s channels by transport: %s" % (v, kinds))
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
succ=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["data"]["result"]; print(r[0]["value"][1] if r else "none")' "$out/prom-probe_success.json")
check "probe_success 1 in Prometheus (got $succ)" [ "$succ" = 1 ]
exit $fail
