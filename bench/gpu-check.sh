#!/usr/bin/env bash
# Run the real exporter on a GPU machine and check it against nvidia-smi and
# against bytes PyTorch moves, all in one go. Needs no Go: carry .device
# (bench/device-build.sh) and run  .device/gpu-check.sh OUTDIR
# Only read-only nvidia-smi queries are used; no GPU setting is changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
bin=$here/gpulink_exporter
addr=127.0.0.1:9849
url=http://$addr/metrics
[ -x "$here/promtool" ] || { gunzip -kf "$here/promtool.gz" && chmod +x "$here/promtool"; }

nvidia-smi -L | tee "$out/nvidia-smi-L.txt"
ngpu=$(nvidia-smi -L | grep -c '^GPU')

"$bin" --web.listen-address=$addr --nvml.interval=1s --log.level=debug >"$out/exporter.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do
  curl -sf $url 2>/dev/null | grep -q '^gpulink_source_up{source="nvml"} 1' && break
  sleep 0.2
done
sleep 1.5
scrape() { curl -sf $url >"$out/$1"; }

# Same moment as near as can be: nvidia-smi right before and after a scrape.
nvidia-smi -q -x >"$out/nvsmi.xml"
scrape metrics-idle.txt
nvidia-smi topo -m >"$out/topo.txt"
nvidia-smi nvlink -s >"$out/nvlink-s.txt" 2>&1
nvidia-smi nvlink -e >"$out/nvlink-e.txt" 2>&1
nvidia-smi -q >"$out/nvsmi.txt"
cat "$out/topo.txt"

echo "== promtool check metrics (real GPU scrape)"
"$here/promtool" check metrics <"$out/metrics-idle.txt" && echo "promtool: clean"

echo "== exporter vs nvidia-smi (idle)"
python3 "$here/nvsmi_compare.py" "$out/metrics-idle.txt" "$out/nvsmi.xml" "$out/topo.txt" "$out/nvlink-s.txt" "$out/nvlink-e.txt" | tee "$out/compare-idle.txt" | tail -n 60

metric() { # file name labels-regex -> value (sum over matches)
  awk -v n="$2" -v re="$3" '$1 ~ "^"n"\\{" && $1 ~ re {s+=$2} END {printf "%.0f", s}' "$1"
}

echo "== under load: H2D on GPU 0"
scrape before-h2d.txt
python3 "$here/load.py" h2d 6 >"$out/load-h2d.json" &
lp=$!
sleep 3
scrape during-h2d.txt
nvidia-smi -q -x -i 0 >"$out/nvsmi-during-h2d.xml"
wait $lp
sleep 2.5
scrape after-h2d.txt
cat "$out/load-h2d.json"
echo "PCIe during H2D: gen $(metric "$out/during-h2d.txt" gpulink_gpu_pcie_link_generation 'gpu="0"') width $(metric "$out/during-h2d.txt" gpulink_gpu_pcie_link_width 'gpu="0"'); nvidia-smi during: $(python3 -c "
import xml.etree.ElementTree as E;g=E.parse('$out/nvsmi-during-h2d.xml').getroot().find('gpu/pci/pci_gpu_link_info');print('gen',g.findtext('pcie_gen/current_link_gen'),'width',g.findtext('link_widths/current_link_width'))")"
echo "PCIe when idle: gen $(metric "$out/metrics-idle.txt" gpulink_gpu_pcie_link_generation 'gpu="0"')"

echo "== under load: D2H on GPU 0"
python3 "$here/load.py" d2h 5 >"$out/load-d2h.json" &
lp=$!
sleep 3
scrape during-d2h.txt
wait $lp
cat "$out/load-d2h.json"
echo "PCIe during D2H: gen $(metric "$out/during-d2h.txt" gpulink_gpu_pcie_link_generation 'gpu="0"') width $(metric "$out/during-d2h.txt" gpulink_gpu_pcie_link_width 'gpu="0"')"

if [ "$ngpu" -ge 2 ]; then
  echo "== under load: GPU 0 -> GPU 1 over NVLink"
  scrape before-p2p.txt
  python3 "$here/load.py" p2p 4 >"$out/load-p2p.json"
  sleep 2.5
  scrape after-p2p.txt
  cat "$out/load-p2p.json"
  moved=$(python3 -c "import json;print(json.load(open('$out/load-p2p.json'))['bytes'])")
  for g in 0 1; do
    for dir in transmit receive; do
      d=$(( $(metric "$out/after-p2p.txt" gpulink_gpu_nvlink_${dir}_bytes_total "gpu=\"$g\"") - $(metric "$out/before-p2p.txt" gpulink_gpu_nvlink_${dir}_bytes_total "gpu=\"$g\"") ))
      echo "GPU $g NVLink $dir delta (all links): $d; ratio to bytes moved $(python3 -c "print(round($d/$moved,4))")"
    done
  done
fi

echo "== self metrics"
grep -E '^gpulink_source_' "$out/after-h2d.txt"
echo "== families in a real scrape"
grep '^# TYPE' "$out/metrics-idle.txt" | awk '{print $3}' | sort >"$out/families.txt"
wc -l <"$out/families.txt"
echo "== unsupported on this GPU (exporter debug log, first time each)"
grep 'not supported' "$out/exporter.log" | sed 's/.*gpu=\([0-9]*\) what="\{0,1\}\([^"]*\)"\{0,1\} nvml=\(.*\)/gpu \1: \2 (\3)/' | sort -u | head -40

echo "== memory: exporter RSS by mapping, Go's share"
grep -E '^(process_resident_memory_bytes|go_memstats_(heap_inuse|sys)_bytes)' "$out/after-h2d.txt"
grep -E 'VmRSS|RssAnon|RssFile' /proc/$pid/status
awk '/^[0-9a-f]+-/{name=$6; if(name=="") name="[anon]"} /^Rss:/{r[name]+=$2} END{for(n in r) if (r[n]>500) print r[n]" kB", n}' /proc/$pid/smaps | sort -rn | head -6

echo "== GPU tests (real NVML seam)"
"$here/gpu.test" -test.v -test.count=1 2>&1 | tee "$out/gpu-test.log" | grep -vE '^=== RUN'
echo "== scrape cost, Go benchmark on this machine's CPU (fake H200 pair and DGX H100 snapshots)"
if [ -x "$here/collector.test" ]; then
  GOMAXPROCS=1 "$here/collector.test" -test.run XXX -test.bench Scrape -test.benchtime 2s -test.benchmem 2>&1 | tee "$out/bench-go.txt" | grep -E 'Benchmark|ok'
else
  echo "skipped: no collector.test (bench/device-build.sh --collector-test)"
fi
tar -C "$out" -czf "$out.tgz" . && echo "logs in $out.tgz"
