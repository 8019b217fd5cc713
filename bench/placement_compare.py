"""Compare the exporter's process placement with /proc read independently.

Usage: python3 placement_compare.py METRICS_FILE PID[:EXPECT_CPUS] ...

For each pid: the CPUs it may run on (status Cpus_allowed_list), the CPUs
its threads last ran on (task/*/stat field 39), resident bytes by node
(numa_maps), against what the exporter said. The machine's node layout comes
from /sys. Prints a table and exits 1 on any disagreement.
"""
import glob
import re
import sys


def cpulist(s):
    out = set()
    for part in s.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def metrics(path):
    rows = []
    pat = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')
    for line in open(path):
        m = pat.match(line.strip())
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            rows.append((m.group(1), labels, float(m.group(3))))
    return rows


def proc_view(pid):
    status = open(f"/proc/{pid}/status").read()
    allowed = cpulist(re.search(r"Cpus_allowed_list:\s*(\S+)", status).group(1))
    last = []
    for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
        s = open(stat).read()
        last.append(int(s[s.rindex(")") + 2:].split()[36]))
    mem = {}
    for line in open(f"/proc/{pid}/numa_maps"):
        page = 4096
        m = re.search(r"kernelpagesize_kB=(\d+)", line)
        if m:
            page = int(m.group(1)) * 1024
        for node, pages in re.findall(r"\bN(\d+)=(\d+)", line):
            mem[int(node)] = mem.get(int(node), 0) + int(pages) * page
    return allowed, last, mem


def main():
    rows = metrics(sys.argv[1])
    nodes = {int(p.split("node")[-1]): cpulist(open(p + "/cpulist").read())
             for p in glob.glob("/sys/devices/system/node/node[0-9]*")}
    bad = 0
    print(f"{'pid':>7} {'gpu':>3} {'allowed(proc)':>14} {'exp':>6} {'allowed(ours)':>13} "
          f"{'threads':>7} {'thr-cpus':>10} {'mem MiB proc':>13} {'mem MiB ours':>13} {'rCPU':>5} {'rThr':>5} {'rMem':>5} {'misaff':>6}")
    for arg in sys.argv[2:]:
        pid, _, expect = arg.partition(":")
        allowed, last, mem = proc_view(pid)
        mine = [r for r in rows if r[1].get("pid") == pid]

        def val(name, **kw):
            for n, l, v in mine:
                if n == name and all(l.get(k) == w for k, w in kw.items()):
                    return v
            return None
        gpu = next((l.get("gpu") for n, l, v in mine), "?")
        ours_allowed = val("gpulink_process_allowed_cpus")
        ours_mem = {int(l["numa_node"]): v for n, l, v in mine if n == "gpulink_process_memory_bytes"}
        checks = [
            ours_allowed == len(allowed),
            not expect or allowed == cpulist(expect),
            all(c in allowed for c in last),
            set(ours_mem) == set(mem),
            # numa_maps moves between the two reads; 2% or 16 MiB apart is the same reading.
            all(abs(ours_mem.get(n, 0) - b) <= max(0.02 * b, 16 << 20) for n, b in mem.items()),
        ]
        if len(nodes) == 1:
            checks += [val("gpulink_process_remote_cpu_ratio") == 0, val("gpulink_process_remote_memory_ratio") == 0,
                       val("gpulink_process_misaffine") == 0]
        ok = all(checks)
        bad += not ok
        fmt = lambda v: "-" if v is None else f"{v:.2f}"
        print(f"{pid:>7} {gpu:>3} {len(allowed):>14} {expect or '-':>6} {fmt(ours_allowed):>13} {len(last):>7} "
              f"{min(last)}-{max(last):<8} {sum(mem.values()) / 2**20:>13.1f} {sum(ours_mem.values()) / 2**20:>13.1f} "
              f"{fmt(val('gpulink_process_remote_cpu_ratio')):>5} {fmt(val('gpulink_process_remote_thread_ratio')):>5} "
              f"{fmt(val('gpulink_process_remote_memory_ratio')):>5} {fmt(val('gpulink_process_misaffine')):>6} "
              f"{'ok' if ok else 'MISMATCH ' + str(checks)}")
    sys.exit(1 if bad else 0)


main()
