//go:build gpu

// Tests against the real NVML library; they run on a GPU machine only:
//
//	go test -c -tags gpu -o .device/gpu.test ./internal/nvml
//	.device/gpu.test -test.v
package nvml

import (
	"context"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

func realReader(t *testing.T) *Reader {
	t.Helper()
	r := NewReader(nvml.New(), "/sys", nil)
	if err := r.Init(); err != nil {
		t.Fatalf("NVML init on a GPU machine: %v", err)
	}
	t.Cleanup(r.Shutdown)
	return r
}

var busIDForm = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$`)

func TestRealSample(t *testing.T) {
	r := realReader(t)
	var snap *Snapshot
	for i := 0; i < 3; i++ {
		start := time.Now()
		s, err := r.Sample(context.Background())
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		t.Logf("sample %d took %v", i, time.Since(start))
		snap = s
	}
	if len(snap.GPUs) == 0 {
		t.Fatal("no GPU on a GPU machine")
	}
	for _, g := range snap.GPUs {
		if g.Lost || g.UUID == "" || !busIDForm.MatchString(g.PCIBusID) {
			t.Errorf("GPU %d: lost %v uuid %q bus %q", g.Index, g.Lost, g.UUID, g.PCIBusID)
		}
		for name, v := range map[string]sampler.Opt[float64]{"SM clock": g.Clocks.SM, "temperature": g.GPUTemperature,
			"power": g.Power, "memory total": g.MemoryTotal, "energy": g.Energy} {
			if !v.Valid || v.V <= 0 {
				t.Errorf("GPU %d %s = %+v, want a positive reading", g.Index, name, v)
			}
		}
		if !g.PCIe.Width.Valid || !g.PCIe.MaxGeneration.Valid {
			t.Errorf("GPU %d PCIe link not read: %+v", g.Index, g.PCIe)
		}
		t.Logf("GPU %d %s %s numa=%d nvlinks=%d active=%d pcie gen %d/%d x%d/%d mem used %.0f MiB reserved %.0f MiB",
			g.Index, g.Name, g.PCIBusID, g.NUMANode, g.NVLinkCount, g.ActiveNVLinks(), g.PCIe.Generation.V,
			g.PCIe.MaxGeneration.V, g.PCIe.Width.V, g.PCIe.MaxWidth.V, g.MemoryUsed.V/(1<<20), g.MemoryReserved.V/(1<<20))
	}
	for _, p := range snap.Pairs {
		t.Logf("pair %d-%d %s p2p %v", p.GPU, p.Peer, p.Level, p.P2P)
	}
}

// TestRealCallCost times each group of NVML calls on GPU 0, to see where a
// sample's time goes.
func TestRealCallCost(t *testing.T) {
	r := realReader(t)
	d := r.devices[0]
	var errs sampler.Tally
	rd := &read{r: r, d: d, errs: &errs}
	h := d.handle
	g := &GPUState{Identity: d.id}
	groups := []struct {
		name string
		f    func()
	}{
		{"clocks+reasons", func() { readClocks(rd, h, g) }},
		{"power+thermal+mode", func() { readPowerThermal(rd, h, g) }},
		{"memory", func() { readMemory(rd, h, g) }},
		{"ecc+remap+retired", func() { readECC(rd, h, g) }},
		{"pcie", func() { readPCIe(rd, h, g) }},
		{"nvlinks (state; statics cached)", func() { g.NVLinks = readNVLinks(rd, h, d) }},
		{"field values", func() { readFields(rd, h, g) }},
		{"nvlink error calls (fallback)", func() { readNVLinkErrorCalls(rd, h, g.NVLinks) }},
	}
	for _, grp := range groups {
		var took []time.Duration
		for i := 0; i < 7; i++ {
			start := time.Now()
			grp.f()
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("%-32s median %8.3f ms  max %8.3f ms", grp.name, float64(took[3].Microseconds())/1000, float64(took[6].Microseconds())/1000)
	}
	if errs.Count > 0 {
		t.Errorf("%d calls failed, first: %v", errs.Count, errs.First)
	}
}

func TestRealXIDWatcher(t *testing.T) {
	r := realReader(t)
	w := NewXIDWatcher(r, nil)
	w.Wait = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, time.Second)
	time.Sleep(1500 * time.Millisecond)
	st := w.Status()
	t.Logf("XID watcher: %+v, counts %v", st, w.Counts())
	if !st.Up {
		t.Error("XID watcher not up on a GPU machine")
	}
}

// TestRealFieldCost tells whether NVML's cost is per call or per value: it
// decides whether per-link counters are read as one batch of field values
// or one call each.
func TestRealFieldCost(t *testing.T) {
	r := realReader(t)
	h := r.devices[0].handle
	n := r.devices[0].id.NVLinkCount
	median := func(f func()) float64 {
		var took []time.Duration
		for i := 0; i < 7; i++ {
			start := time.Now()
			f()
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		return float64(took[3].Microseconds()) / 1000
	}
	one := median(func() { h.GetFieldValues([]nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}) })
	var batch []nvml.FieldValue
	for l := 0; l < n; l++ {
		for _, f := range nvlinkErrorFields {
			batch = append(batch, nvml.FieldValue{FieldId: f.id, ScopeId: uint32(l)})
		}
	}
	many := median(func() { h.GetFieldValues(batch) })
	calls := median(func() {
		for l := 0; l < n; l++ {
			for _, c := range nvlinkErrorCounters {
				h.GetNvLinkErrorCounter(l, c.counter)
			}
		}
	})
	state := median(func() {
		for l := 0; l < n; l++ {
			h.GetNvLinkState(l)
		}
	})
	var states []nvml.FieldValue
	for l := 0; l < n; l++ {
		states = append(states, nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(l)})
	}
	stateFields := median(func() { h.GetFieldValues(states) })
	agree := 0
	for l := 0; l < n; l++ {
		st, _ := h.GetNvLinkState(l)
		v, ok := fieldFloat(states[l])
		if ok && nvml.Return(states[l].NvmlReturn) == nvml.SUCCESS && (v == 1) == (st == nvml.FEATURE_ENABLED) {
			agree++
		}
	}
	errAgree := 0
	counter := map[string]nvml.NvLinkErrorCounter{}
	for _, c := range nvlinkErrorCounters {
		counter[c.name] = c.counter
	}
	for i, f := range batch {
		l, kind := i/len(nvlinkErrorFields), nvlinkErrorFields[i%len(nvlinkErrorFields)].name
		want, ret := h.GetNvLinkErrorCounter(l, counter[kind])
		v, ok := fieldFloat(f)
		if ret == nvml.SUCCESS && ok && nvml.Return(f.NvmlReturn) == nvml.SUCCESS && v == float64(want) {
			errAgree++
		} else if l == 0 {
			t.Logf("link 0 %s: field ret %v value %v, call ret %v value %d", kind, nvml.Return(f.NvmlReturn), v, ret, want)
		}
	}
	t.Logf("1 field: %.3f ms; %d error fields in one call: %.3f ms; %d error counter calls: %.3f ms", one, len(batch), many, n*4, calls)
	t.Logf("%d state calls: %.3f ms; %d state fields in one call: %.3f ms; field state agrees with call on %d/%d links; error fields agree on %d/%d",
		n, state, n, stateFields, agree, n, errAgree, len(batch))
}
