# Sourced by the bench scripts that run a load beside GPU 0
# (command-contended.sh, probe-contended.sh): its PCI address and which
# compute processes NVML lists on it. Bash only, read-only nvidia-smi
# queries, so that it runs from .device/ on a GPU machine as the scripts do.

# gpu0_pids: the compute processes on GPU 0, one PID a line.
gpu0_pids() {
  nvidia-smi -i 0 --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' | grep -E '^[0-9]+$'
}

# gpu0_runs PID: whether NVML lists PID on GPU 0.
gpu0_runs() { gpu0_pids | grep -qx "$1"; }

# gpu0_busy: true, naming them, when GPU 0 already has compute processes:
# a load started beside it would not be the only other process.
gpu0_busy() {
  local pids
  pids=$(gpu0_pids | tr '\n' ' ')
  [ -n "$pids" ] || return 1
  echo "GPU 0 already has compute processes: $pids"
}

# gpu0_bus: GPU 0's PCI address as the exporter writes it (sysfs form:
# lower case, a 4-digit domain).
gpu0_bus() {
  nvidia-smi -i 0 --query-gpu=pci.bus_id --format=csv,noheader | tr 'A-F' 'a-f' | sed 's/^0000//'
}
