// Package sharingtest is a test double for the commands' check of what
// shares their GPUs: a probes.SharingCheck over a made-up process list,
// in place of NVML's.
package sharingtest

import (
	"os"
	"sync"
	"time"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/probes"
)

// JobPID and JobComm are the other process's PID and command name.
const (
	JobPID  = 777
	JobComm = "python3"
)

// Check lists this process on every GPU of gpus (its own contexts)
// in every listing and, in the listings job says (the first is call 1,
// taken before the run), JobPID on the GPU at jobGPU; it polls every
// millisecond and names JobPID JobComm.
func Check(gpus []string, jobGPU string, job func(call int) bool) *probes.SharingCheck {
	var mu sync.Mutex
	calls := 0
	return &probes.SharingCheck{
		Every: time.Millisecond,
		Processes: func() ([]nvml.Process, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			var ps []nvml.Process
			for i, g := range gpus {
				ps = append(ps, nvml.Process{GPU: i, PCIBusID: g, PID: os.Getpid()})
			}
			if job(calls) {
				ps = append(ps, nvml.Process{PCIBusID: jobGPU, PID: JobPID})
			}
			return ps, nil
		},
		Comm: func(pid int) string {
			if pid == JobPID {
				return JobComm
			}
			return ""
		},
	}
}
