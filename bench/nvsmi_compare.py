#!/usr/bin/env python3
"""Compare a gpulink_exporter scrape with nvidia-smi taken in the same run.

Usage: nvsmi_compare.py METRICS.txt NVSMI.xml TOPO.txt NVLINK_S.txt [NVLINK_E.txt]

Prints one row per checked value: what nvidia-smi says, what the exporter
says, and whether they agree (exactly for identity and topology, within a
tolerance for readings that move between the two reads). Exits 1 if any row
disagrees. Standard library only: it runs on the GPU machine.
"""
import re
import sys
import xml.etree.ElementTree as ET

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(path):
    series = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        m = LINE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(3) or ''))
        series.append((m.group(1), labels, float(m.group(4))))
    return series


def get(series, name, **want):
    for n, labels, v in series:
        if n == name and all(labels.get(k) == str(w) for k, w in want.items()):
            return labels, v
    return None, None


def num(text):
    """'1980 MHz' -> 1980.0; 'N/A' -> None."""
    if text is None:
        return None
    m = re.search(r'-?[0-9.]+', text)
    return float(m.group(0)) if m else None


rows = []


def row(what, smi, exp, ok):
    rows.append((what, '' if smi is None else str(smi), '' if exp is None else str(exp), ok))


def exact(what, smi, exp):
    row(what, smi, exp, smi == exp)


def close(what, smi, exp, tol):
    if smi is None and exp is None:
        row(what, 'N/A', 'absent', True)
        return
    ok = smi is not None and exp is not None and abs(smi - exp) <= tol
    row(what, smi, exp, ok)


def main():
    metrics, xml_path, topo_path, nvlink_path = sys.argv[1:5]
    s = parse_metrics(metrics)
    root = ET.parse(xml_path).getroot()
    _, drv = get(s, 'gpulink_driver_info')
    drv_labels, _ = get(s, 'gpulink_driver_info')
    exact('driver version', root.findtext('driver_version'), drv_labels and drv_labels['driver_version'])
    exact('CUDA driver version', root.findtext('cuda_version'), drv_labels and drv_labels['cuda_driver_version'])

    gpus = root.findall('gpu')
    bus_to_index = {}
    for i, g in enumerate(gpus):
        bus = g.get('id').lower()[4:]  # 00000000:19:00.0 -> 0000:19:00.0
        bus_to_index[bus] = i
        info, _ = get(s, 'gpulink_gpu_info', gpu=i)
        if info is None:
            row(f'GPU {i} info', bus, 'missing', False)
            continue
        p = f'GPU {i} '
        exact(p + 'pci_bus_id', bus, info['pci_bus_id'])
        exact(p + 'uuid', g.findtext('uuid'), info['uuid'])
        exact(p + 'name', g.findtext('product_name'), info['name'])
        exact(p + 'serial', g.findtext('serial'), info['serial'])
        exact(p + 'vbios', g.findtext('vbios_version'), info['vbios_version'])
        L = dict(gpu=i)

        def val(name, **extra):
            return get(s, name, **L, **extra)[1]

        close(p + 'performance state', num(g.findtext('performance_state')), val('gpulink_gpu_performance_state'), 0)
        close(p + 'SM clock MHz', num(g.findtext('clocks/sm_clock')), (val('gpulink_gpu_clock_hertz', clock='sm') or 0) / 1e6, 400)
        close(p + 'memory clock MHz', num(g.findtext('clocks/mem_clock')), (val('gpulink_gpu_clock_hertz', clock='memory') or 0) / 1e6, 1)
        close(p + 'max SM clock MHz', num(g.findtext('max_clocks/sm_clock')), (val('gpulink_gpu_clock_max_hertz', clock='sm') or 0) / 1e6, 0)
        close(p + 'max memory clock MHz', num(g.findtext('max_clocks/mem_clock')), (val('gpulink_gpu_clock_max_hertz', clock='memory') or 0) / 1e6, 0)
        close(p + 'GPU temperature C', num(g.findtext('temperature/gpu_temp')), val('gpulink_gpu_temperature_celsius', sensor='gpu'), 3)
        close(p + 'memory temperature C', num(g.findtext('temperature/memory_temp')), val('gpulink_gpu_temperature_celsius', sensor='memory'), 3)
        pw = g.find('gpu_power_readings')
        if pw is not None:
            draw = num(pw.findtext('instant_power_draw')) or num(pw.findtext('power_draw')) or num(pw.findtext('average_power_draw'))
            close(p + 'power draw W', draw, val('gpulink_gpu_power_watts'), 40)
            close(p + 'power limit W', num(pw.findtext('current_power_limit')), val('gpulink_gpu_power_limit_watts'), 0.5)
        close(p + 'memory total MiB', num(g.findtext('fb_memory_usage/total')), (val('gpulink_gpu_memory_total_bytes') or 0) / 2**20, 600)
        close(p + 'memory used MiB', num(g.findtext('fb_memory_usage/used')), (val('gpulink_gpu_memory_used_bytes') or 0) / 2**20, 600)
        close(p + 'GPU utilization %', num(g.findtext('utilization/gpu_util')), (val('gpulink_gpu_utilization_ratio') or 0) * 100, 10)
        link = g.find('pci/pci_gpu_link_info')
        if link is not None:
            close(p + 'PCIe gen current', num(link.findtext('pcie_gen/current_link_gen')), val('gpulink_gpu_pcie_link_generation'), 0)
            close(p + 'PCIe gen max (GPU+slot)', num(link.findtext('pcie_gen/max_link_gen')), val('gpulink_gpu_pcie_link_max_generation'), 0)
            close(p + 'PCIe gen max (GPU)', num(link.findtext('pcie_gen/max_device_link_gen')), val('gpulink_gpu_pcie_link_gpu_max_generation'), 0)
            close(p + 'PCIe width current', num(link.findtext('link_widths/current_link_width')), val('gpulink_gpu_pcie_link_width'), 0)
            close(p + 'PCIe width max', num(link.findtext('link_widths/max_link_width')), val('gpulink_gpu_pcie_link_max_width'), 0)
        close(p + 'PCIe replays', num(g.findtext('pci/replay_counter')), val('gpulink_gpu_pcie_replays_total'), 0)
        rr = g.find('remapped_rows')
        if rr is not None and num(rr.findtext('remapped_row_corr')) is not None:
            close(p + 'remapped rows correctable', num(rr.findtext('remapped_row_corr')), val('gpulink_gpu_remapped_rows', cause='correctable'), 0)
            close(p + 'remapped rows uncorrectable', num(rr.findtext('remapped_row_unc')), val('gpulink_gpu_remapped_rows', cause='uncorrectable'), 0)
            exact(p + 'remap pending', rr.findtext('remapped_row_pending') == 'Yes', val('gpulink_gpu_row_remap_pending') == 1)
            exact(p + 'remap failure', rr.findtext('remapped_row_failure') == 'Yes', val('gpulink_gpu_row_remap_failed') == 1)
        cm = (g.findtext('compute_mode') or '').lower().replace(' ', '_')
        cm_labels, _ = get(s, 'gpulink_gpu_compute_mode', **L)
        exact(p + 'compute mode', cm, cm_labels and cm_labels['mode'])
        reasons = g.find('clocks_event_reasons')
        if reasons is not None:
            mapping = {
                'clocks_event_reason_gpu_idle': 'gpu_idle',
                'clocks_event_reason_applications_clocks_setting': 'applications_clocks_setting',
                'clocks_event_reason_sw_power_cap': 'sw_power_cap',
                'clocks_event_reason_hw_slowdown': 'hw_slowdown',
                'clocks_event_reason_sync_boost': 'sync_boost',
                'clocks_event_reason_sw_thermal_slowdown': 'sw_thermal_slowdown',
                'clocks_event_reason_hw_thermal_slowdown': 'hw_thermal_slowdown',
                'clocks_event_reason_hw_power_brake_slowdown': 'hw_power_brake_slowdown',
                'clocks_event_reason_display_clocks_setting': 'display_clock_setting',
            }
            for tag, reason in mapping.items():
                t = reasons.findtext(tag)
                if t is None:
                    continue
                close(p + 'clock event ' + reason, 1.0 if t.strip() == 'Active' else 0.0,
                      val('gpulink_gpu_clock_event_reason_active', reason=reason), 0)

    # nvidia-smi nvlink -s: "GPU 0: NAME (UUID: ...)" then "\t Link 0: 26.562 GB/s"
    gpu = None
    for line in open(nvlink_path):
        m = re.match(r'GPU (\d+):', line)
        if m:
            gpu = int(m.group(1))
            continue
        m = re.match(r'\s*Link (\d+): ([0-9.]+) GB/s', line)
        if m and gpu is not None:
            _, v = get(s, 'gpulink_gpu_nvlink_speed_bytes_per_second', gpu=gpu, link=m.group(1))
            close(f'GPU {gpu} NVLink {m.group(1)} GB/s', float(m.group(2)), None if v is None else v / 1e9, 0.01)
        m = re.match(r'\s*Link (\d+): <inactive>', line)
        if m and gpu is not None:
            _, v = get(s, 'gpulink_gpu_nvlink_up', gpu=gpu, link=m.group(1))
            close(f'GPU {gpu} NVLink {m.group(1)} up', 0, v, 0)

    # nvidia-smi nvlink -e: "\t Link 0: Replay Errors: 0" (Recovery, CRC).
    if len(sys.argv) > 5:
        kinds = {'Replay Errors': 'replay', 'Recovery Errors': 'recovery', 'CRC Errors': 'crc_flit'}
        gpu = None
        for line in open(sys.argv[5]):
            m = re.match(r'GPU (\d+):', line)
            if m:
                gpu = int(m.group(1))
                continue
            m = re.match(r'\s*Link (\d+): ([A-Za-z ]+): (\d+)', line)
            if m and gpu is not None and m.group(2) in kinds:
                _, v = get(s, 'gpulink_gpu_nvlink_errors_total', gpu=gpu, link=m.group(1), type=kinds[m.group(2)])
                close(f'GPU {gpu} NVLink {m.group(1)} {kinds[m.group(2)]} errors', float(m.group(3)), v, 0)

    # nvidia-smi topo -m: header "GPU0 GPU1 ...", rows "GPU0 X NV18 ...".
    header = None
    for line in open(topo_path):
        cells = line.split()
        if not cells:
            continue
        if header is None and cells[0].startswith('GPU0'):
            header = cells
            continue
        if header and re.fullmatch(r'GPU\d+', cells[0]):
            a = int(cells[0][3:])
            for col, cell in zip(header, cells[1:]):
                if not re.fullmatch(r'GPU\d+', col):
                    continue
                b = int(col[3:])
                if a == b:
                    continue
                lbl, _ = get(s, 'gpulink_gpu_pair_info', gpu=a, peer_gpu=b)
                exact(f'topo GPU{a}-GPU{b}', cell, lbl and lbl['level'])

    width = max(len(r[0]) for r in rows)
    bad = 0
    print(f'{"value":<{width}}  {"nvidia-smi":>22}  {"exporter":>22}  ok')
    for what, smi, exp, ok in rows:
        bad += not ok
        print(f'{what:<{width}}  {smi:>22.22}  {exp:>22.22}  {"yes" if ok else "NO"}')
    print(f'{len(rows)} compared, {len(rows) - bad} agree, {bad} disagree')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
