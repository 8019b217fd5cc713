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
# Issue 26 (which network NCCL took, collectives --check), in the same run:
# every channel of the session in the /probe answer and in Prometheus says
# network="Socket", gdr="0" (network.txt); the daemons' /metrics say the
# NICs call for Socket (metrics-nccl-a.txt); with two GPUs, a third daemon
# over both, P2P and SHM off, runs one collective round and its
# gpulink_collective_channels on /metrics say Socket/0 as well
# (metrics-collective.txt); `collectives --check` finds the NCCL the
# daemons load (path, version), no RDMA devices, the memlock limit, and
# exits 0 (check.txt), and with --library=/nonexistent/libnccl.so.2 names
# that library and exits 1 (check-nowhere.txt).
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
# The network of every channel, in the /probe answer and in Prometheus.
python3 - "$out" <<'EOF' | tee "$out/network.txt"
import json, re, sys
out = sys.argv[1]
ok = True
def judge(where, series):
    global ok
    bad = [s for s in series if (s.get("transport"), s.get("network"), s.get("gdr")) != ("net", "Socket", "0")]
    v = "PASS" if series and not bad else "FAIL"
    ok = ok and v == "PASS"
    print("%s %s: %d channel series, all transport=net network=Socket gdr=0%s" % (
        v, where, len(series), "" if not bad else "; not: %s" % bad))
lines = [l for l in open(out + "/probe.txt") if l.startswith("gpulink_node_probe_channels{")]
judge("/probe answer", [dict(re.findall(r'(\w+)="([^"]*)"', l.split("}")[0])) for l in lines])
prom = json.load(open(out + "/prom-gpulink_node_probe_channels.json"))["data"]["result"]
judge("Prometheus", [r["metric"] for r in prom])
sys.exit(0 if ok else 1)
EOF
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
curl -s 127.0.0.1:9861/metrics | grep -E "^gpulink_collective_(library_info|expected_network_info|network_)" >"$out/metrics-nccl-a.txt"
cat "$out/metrics-nccl-a.txt"
check "A's /metrics: the NICs call for Socket on its GPU" grep -qE 'expected_network_info\{gdr="0",.*network="Socket"' "$out/metrics-nccl-a.txt"
check "A's /metrics: no expected network but Socket" bash -c "! grep expected_network_info '$out/metrics-nccl-a.txt' | grep -qv 'network=\"Socket\"'"
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; pids=()

# collectives --check: NCCL found (the daemons' library), no RDMA devices,
# the memlock limit, exit 0; the library nowhere: named, exit 1.
env LD_LIBRARY_PATH="$nccl_dir/lib" "$bin" collectives --check >"$out/check.txt" 2>&1
echo $? >"$out/check.rc"
cat "$out/check.txt"
check "collectives --check exits 0 (got $(cat "$out/check.rc"))" [ "$(cat "$out/check.rc")" = 0 ]
check "collectives --check names the library and its version" grep -qE "^ok +library +$lib, NCCL 2\.[0-9]+\.[0-9]+$" "$out/check.txt"
check "collectives --check finds no RDMA device" grep -qE "^info +rdma_devices +none" "$out/check.txt"
check "collectives --check says the memlock limit" grep -qE "^(ok|info|warn) +memlock +RLIMIT_MEMLOCK " "$out/check.txt"
env LD_LIBRARY_PATH="$nccl_dir/lib" "$bin" collectives --check --library=/nonexistent/libnccl.so.2 >"$out/check-nowhere.txt" 2>&1
echo $? >"$out/check-nowhere.rc"
cat "$out/check-nowhere.txt"
check "collectives --check with the library nowhere exits 1 (got $(cat "$out/check-nowhere.rc"))" [ "$(cat "$out/check-nowhere.rc")" = 1 ]
check "collectives --check names the missing library" grep -qE "^missing +library +/nonexistent/libnccl.so.2 cannot be loaded" "$out/check-nowhere.txt"

# Two GPUs: one daemon over both, P2P and SHM off, one collective round;
# its channels on /metrics.
if [ "$ngpu" -ge 2 ]; then
  env CUDA_VISIBLE_DEVICES=0,1 LD_LIBRARY_PATH="$nccl_dir/lib" "$bin" --web.listen-address=127.0.0.1:9864 \
    --probe.policy=always --probe.first-delay=0s --probe.kind=host_latency --collective.interval=1m \
    --collective.kind=all_reduce --collective.kind=send_recv --log.level=debug >"$out/exporter-c.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 240); do
    curl -s 127.0.0.1:9864/metrics | grep -q "^gpulink_collective_channels{" && break
    sleep 1
  done
  curl -s 127.0.0.1:9864/metrics | grep -E "^gpulink_collective_(channels|library_info|expected_network_info|runs_total)" >"$out/metrics-collective.txt"
  cat "$out/metrics-collective.txt"
  check "/metrics: a collective round's channels" grep -q "^gpulink_collective_channels{" "$out/metrics-collective.txt"
  check "/metrics: every collective channel network=Socket gdr=0" bash -c \
    "! grep '^gpulink_collective_channels{' '$out/metrics-collective.txt' | grep -v 'gdr=\"0\"' | grep -q . && ! grep '^gpulink_collective_channels{' '$out/metrics-collective.txt' | grep -v 'network=\"Socket\"' | grep -q ."
  kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; pids=()
fi

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
