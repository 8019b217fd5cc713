package nvml_test

import (
	"errors"
	"math"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

func TestComputeProcesses(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	m.SetProcesses(4, 1<<30, 5151)
	m.SetProcesses(0, 2<<30, 4242, 6161)
	m.Update(func() {
		// NVML lists a process it may not inspect with memory "not
		// available"; the MPS list repeats one PID and adds a client.
		m.GPUs[0].Processes[1].UsedGpuMemory = math.MaxUint64
		m.GPUs[0].MPSProcesses = []gonvml.ProcessInfo{{Pid: 6161, UsedGpuMemory: 3 << 30}, {Pid: 7000, UsedGpuMemory: math.MaxUint64}}
	})
	r := nvml.NewReader(m, "", nil)
	got, err := r.ComputeProcesses()
	if err != nil {
		t.Fatalf("ComputeProcesses: %v", err)
	}
	want := []nvml.Process{
		{GPU: 0, UUID: m.GPUs[0].UUID, PCIBusID: "0000:18:00.0", PID: 4242, UsedMemory: sampler.Some(float64(2 << 30))},
		{GPU: 0, UUID: m.GPUs[0].UUID, PCIBusID: "0000:18:00.0", PID: 6161, UsedMemory: sampler.Some(float64(3 << 30))},
		{GPU: 0, UUID: m.GPUs[0].UUID, PCIBusID: "0000:18:00.0", PID: 7000},
		{GPU: 4, UUID: m.GPUs[4].UUID, PCIBusID: "0000:9a:00.0", PID: 5151, UsedMemory: sampler.Some(float64(1 << 30))},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("process %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestComputeProcessesNone(t *testing.T) {
	got, err := nvml.NewReader(nvmlmodel.NewH200Pair(), "", nil).ComputeProcesses()
	if err != nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want no processes, no error", got, err)
	}
}

func TestComputeProcessesFailures(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	for i := range m.GPUs {
		m.SetProcesses(i, 1<<20, 1000+i)
	}
	m.Update(func() {
		m.GPUs[1].Lost = true                                                       // skipped, not counted
		m.GPUs[2].Unsupported["GetMPSComputeRunningProcesses"] = true               // tolerated
		m.GPUs[3].Unsupported["GetComputeRunningProcesses"] = true                  // tolerated
		m.GPUs[5].Errors["GetComputeRunningProcesses"] = gonvml.ERROR_NO_PERMISSION // counted
		m.GPUs[6].Errors["GetMPSComputeRunningProcesses"] = gonvml.ERROR_UNKNOWN    // counted
	})
	got, err := nvml.NewReader(m, "", nil).ComputeProcesses()
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 2 {
		t.Fatalf("err %v, want a PartialError counting 2", err)
	}
	var pids []int
	for _, p := range got {
		pids = append(pids, p.PID)
	}
	// GPU 1 lost, GPU 3 and 5 without a compute list; GPU 6's compute
	// list stands though its MPS list failed.
	want := []int{1000, 1002, 1004, 1006, 1007}
	if len(pids) != len(want) {
		t.Fatalf("pids %v, want %v", pids, want)
	}
	for i := range want {
		if pids[i] != want[i] {
			t.Fatalf("pids %v, want %v", pids, want)
		}
	}
}

func TestComputeProcessesNoLibrary(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	m.NoLibrary = true
	if _, err := nvml.NewReader(m, "", nil).ComputeProcesses(); !errors.Is(err, nvml.ErrNoLibrary) {
		t.Fatalf("err %v, want ErrNoLibrary", err)
	}
}
