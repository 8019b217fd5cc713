package nvml_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock                { return &fakeClock{t: time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)} }
func tiered(m *nvmlmodel.Library, c *fakeClock) *nvml.Reader {
	return nvml.NewReader(m, "", nil, nvml.WithSlowInterval(time.Minute), nvml.WithClock(c.now))
}

// Calls that read what never changes.
var (
	staticCalls = []string{"DeviceGetCount", "DeviceGetHandleByIndex", "GetUUID", "GetPciInfo", "GetName", "GetSerial",
		"GetVbiosVersion", "GetCudaComputeCapability", "GetNumaNodeId", "GetMemoryBusWidth", "GetSupportedClocksEventReasons",
		"GetMaxClockInfo", "GetMaxPcieLinkGeneration", "GetMaxPcieLinkWidth", "GetGpuMaxPcieLinkGeneration",
		"GetTopologyCommonAncestor", "GetP2PStatus", "GetNvLinkVersion", "GetNvLinkRemotePciInfo", "GetNvLinkRemoteDeviceType"}
	// fallbackCalls stand in for fields; with every field supported they
	// are never made.
	fallbackCalls = []string{"GetPowerUsage", "GetEnforcedPowerLimit", "GetTotalEnergyConsumption", "GetViolationStatus",
		"GetTotalEccErrors", "GetRemappedRows", "GetPcieReplayCounter", "GetNvLinkErrorCounter"}
)

// fastPerGPU is what a sample without the slow tier asks a DGX H100 GPU:
// one batch of field values and the calls NVML has no field for.
var fastPerGPU = callCounts{"GetPerformanceState": 1, "GetClockInfo": 2, "GetCurrentClocksEventReasons": 1,
	"GetTemperature": 1, "GetUtilizationRates": 1, "GetMemoryInfo_v2": 1, "GetCurrPcieLinkGeneration": 1,
	"GetCurrPcieLinkWidth": 1, "GetNvLinkState": 18, "GetFieldValues": 1, "GetComputeMode": 1, "GetMigMode": 1}

func times(c callCounts, n int) callCounts {
	out := callCounts{}
	for k, v := range c {
		out[k] = v * n
	}
	return out
}

func TestTiersFastSampleAsksOnlyTheFastTier(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	c := newClock()
	r := tiered(m, c)
	sample(t, r)
	before := countCalls(m)
	for i := 0; i < 5; i++ {
		c.step(10 * time.Second)
		sample(t, r)
	}
	got := countCalls(m).sub(before)
	if want := times(fastPerGPU, 5*8); !maps.Equal(got, want) {
		t.Errorf("5 fast samples of 8 GPUs asked\n%v\nwant\n%v", got, want)
	}

	// A minute after the first sample the slow tier is due: two more
	// batches of field values (82 fields). ECC, remapping and error
	// counters come as fields: none of their calls.
	c.step(10 * time.Second)
	before = countCalls(m)
	sample(t, r)
	got = countCalls(m).sub(before)
	want := times(fastPerGPU, 8)
	want["GetFieldValues"] += 2 * 8
	if !maps.Equal(got, want) {
		t.Errorf("a sample with the slow tier asked\n%v\nwant\n%v", got, want)
	}
}

func TestTiersStaticsReadOnce(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	c := newClock()
	r := tiered(m, c)
	sample(t, r)
	first := countCalls(m)
	for _, name := range []string{"GetMaxClockInfo", "GetMaxPcieLinkGeneration", "GetNvLinkVersion", "GetP2PStatus"} {
		if first[name] == 0 {
			t.Errorf("%s not called at discovery or first sample", name)
		}
	}
	for i := 0; i < 20; i++ {
		c.step(10 * time.Second) // the slow tier comes round three times
		sample(t, r)
	}
	got := countCalls(m).sub(first)
	for _, name := range staticCalls {
		if got[name] != 0 {
			t.Errorf("%s called %d times after the first sample; statics are read once", name, got[name])
		}
	}
	for _, name := range fallbackCalls {
		if got[name] != 0 {
			t.Errorf("%s called %d times with its field supported", name, got[name])
		}
	}
	// Every 6th sample reads the slow tier (two batches of fields): 3 of 20.
	if slow := got["GetFieldValues"] - 20*8*fastPerGPU["GetFieldValues"]; slow != 3*2*8 {
		t.Errorf("%d slow field batches in 20 samples 10 s apart, want 2 in 3 samples per GPU", slow)
	}
}

func TestTiersSlowValuesCarriedBetweenReads(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	c := newClock()
	r := tiered(m, c)
	g := sample(t, r).GPUs[0]
	if !g.ECC.CorrectedVolatile.Valid || g.ECC.CorrectedVolatile.V != 0 || g.PCIe.Replays.V != 0 || g.ComputeMode.V != "default" {
		t.Fatalf("first sample: ECC %+v replays %+v mode %+v", g.ECC.CorrectedVolatile, g.PCIe.Replays, g.ComputeMode)
	}
	m.Update(func() {
		g := m.GPUs[0]
		g.ECC[0][0], g.RemapPending, g.PCIeReplays = 5, true, 3
		g.ComputeMode = gonvml.COMPUTEMODE_EXCLUSIVE_PROCESS
		g.NVLinks[3].Errors[gonvml.NVLINK_ERROR_DL_REPLAY] = 9
		g.TempC, g.PowerMW = 71, 400000
	})
	c.step(59 * time.Second)
	g = sample(t, r).GPUs[0]
	if g.GPUTemperature.V != 71 || g.Power.V != 400 {
		t.Errorf("fast values not read: temperature %v power %v", g.GPUTemperature.V, g.Power.V)
	}
	if g.ComputeMode.V != "exclusive_process" {
		t.Errorf("compute mode %q: the probes decide by it, so it is read every sample", g.ComputeMode.V)
	}
	if !g.ECC.CorrectedVolatile.Valid || g.ECC.CorrectedVolatile.V != 0 || !g.ECC.RemapPending.Valid || g.ECC.RemapPending.V ||
		!g.PCIe.Replays.Valid || g.PCIe.Replays.V != 0 || g.NVLinks[3].Errors["replay"] != 0 {
		t.Errorf("between slow reads the last slow values must be carried, got ECC %+v replays %+v errors %v",
			g.ECC, g.PCIe.Replays, g.NVLinks[3].Errors)
	}
	if len(g.NVLinks[3].Errors) != 4 {
		t.Errorf("carried link errors %v, want all four kinds", g.NVLinks[3].Errors)
	}
	c.step(time.Second)
	g = sample(t, r).GPUs[0]
	if g.ECC.CorrectedVolatile.V != 5 || !g.ECC.RemapPending.V || g.PCIe.Replays.V != 3 || g.NVLinks[3].Errors["replay"] != 9 {
		t.Errorf("slow tier due: ECC %v pending %v replays %v replay errors %v",
			g.ECC.CorrectedVolatile.V, g.ECC.RemapPending.V, g.PCIe.Replays.V, g.NVLinks[3].Errors["replay"])
	}
}

// A slow read that failed is tried again next sample, not a slow interval
// later; each failure is counted.
func TestTiersFailedSlowReadRetried(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	c := newClock()
	r := tiered(m, c)
	m.Update(func() { m.GPUs[1].Errors["GetTotalEccErrors"] = gonvml.ERROR_UNKNOWN })
	var failed int
	for i := 0; i < 2; i++ {
		_, err := r.Sample(context.Background())
		var partial *sampler.PartialError
		if !errors.As(err, &partial) || partial.Count == 0 || (i > 0 && partial.Count != failed) {
			t.Fatalf("sample %d: err = %v, want the ECC fields' errors counted, the same each sample", i, err)
		}
		failed = partial.Count
	}
	m.Update(func() { delete(m.GPUs[1].Errors, "GetTotalEccErrors") })
	before := countCalls(m, 1)
	sample(t, r)
	sample(t, r)
	if n := countCalls(m, 1).sub(before)["GetFieldValues"]; n != 2*fastPerGPU["GetFieldValues"]+2 {
		t.Errorf("%d field batches in two samples after the failure cleared, want the slow tier's two in the first only", n)
	}
}

func TestTiersStaticsReReadWhenGPUSetChanges(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	c := newClock()
	r := tiered(m, c)
	sample(t, r)
	m.Update(func() { m.GPUs[3].Lost = true })
	c.step(5 * time.Second)
	if g := sample(t, r).GPUs[3]; !g.Lost {
		t.Fatal("GPU 3 not lost")
	}
	m.Update(func() {
		m.GPUs[3].Lost = false
		m.GPUs[3].VBIOS = "96.00.99.00.02" // updated while it was away
		m.GPUs[3].ECC[0][1] = 7
	})
	c.step(5 * time.Second)
	before, before3 := countCalls(m), countCalls(m, 3)
	snap := sample(t, r)
	g := snap.GPUs[3]
	if g.Lost || g.VBIOS != "96.00.99.00.02" || !g.Clocks.SMMax.Valid || g.ECC.CorrectedAggregate.V != 7 {
		t.Errorf("GPU 3 back: lost %v VBIOS %q SM max %+v ECC aggregate %v; want identity, statics and slow tier read anew",
			g.Lost, g.VBIOS, g.Clocks.SMMax, g.ECC.CorrectedAggregate.V)
	}
	if len(snap.Pairs) != 56 || r.Identities()[3].VBIOS != "96.00.99.00.02" {
		t.Errorf("%d pairs, inventory VBIOS %q after GPU 3 came back", len(snap.Pairs), r.Identities()[3].VBIOS)
	}
	all, gpu3 := countCalls(m).sub(before), countCalls(m, 3).sub(before3)
	for _, name := range []string{"GetUUID", "GetVbiosVersion", "GetMaxClockInfo", "GetNvLinkVersion", "GetNvLinkRemotePciInfo"} {
		if gpu3[name] == 0 || all[name] != gpu3[name] {
			t.Errorf("%s: %d calls on GPU 3, %d on all; want it re-read for GPU 3 only", name, gpu3[name], all[name])
		}
	}
	if all["GetTopologyCommonAncestor"] != 56 {
		t.Errorf("pair topology read %d times, want all 56 pairs again", all["GetTopologyCommonAncestor"])
	}
	// GPU 3's slow tier (and its NVLink statics) come as extra field
	// batches; no other GPU's slow tier is due.
	if extra, extra3 := all["GetFieldValues"]-8*fastPerGPU["GetFieldValues"], gpu3["GetFieldValues"]-fastPerGPU["GetFieldValues"]; extra3 < 2 || extra != extra3 {
		t.Errorf("%d extra field batches, %d of them GPU 3's; only GPU 3's slow tier is due", extra, extra3)
	}
	c.step(5 * time.Second)
	before = countCalls(m)
	sample(t, r)
	after := countCalls(m).sub(before)
	for _, name := range staticCalls {
		if after[name] != 0 {
			t.Errorf("%s called again in the sample after", name)
		}
	}
}

func TestTiersStaticReadRetriedAfterFailure(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	r := tiered(m, newClock())
	m.Update(func() { m.GPUs[0].Errors["GetMaxPcieLinkWidth"] = gonvml.ERROR_UNKNOWN })
	if _, err := r.Sample(context.Background()); err == nil {
		t.Fatal("the failed static read was not counted")
	}
	m.Update(func() { delete(m.GPUs[0].Errors, "GetMaxPcieLinkWidth") })
	g := sample(t, r).GPUs[0]
	if !g.PCIe.MaxWidth.Valid || g.PCIe.MaxWidth.V != 16 {
		t.Errorf("max width %+v after the failure cleared", g.PCIe.MaxWidth)
	}
	before := countCalls(m, 0)
	sample(t, r)
	if n := countCalls(m, 0).sub(before)["GetMaxPcieLinkWidth"]; n != 0 {
		t.Errorf("max width asked %d more times once read", n)
	}
}

// fieldIDs records the field ids GPU i is asked for, per GetFieldValues
// call.
func fieldIDs(m *nvmlmodel.Library, i int) *[][]uint32 {
	var calls [][]uint32
	g := m.GPUs[i]
	prev := g.GetFieldValuesFunc
	g.GetFieldValuesFunc = func(fv []gonvml.FieldValue) gonvml.Return {
		var ids []uint32
		for _, f := range fv {
			ids = append(ids, f.FieldId)
		}
		calls = append(calls, ids)
		return prev(fv)
	}
	return &calls
}

func TestTiersFieldsFallBackToCalls(t *testing.T) {
	everySample := nvml.WithSlowInterval(0)
	// Every field with a single call standing in for it.
	fields := map[uint32]string{
		gonvml.FI_DEV_POWER_AVERAGE: "GetPowerUsage", gonvml.FI_DEV_POWER_CURRENT_LIMIT: "GetEnforcedPowerLimit",
		gonvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION: "GetTotalEnergyConsumption", gonvml.FI_DEV_ECC_SBE_VOL_TOTAL: "GetTotalEccErrors",
		gonvml.FI_DEV_ECC_DBE_AGG_TOTAL: "GetTotalEccErrors", gonvml.FI_DEV_REMAPPED_PENDING: "GetRemappedRows",
		gonvml.FI_DEV_PCIE_REPLAY_COUNTER: "GetPcieReplayCounter", gonvml.FI_DEV_NVLINK_ERROR_DL_REPLAY: "GetNvLinkErrorCounter",
	}
	setup := func(m *nvmlmodel.Library) {
		g := m.GPUs[1]
		g.PowerMW, g.PowerLimitMW, g.EnergyMJ = 350500, 650000, 9_000_000
		g.ECC = [2][2]uint64{{4, 6}, {1, 2}}
		g.RemapCorr, g.RemapPending, g.PCIeReplays = 3, true, 12
		g.NVLinks[7].Errors = [4]uint64{2, 3, 4, 5}
	}
	batched := nvmlmodel.NewH200Pair()
	batched.Update(func() { setup(batched) })
	want := sample(t, nvml.NewReader(batched, "", nil, everySample)).GPUs[1]

	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		setup(m)
		for id := range fields {
			m.GPUs[1].Unsupported[fieldKey(id)] = true
		}
	})
	r := nvml.NewReader(m, "", nil, everySample)
	sample(t, r)
	asked := fieldIDs(m, 1)
	before := countCalls(m, 1)
	got := sample(t, r).GPUs[1]
	calls := countCalls(m, 1).sub(before)
	for id, call := range fields {
		for _, batch := range *asked {
			if slices.Contains(batch, id) {
				t.Errorf("unsupported field %d asked again", id)
			}
		}
		if calls[call] == 0 {
			t.Errorf("field %d unsupported, but %s not called", id, call)
		}
	}
	if calls["GetNvLinkErrorCounter"] != 18 || calls["GetTotalEccErrors"] != 2 || calls["GetRemappedRows"] != 1 {
		t.Errorf("fallback calls %v: want replay errors for 18 links, 2 ECC counters, remapped rows once", calls)
	}
	if calls["GetViolationStatus"] != 0 || len(*asked) != 2 {
		t.Errorf("with the other fields supported: %d violation status calls, %d field batches (want 0, 2)",
			calls["GetViolationStatus"], len(*asked))
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"power", got.Power, want.Power}, {"power limit", got.PowerLimit, want.PowerLimit}, {"energy", got.Energy, want.Energy},
		{"ECC", got.ECC, want.ECC}, {"PCIe", got.PCIe, want.PCIe},
		{"link 7 errors", got.NVLinks[7].Errors, want.NVLinks[7].Errors},
	} {
		if !equal(c.got, c.want) {
			t.Errorf("%s through the calls %+v, through fields %+v", c.name, c.got, c.want)
		}
	}
	if !want.Power.Valid || want.Power.V != 350.5 || want.ECC.CorrectedAggregate.V != 6 || !want.ECC.RemapPending.V ||
		want.NVLinks[7].Errors["replay"] != float64(m.GPUs[1].NVLinks[7].Errors[gonvml.NVLINK_ERROR_DL_REPLAY]) {
		t.Errorf("batched values wrong: power %+v ECC %+v link 7 %v", want.Power, want.ECC, want.NVLinks[7].Errors)
	}
}

func fieldKey(id uint32) string { return "field:" + itoa(id) }

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

func equal(a, b any) bool {
	if m, ok := a.(map[string]float64); ok {
		return maps.Equal(m, b.(map[string]float64))
	}
	return a == b
}

// Without the field API every value comes through its call.
func TestTiersNoFieldValues(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() { m.GPUs[0].Unsupported["GetFieldValues"] = true })
	r := nvml.NewReader(m, "", nil, nvml.WithSlowInterval(0))
	g := sample(t, r).GPUs[0]
	if !g.Power.Valid || !g.Energy.Valid || !g.ECC.CorrectedVolatile.Valid || g.NVLinks[4].Errors["replay"] != 0 ||
		len(g.NVLinks[4].Errors) != 4 || g.MemoryTemperature.Valid {
		t.Errorf("without field values: power %+v energy %+v ECC %+v link 4 errors %v memory temperature %+v",
			g.Power, g.Energy, g.ECC.CorrectedVolatile, g.NVLinks[4].Errors, g.MemoryTemperature)
	}
	before := countCalls(m, 0)
	sample(t, r)
	if n := countCalls(m, 0).sub(before)["GetFieldValues"]; n != 0 {
		t.Errorf("GetFieldValues asked %d times after it answered NOT_SUPPORTED", n)
	}
}

func TestTiersUnsupportedNotAskedAgain(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		for _, g := range m.GPUs {
			g.Unsupported["GetPowerUsage"] = true
			g.Unsupported["GetComputeMode"] = true
			g.Unsupported["GetUtilizationRates"] = true
			g.Errors["GetTemperature"] = gonvml.ERROR_UNKNOWN
		}
	})
	r := nvml.NewReader(m, "", nil, nvml.WithSlowInterval(0))
	before := countCalls(m)
	for i := 0; i < 3; i++ {
		_, err := r.Sample(context.Background())
		var partial *sampler.PartialError
		if !errors.As(err, &partial) || partial.Count != 2 {
			t.Fatalf("sample %d: %v, want only the two temperature errors", i, err)
		}
	}
	got := countCalls(m).sub(before)
	for name, want := range map[string]int{"GetPowerUsage": 2, "GetComputeMode": 2, "GetUtilizationRates": 2, "GetTemperature": 6} {
		if got[name] != want {
			t.Errorf("%s asked %d times in 3 samples of 2 GPUs, want %d", name, got[name], want)
		}
	}
}

// What a GPU supports changes with MIG mode: a change asks everything again.
func TestTiersMIGChangeAsksAgain(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		m.GPUs[0].Unsupported["GetUtilizationRates"] = true
	})
	r := nvml.NewReader(m, "", nil, nvml.WithSlowInterval(0))
	sample(t, r)
	m.Update(func() {
		delete(m.GPUs[0].Unsupported, "GetUtilizationRates")
		m.GPUs[0].MigMode = gonvml.DEVICE_MIG_ENABLE
	})
	if g := sample(t, r).GPUs[0]; g.Utilization.Valid || !g.MIGEnabled.V {
		t.Fatalf("utilisation %+v MIG %v; the change is seen at the end of this sample", g.Utilization, g.MIGEnabled)
	}
	if g := sample(t, r).GPUs[0]; !g.Utilization.Valid {
		t.Error("utilisation not asked again after MIG mode changed")
	}
}

func TestTiersLinkStateFromFields(t *testing.T) {
	for _, unsupported := range []bool{false, true} {
		m := nvmlmodel.NewH200Pair()
		m.Update(func() {
			m.GPUs[0].NVLinks[5].Up = false
			if unsupported {
				m.GPUs[0].Unsupported[fieldKey(gonvml.FI_DEV_NVLINK_GET_STATE)] = true
			}
		})
		r := nvml.NewReader(m, "", nil)
		nvml.SetLinkStateFields(r, true)
		sample(t, r)
		before := countCalls(m, 0)
		g := sample(t, r).GPUs[0]
		calls := countCalls(m, 0).sub(before)
		if g.ActiveNVLinks() != 17 || g.NVLinks[5].Active || g.NVLinks[5].RemotePCIBusID != "" || g.NVLinks[4].RemotePCIBusID != "0000:00:07.0" {
			t.Errorf("state field unsupported %v: %d links up, link 5 %+v", unsupported, g.ActiveNVLinks(), g.NVLinks[5])
		}
		if want := map[bool]int{false: 0, true: 18}[unsupported]; calls["GetNvLinkState"] != want || calls["GetFieldValues"] != 1 {
			t.Errorf("state field unsupported %v: %d state calls (want %d), %d field calls (want 1)",
				unsupported, calls["GetNvLinkState"], want, calls["GetFieldValues"])
		}
	}
}
