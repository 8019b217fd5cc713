//go:build gpu

// Tests against the real NVML library; they run on a GPU machine only:
//
//	go test -c -tags gpu -o .device/gpu.test ./internal/nvml
//	.device/gpu.test -test.v
//
// The tiers' cost, and each batched field against its single call:
//
//	.device/gpu.test -test.v -test.run 'RealSampleCost|RealSampleTiers|RealFieldAgreement|RealCallCost'
package nvml

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

func realReader(t *testing.T, opts ...Option) *Reader {
	t.Helper()
	r := NewReader(nvml.New(), "/sys", nil, opts...)
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

// TestRealCallCost times each group of NVML reads on GPU 0, to see where a
// sample's time goes, after a first sample has read the statics and
// learnt what the GPU does not support.
func TestRealCallCost(t *testing.T) {
	r := realReader(t)
	if _, err := r.Sample(context.Background()); err != nil {
		t.Fatalf("first sample: %v", err)
	}
	d := r.devices[0]
	var errs sampler.Tally
	rd := &read{r: r, d: d, errs: &errs}
	h := d.handle
	g := &GPUState{Identity: d.id, NVLinks: newLinks(d.id.NVLinkCount)}
	g.Throttle.Seconds = map[string]float64{}
	for i := range g.NVLinks {
		g.NVLinks[i].Errors = map[string]float64{}
	}
	groups := []struct {
		name string
		f    func()
	}{
		{"statics (max clocks, PCIe max)", func() { readStatics(rd, h) }},
		{"fast calls (P-state..PCIe link)", func() { _, _ = h.GetPerformanceState(); readFastCalls(rd, h, g) }},
		{"fast: NVLink states, calls", func() { readNVLinkStates(rd, h, g.NVLinks) }},
		{"fast: fields", func() { readFieldTier(rd, h, g, fastTiers[fastTierKey{}]) }},
		{"fast: fields with NVLink states", func() { readFieldTier(rd, h, g, fastTiers[fastTierKey{linkStates: true}]) }},
		{"fast: fields with each link's traffic", func() { readFieldTier(rd, h, g, fastTiers[fastTierKey{linkTraffic: true}]) }},
		{"slow: fields and their fallbacks", func() { readFieldTier(rd, h, g, slowFields) }},
		{"slow: compute and MIG mode", func() { _, _ = h.GetComputeMode(); _, _, _ = h.GetMigMode() }},
		{"link statics, all links", func() { d.links = nil; readLinkStatics(rd, h, g.NVLinks) }},
	}
	for _, grp := range groups {
		var took []time.Duration
		for i := 0; i < 7; i++ {
			start := time.Now()
			grp.f()
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		t.Logf("%-36s median %8.3f ms  max %8.3f ms", grp.name, float64(took[3].Microseconds())/1000, float64(took[6].Microseconds())/1000)
	}
	if errs.Count > 0 {
		t.Errorf("%d calls failed, first: %v", errs.Count, errs.First)
	}
	var off []string
	for k, ret := range d.off {
		off = append(off, fmt.Sprintf("%s/%d: %v", k.what, k.link, ret))
	}
	sort.Strings(off)
	t.Logf("GPU 0 does not support: %s", strings.Join(off, "; "))
}

// TestRealSampleTiers times whole samples of every GPU in each tier mix:
// fast only (what most samples are), fast and slow (one sample in
// slow interval / nvml interval), fast only with NVLink states as fields.
func TestRealSampleTiers(t *testing.T) {
	const n = 50
	run := func(name string, stateFields bool, opts ...Option) (time.Duration, time.Duration) {
		r := realReader(t, opts...)
		r.linkStateFields = stateFields
		for i := 0; i < 2; i++ { // discovery, statics, and what is unsupported
			if _, err := r.Sample(context.Background()); err != nil {
				t.Fatalf("%s warm-up: %v", name, err)
			}
		}
		return sampleCost(t, name, r, n)
	}
	fastWall, fastCPU := run("fast only", false, WithSlowInterval(time.Hour))
	slowWall, slowCPU := run("fast and slow every sample", false, WithSlowInterval(0))
	run("fast only, NVLink states as fields", true, WithSlowInterval(time.Hour))
	// At --nvml.interval=5s and the default slow interval one sample in 12
	// reads the slow tier.
	k := float64(DefaultSlowInterval / (5 * time.Second))
	ms := func(fast, slow time.Duration) float64 { return ((k-1)*float64(fast) + float64(slow)) / k / 1e6 }
	t.Logf("amortised at 5 s / %v: wall %.2f ms, CPU %.2f ms per sample", DefaultSlowInterval,
		ms(fastWall, slowWall), ms(fastCPU, slowCPU))
}

// TestRealFieldAgreement compares each batched field with the single call
// it stands in for, on every GPU: where both answer they must agree
// (power and energy move between the reads, so they only have to be close).
func TestRealFieldAgreement(t *testing.T) {
	r := realReader(t)
	for _, d := range r.devices {
		h := d.handle
		var errs sampler.Tally
		rd := &read{r: r, d: d, errs: &errs}
		calls, fields := GPUState{}, GPUState{}
		for _, g := range []*GPUState{&calls, &fields} {
			g.NVLinks = newLinks(d.id.NVLinkCount)
			g.Throttle.Seconds = map[string]float64{}
			for i := range g.NVLinks {
				g.NVLinks[i].Errors = map[string]float64{}
			}
		}
		all := append(append([]fieldSpec{}, fastTiers[fastTierKey{true, true}]...), slowFields...)
		done := map[[2]int]bool{}
		for _, s := range all {
			first, last := -1, -1
			if s.perLink {
				first, last = 0, len(calls.NVLinks)-1
			}
			for l := first; l <= last; l++ {
				if s.fb >= 0 && !done[[2]int{s.fb, l}] {
					done[[2]int{s.fb, l}] = true
					fallbacks[s.fb](rd, h, &calls, l)
				}
			}
		}
		readFieldTier(rd, h, &fields, fastTiers[fastTierKey{true, true}])
		readFieldTier(rd, h, &fields, slowFields)
		near := func(a, b sampler.Opt[float64], tol float64) bool {
			return !a.Valid || !b.Valid || (a.V-b.V <= tol && b.V-a.V <= tol)
		}
		for _, c := range []struct {
			name        string
			call, field sampler.Opt[float64]
			tol         float64
		}{
			{"power W", calls.Power, fields.Power, 40},
			{"NVLink TX bytes, all links", calls.NVLinkTransmitBytes, fields.NVLinkTransmitBytes, 1 << 20},
			{"NVLink RX bytes, all links", calls.NVLinkReceiveBytes, fields.NVLinkReceiveBytes, 1 << 20},
			{"power limit W", calls.PowerLimit, fields.PowerLimit, 0},
			{"energy J", calls.Energy, fields.Energy, 100},
			{"ECC corrected volatile", calls.ECC.CorrectedVolatile, fields.ECC.CorrectedVolatile, 0},
			{"ECC uncorrected volatile", calls.ECC.UncorrectedVolatile, fields.ECC.UncorrectedVolatile, 0},
			{"ECC corrected aggregate", calls.ECC.CorrectedAggregate, fields.ECC.CorrectedAggregate, 0},
			{"ECC uncorrected aggregate", calls.ECC.UncorrectedAggregate, fields.ECC.UncorrectedAggregate, 0},
			{"remapped correctable", calls.ECC.RemappedCorrectable, fields.ECC.RemappedCorrectable, 0},
			{"remapped uncorrectable", calls.ECC.RemappedUncorrectable, fields.ECC.RemappedUncorrectable, 0},
			{"retired single bit", calls.ECC.RetiredSingleBit, fields.ECC.RetiredSingleBit, 0},
			{"PCIe replays", calls.PCIe.Replays, fields.PCIe.Replays, 0},
		} {
			t.Logf("GPU %d %-26s call %-22v field %v", d.id.Index, c.name, c.call, c.field)
			if !near(c.call, c.field, c.tol) {
				t.Errorf("GPU %d %s: call %v, field %v", d.id.Index, c.name, c.call.V, c.field.V)
			}
		}
		if a, b := calls.ECC.RemapPending, fields.ECC.RemapPending; a.Valid && b.Valid && a != b {
			t.Errorf("GPU %d remap pending: call %v, field %v", d.id.Index, a, b)
		}
		states := 0
		for l := range calls.NVLinks {
			if calls.NVLinks[l].Active == fields.NVLinks[l].Active {
				states++
			}
			for _, k := range NVLinkErrorTypes {
				cv, cok := calls.NVLinks[l].Errors[k]
				fv, fok := fields.NVLinks[l].Errors[k]
				if cok && fok && cv != fv {
					t.Errorf("GPU %d link %d %s errors: call %v, field %v", d.id.Index, l, k, cv, fv)
				}
			}
		}
		t.Logf("GPU %d NVLink state: field agrees with call on %d/%d links; %d reads failed (first: %v)",
			d.id.Index, states, len(calls.NVLinks), errs.Count, errs.First)
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
	one := median(func() { _ = h.GetFieldValues([]nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}) })
	var batch []nvml.FieldValue
	for l := 0; l < n; l++ {
		for _, f := range nvlinkErrorFields {
			batch = append(batch, nvml.FieldValue{FieldId: f.id, ScopeId: uint32(l)})
		}
	}
	many := median(func() { _ = h.GetFieldValues(batch) })
	calls := median(func() {
		for l := 0; l < n; l++ {
			for _, c := range nvlinkErrorFields {
				_, _ = h.GetNvLinkErrorCounter(l, c.counter)
			}
		}
	})
	state := median(func() {
		for l := 0; l < n; l++ {
			_, _ = h.GetNvLinkState(l)
		}
	})
	var states []nvml.FieldValue
	for l := 0; l < n; l++ {
		states = append(states, nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(l)})
	}
	stateFields := median(func() { _ = h.GetFieldValues(states) })
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
	for _, c := range nvlinkErrorFields {
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
