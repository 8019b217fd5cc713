package nvml

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Process is a process holding a GPU, as NVML lists it. A process on
// several GPUs appears once for each.
type Process struct {
	GPU      int
	UUID     string
	PCIBusID string // sysfs form: 0000:18:00.0
	// PID is in the host's PID namespace: /proc must be the host's for it
	// to name the same process (hostPID in Kubernetes).
	PID int
	// UsedMemory is the device memory the process holds, in bytes; absent
	// where NVML does not say (it answers "not available" to an
	// unprivileged caller, and on some MIG and vGPU set-ups).
	UsedMemory sampler.Opt[float64]
}

// ComputeProcesses lists the compute processes on every GPU, sorted by GPU
// and PID. It asks each GPU for its compute processes and for its MPS
// clients: under MPS the compute list holds only the MPS server, and the
// clients, the processes whose placement matters, are in the second list.
// The second call costs about what the first does (one driver ioctl that
// answers from the driver's own process table) and answers an empty list
// where MPS is not running. A PID in both lists is listed once.
//
// Lost GPUs are skipped; a call a GPU does not support is skipped quietly;
// other failures drop that GPU's list and are counted in a
// *sampler.PartialError.
func (r *Reader) ComputeProcesses() ([]Process, error) {
	// The inventory is read without the reader's lock: an NVML sample
	// holds that lock for up to a few hundred ms, and listing processes
	// must not wait on it. NVML calls are thread-safe.
	if !r.calls.enter() {
		return nil, ErrShutDown
	}
	defer r.calls.leave()
	inv := r.Inventory()
	if inv == nil {
		r.mu.Lock()
		err := r.initLocked()
		r.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if inv = r.Inventory(); inv == nil {
			return nil, errors.New("no GPU inventory after NVML init")
		}
	}
	var errs sampler.Tally
	var out []Process
	for i, h := range inv.Handles {
		if h == nil {
			continue // never opened: reported lost by the nvml source
		}
		out = append(out, deviceProcesses(inv.IDs[i], h, &errs)...)
	}
	slices.SortFunc(out, func(a, b Process) int {
		return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.PID, b.PID))
	})
	return out, errs.Err()
}

// deviceProcesses lists one GPU's processes. A lost GPU yields none (the
// nvml source reports it lost); an unsupported call is skipped; any other
// failure is counted.
func deviceProcesses(id Identity, h nvml.Device, errs *sampler.Tally) []Process {
	var out []Process
	seen := map[int]int{} // PID -> index in out
	add := func(infos []nvml.ProcessInfo) {
		for _, p := range infos {
			pid := int(p.Pid)
			mem := sampler.Opt[float64]{}
			if p.UsedGpuMemory != math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				mem = sampler.Some(float64(p.UsedGpuMemory))
			}
			if i, dup := seen[pid]; dup {
				if !out[i].UsedMemory.Valid {
					out[i].UsedMemory = mem
				}
				continue
			}
			seen[pid] = len(out)
			out = append(out, Process{GPU: id.Index, UUID: id.UUID, PCIBusID: id.PCIBusID, PID: pid, UsedMemory: mem})
		}
	}
	for _, list := range []struct {
		what string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{
		{"compute processes", h.GetComputeRunningProcesses},
		{"MPS compute processes", h.GetMPSComputeRunningProcesses},
	} {
		infos, ret := list.get()
		switch ret {
		case nvml.SUCCESS:
			add(infos)
		case nvml.ERROR_NOT_SUPPORTED:
		case nvml.ERROR_GPU_IS_LOST:
			return nil
		default:
			errs.Add(fmt.Errorf("GPU %d %s: %v", id.Index, list.what, ret))
		}
	}
	return out
}
