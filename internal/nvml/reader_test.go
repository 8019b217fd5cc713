package nvml_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// sysfsWithNUMA writes bus/pci/devices/<id>/numa_node files.
func sysfsWithNUMA(t *testing.T, nodes map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for id, n := range nodes {
		dir := filepath.Join(root, "bus", "pci", "devices", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func sample(t *testing.T, r *nvml.Reader) *nvml.Snapshot {
	t.Helper()
	snap, err := r.Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	return snap
}

func TestDGXH100Identity(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	root := sysfsWithNUMA(t, map[string]string{"0000:18:00.0": "0", "0000:9a:00.0": "1", "0000:2a:00.0": "-1"})
	snap := sample(t, nvml.NewReader(m, root, nil))

	if len(snap.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(snap.GPUs))
	}
	if snap.DriverVersion != "550.54.15" || snap.CUDADriverVersion != "12.4" {
		t.Errorf("driver %q cuda %q, want 550.54.15 and 12.4", snap.DriverVersion, snap.CUDADriverVersion)
	}
	g0 := snap.GPUs[0]
	if g0.PCIBusID != "0000:18:00.0" {
		t.Errorf("GPU 0 bus id %q, want sysfs form 0000:18:00.0", g0.PCIBusID)
	}
	if g0.UUID != m.GPUs[0].UUID || g0.Name != "NVIDIA H100 80GB HBM3" || g0.ComputeCapability != "9.0" {
		t.Errorf("GPU 0 identity %+v", g0.Identity)
	}
	if snap.GPUs[4].PCIBusID != "0000:9a:00.0" {
		t.Errorf("GPU 4 bus id %q, want lower case 0000:9a:00.0", snap.GPUs[4].PCIBusID)
	}
	// numa_node from sysfs; -1 and a missing file both mean unknown.
	for i, want := range map[int]int{0: 0, 4: 1, 1: -1, 2: -1} {
		if got := snap.GPUs[i].NUMANode; got != want {
			t.Errorf("GPU %d NUMA node %d, want %d", i, got, want)
		}
	}
}

// TestNVLinkTraffic: each link's data counters are read only when asked
// for; the GPU's totals always, from the all-links scope or, where a driver
// does not support it, as the sum of the links.
func TestNVLinkTraffic(t *testing.T) {
	const total = 171000 * 1024 // the model's link l carries 1000 (l+1) KiB
	m := nvmlmodel.NewH200Pair()
	g := sample(t, nvml.NewReader(m, "", nil)).GPUs[0]
	if !g.NVLinkTransmitBytes.Valid || g.NVLinkTransmitBytes.V != total || !g.NVLinkReceiveBytes.Valid {
		t.Errorf("totals TX %+v RX %+v, want TX %d", g.NVLinkTransmitBytes, g.NVLinkReceiveBytes, total)
	}
	if g.NVLinks[2].TransmitBytes.Valid {
		t.Errorf("link 2 TX read without WithLinkTraffic: %+v", g.NVLinks[2].TransmitBytes)
	}

	g = sample(t, nvml.NewReader(m, "", nil, nvml.WithLinkTraffic(true))).GPUs[0]
	if tx := g.NVLinks[2].TransmitBytes; !tx.Valid || tx.V != 3000*1024 || !g.NVLinks[2].ReceiveBytes.Valid {
		t.Errorf("with WithLinkTraffic, link 2 TX %+v RX %+v, want TX %d", tx, g.NVLinks[2].ReceiveBytes, 3000*1024)
	}
	if g.NVLinkTransmitBytes.V != total {
		t.Errorf("with WithLinkTraffic, total TX %g, want %d", g.NVLinkTransmitBytes.V, total)
	}

	m.Update(func() {
		for _, g := range m.GPUs {
			g.Unsupported[fmt.Sprintf("field:%d:all", gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX)] = true
		}
	})
	r := nvml.NewReader(m, "", nil)
	// sample fails the test on any error: an unsupported scope is quiet.
	for i := range 2 { // the fallback from the first sample on, and again
		snap := sample(t, r)
		if tx := snap.GPUs[0].NVLinkTransmitBytes; !tx.Valid || tx.V != total {
			t.Errorf("sample %d without the all-links scope: total TX %+v, want the links' sum %d", i, tx, total)
		}
	}
}

func TestReadingsInBaseUnits(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		g := m.GPUs[1]
		g.SMClockMHz, g.PowerMW, g.EnergyMJ, g.UtilGPU = 1755, 650500, 3_000_000, 87
		g.ClockReasons = 0x4 | 0x40 // sw power cap, hw thermal slowdown
		g.ECC = [2][2]uint64{{5, 9}, {0, 1}}
		g.RemapCorr, g.RemapPending = 2, true
		g.PCIeGen, g.PCIeWidth = 4, 8
		g.PCIeReplays = 11
		g.Fields[nvmlmodel.FieldKey{ID: gonvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN}] = 2.5e9
		g.Fields[nvmlmodel.FieldKey{ID: gonvml.FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS}] = 4
		g.NVLinks[3].Errors[gonvml.NVLINK_ERROR_DL_CRC_FLIT] = 17
	})
	g := sample(t, nvml.NewReader(m, "", nil)).GPUs[1]

	checks := []struct {
		name      string
		got, want float64
		valid     bool
	}{
		{"SM clock Hz", g.Clocks.SM.V, 1755e6, g.Clocks.SM.Valid},
		{"power W", g.Power.V, 650.5, g.Power.Valid},
		{"power limit W", g.PowerLimit.V, 700, g.PowerLimit.Valid},
		{"energy J", g.Energy.V, 3000, g.Energy.Valid},
		{"utilization", g.Utilization.V, 0.87, g.Utilization.Valid},
		{"memory temperature", g.MemoryTemperature.V, 41, g.MemoryTemperature.Valid},
		{"corrected volatile", g.ECC.CorrectedVolatile.V, 5, g.ECC.CorrectedVolatile.Valid},
		{"corrected aggregate", g.ECC.CorrectedAggregate.V, 9, g.ECC.CorrectedAggregate.Valid},
		{"uncorrected aggregate", g.ECC.UncorrectedAggregate.V, 1, g.ECC.UncorrectedAggregate.Valid},
		{"remapped correctable", g.ECC.RemappedCorrectable.V, 2, g.ECC.RemappedCorrectable.Valid},
		{"PCIe replays", g.PCIe.Replays.V, 11, g.PCIe.Replays.Valid},
		{"PCIe correctable", g.PCIe.CorrectableErrors.V, 4, g.PCIe.CorrectableErrors.Valid},
		{"memory used", g.MemoryUsed.V, 512 << 20, g.MemoryUsed.Valid},
		{"memory reserved", g.MemoryReserved.V, 615 << 20, g.MemoryReserved.Valid},
		{"hw thermal seconds", g.Throttle.Seconds["hw_thermal_slowdown"], 2.5, true},
		{"sw power cap seconds", g.Throttle.Seconds["sw_power_cap"], 1.5, true},
		{"NVLink speed B/s", g.NVLinks[0].SpeedBytes.V, 26562e6, g.NVLinks[0].SpeedBytes.Valid},
		// The model's link l carries 1000 (l+1) KiB: 171,000 KiB over 18.
		{"NVLink TX bytes, all links", g.NVLinkTransmitBytes.V, 171000 * 1024, g.NVLinkTransmitBytes.Valid},
		{"NVLink 3 CRC flit", g.NVLinks[3].Errors["crc_flit"], 17, true},
	}
	for _, c := range checks {
		if !c.valid || c.got != c.want {
			t.Errorf("%s = %v (valid %v), want %v", c.name, c.got, c.valid, c.want)
		}
	}
	if g.PCIe.Generation.V != 4 || g.PCIe.Width.V != 8 || g.PCIe.MaxWidth.V != 16 || g.PCIe.GPUMaxGeneration.V != 5 {
		t.Errorf("PCIe link %+v, want gen 4 x8 of gen 5 x16", g.PCIe)
	}
	if !g.ECC.RemapPending.V || g.ECC.RemapFailed.V {
		t.Errorf("remap pending/failed = %v/%v", g.ECC.RemapPending.V, g.ECC.RemapFailed.V)
	}
	if g.Throttle.Active.V != 0x44 || g.Throttle.Supported.V != 0x1ff {
		t.Errorf("throttle active %#x supported %#x", g.Throttle.Active.V, g.Throttle.Supported.V)
	}
	if g.ComputeMode.V != "default" || g.MIGEnabled.V {
		t.Errorf("compute mode %q MIG %v", g.ComputeMode.V, g.MIGEnabled.V)
	}
}

func TestPairsAsNvidiaSmiTopo(t *testing.T) {
	t.Run("H200 pair, direct NVLinks", func(t *testing.T) {
		m := nvmlmodel.NewH200Pair()
		snap := sample(t, nvml.NewReader(m, "", nil))
		if len(snap.Pairs) != 2 {
			t.Fatalf("%d pairs, want 2 (both directions)", len(snap.Pairs))
		}
		for _, p := range snap.Pairs {
			if p.Level != "NV18" || p.NVLinks != 18 || !p.P2P["read"] || !p.P2P["nvlink"] {
				t.Errorf("pair %+v, want NV18 with P2P", p)
			}
		}
		if l := snap.GPUs[0].NVLinks[0]; l.RemotePCIBusID != "0000:00:07.0" || l.RemoteType != "gpu" {
			t.Errorf("GPU 0 link 0 remote %q %q, want GPU 1 at 0000:00:07.0", l.RemotePCIBusID, l.RemoteType)
		}

		// A link going down shows in the next sample's cell.
		r := nvml.NewReader(m, "", nil)
		sample(t, r)
		m.Update(func() { m.GPUs[0].NVLinks[5].Up = false; m.GPUs[1].NVLinks[5].Up = false })
		snap = sample(t, r)
		if p := snap.Pairs[0]; p.Level != "NV17" || snap.GPUs[0].ActiveNVLinks() != 17 {
			t.Errorf("after a link down: %s, %d active, want NV17 and 17", p.Level, snap.GPUs[0].ActiveNVLinks())
		}
	})
	t.Run("DGX H100, NVSwitch", func(t *testing.T) {
		snap := sample(t, nvml.NewReader(nvmlmodel.NewDGXH100(), "", nil))
		if len(snap.Pairs) != 56 {
			t.Fatalf("%d pairs, want 56", len(snap.Pairs))
		}
		for _, p := range snap.Pairs {
			if p.Level != "NV18" {
				t.Errorf("pair %d-%d is %s, want NV18 through the switches", p.GPU, p.Peer, p.Level)
			}
		}
	})
	t.Run("no NVLink: PCIe level", func(t *testing.T) {
		m := nvmlmodel.NewDGXH100()
		for _, g := range m.GPUs {
			for l := range g.NVLinks {
				g.NVLinks[l].Up = false
			}
		}
		snap := sample(t, nvml.NewReader(m, "", nil))
		want := map[[2]int]string{{0, 1}: "NODE", {0, 4}: "SYS", {5, 7}: "NODE", {7, 2}: "SYS"}
		for _, p := range snap.Pairs {
			if w, ok := want[[2]int{p.GPU, p.Peer}]; ok && p.Level != w {
				t.Errorf("pair %d-%d is %s, want %s", p.GPU, p.Peer, p.Level, w)
			}
		}
	})
}

func TestNVLinkErrorsFromFieldsOrCalls(t *testing.T) {
	for _, tc := range []struct {
		name        string
		unsupported []string
	}{
		{"fields, no per-link calls", []string{"GetNvLinkErrorCounter"}},
		{"calls where fields are missing", []string{"field:161", "field:162", "field:163", "field:39"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nvmlmodel.NewH200Pair()
			m.Update(func() {
				m.GPUs[0].NVLinks[4].Errors = [4]uint64{gonvml.NVLINK_ERROR_DL_REPLAY: 3, gonvml.NVLINK_ERROR_DL_RECOVERY: 1,
					gonvml.NVLINK_ERROR_DL_CRC_FLIT: 250, gonvml.NVLINK_ERROR_DL_CRC_DATA: 7}
				for _, u := range tc.unsupported {
					m.GPUs[0].Unsupported[u] = true
				}
			})
			snap, err := nvml.NewReader(m, "", nil).Sample(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := snap.GPUs[0].NVLinks[4].Errors
			want := map[string]float64{"replay": 3, "recovery": 1, "crc_flit": 250, "crc_data": 7}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func TestNVLinkRetrainedToAnotherPeer(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	r := nvml.NewReader(m, "", nil)
	sample(t, r)
	m.Update(func() { m.GPUs[0].NVLinks[2].Up = false })
	if l := sample(t, r).GPUs[0].NVLinks[2]; l.Active || l.RemotePCIBusID != "" {
		t.Fatalf("down link: active %v remote %q, want down with no remote", l.Active, l.RemotePCIBusID)
	}
	m.Update(func() {
		m.GPUs[0].NVLinks[2] = nvmlmodel.Link{Up: true, Version: 4, RemoteBus: "00000000:05:00.0", RemoteType: gonvml.NVLINK_DEVICE_TYPE_SWITCH}
	})
	if l := sample(t, r).GPUs[0].NVLinks[2]; !l.Active || l.RemotePCIBusID != "0000:05:00.0" || l.RemoteType != "switch" {
		t.Fatalf("retrained link: %+v, want up to the switch at 0000:05:00.0", l)
	}
}

// A failure elsewhere in the sample must not make every link re-read what
// it keeps between state changes (that costs ~55 ms a GPU on an H200).
func TestLinkStaticsNotReReadAfterUnrelatedError(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	r := nvml.NewReader(m, "", nil)
	// GPU 0's temperature is read before its links, in the same sample.
	m.Update(func() { m.GPUs[0].Errors["GetTemperature"] = gonvml.ERROR_UNKNOWN })
	_, _ = r.Sample(context.Background()) // a partial error: the temperature
	// Were link 0's remote end re-read, this error would be counted.
	m.Update(func() { m.GPUs[0].Errors["GetNvLinkRemotePciInfo"] = gonvml.ERROR_UNKNOWN })
	_, err := r.Sample(context.Background())
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 1 {
		t.Fatalf("err = %v, want only the temperature error (link statics kept from the first sample)", err)
	}
}

func TestUnsupportedIsSkippedQuietly(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() {
		for _, g := range m.GPUs {
			g.Unsupported["GetPowerUsage"] = true
			g.Unsupported["GetRemappedRows"] = true
			g.Unsupported["field:82"] = true // memory temperature
		}
	})
	snap, err := nvml.NewReader(m, "", nil).Sample(context.Background())
	if err != nil {
		t.Fatalf("unsupported values must not be errors, got %v", err)
	}
	g := snap.GPUs[0]
	if g.Power.Valid || g.ECC.RemappedCorrectable.Valid || g.MemoryTemperature.Valid {
		t.Error("unsupported values reported as present")
	}
	if !g.GPUTemperature.Valid || !g.PowerLimit.Valid {
		t.Error("supported values next to unsupported ones were dropped")
	}
	// Hopper retires no pages: absent, not zero.
	if g.ECC.RetiredSingleBit.Valid {
		t.Error("retired pages present on a GPU that does not support them")
	}
}

func TestFailedCallsAreCountedAndTheRestKept(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.Update(func() { m.GPUs[1].Errors["GetTemperature"] = gonvml.ERROR_UNKNOWN })
	snap, err := nvml.NewReader(m, "", nil).Sample(context.Background())
	var partial *sampler.PartialError
	if !errors.As(err, &partial) || partial.Count != 1 {
		t.Fatalf("err = %v, want a partial error counting 1 value", err)
	}
	if snap == nil || snap.GPUs[1].GPUTemperature.Valid || !snap.GPUs[1].Power.Valid || !snap.GPUs[0].GPUTemperature.Valid {
		t.Fatal("a failed call must drop only its own value")
	}
}

func TestGPULostMidRun(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	r := nvml.NewReader(m, "", nil)
	if sample(t, r).GPUs[3].Lost {
		t.Fatal("GPU 3 lost before it was")
	}
	m.Update(func() { m.GPUs[3].Lost = true })
	snap, err := r.Sample(context.Background())
	if err != nil {
		t.Fatalf("a lost GPU must not fail the sample: %v", err)
	}
	if len(snap.GPUs) != 8 {
		t.Fatalf("%d GPUs, want all 8 with the lost one reported", len(snap.GPUs))
	}
	g3 := snap.GPUs[3]
	if !g3.Lost || g3.UUID != m.GPUs[3].UUID || g3.PCIBusID != "0000:5d:00.0" {
		t.Errorf("GPU 3 = lost %v uuid %q bus %q, want lost with its identity", g3.Lost, g3.UUID, g3.PCIBusID)
	}
	if g3.Power.Valid || len(g3.NVLinks) != 0 {
		t.Error("a lost GPU still has readings")
	}
	if snap.GPUs[2].Lost || !snap.GPUs[4].Power.Valid {
		t.Error("other GPUs affected by one lost GPU")
	}
}

func TestNoLibrary(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	m.NoLibrary = true
	r := nvml.NewReader(m, "", nil)
	if _, err := r.Sample(context.Background()); !errors.Is(err, nvml.ErrNoLibrary) {
		t.Fatalf("err = %v, want ErrNoLibrary", err)
	}
	if r.Identities() != nil {
		t.Fatal("identities without a library")
	}
	// The driver arrives later: the next sample picks it up.
	m.NoLibrary = false
	if snap := sample(t, r); len(snap.GPUs) != 2 {
		t.Fatalf("%d GPUs after the library appeared, want 2", len(snap.GPUs))
	}
}

func TestXIDWatcherCountsEvents(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	r := nvml.NewReader(m, "", nil)
	w := nvml.NewXIDWatcher(r, nil)
	w.Wait = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, 10*time.Millisecond)

	m.SendXID(1, 79)
	m.SendXID(1, 79)
	m.SendXID(0, 48)
	m.SendXID(-1, 119)
	deadline := time.Now().Add(10 * time.Second)
	var counts []nvml.XIDCount
	for time.Now().Before(deadline) {
		if counts = w.Counts(); len(counts) == 3 && counts[2].Count == 2 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := []struct {
		gpu   int
		xid   uint64
		count uint64
	}{{-1, 119, 1}, {0, 48, 1}, {1, 79, 2}}
	if len(counts) != len(want) {
		t.Fatalf("counts = %+v, want %v", counts, want)
	}
	for i, c := range counts {
		if c.GPU != want[i].gpu || c.XID != want[i].xid || c.Count != want[i].count || c.LastSeen.IsZero() {
			t.Errorf("count %d = %+v, want %+v", i, c, want[i])
		}
	}
	if st := w.Status(); !st.Up || st.Name != "xid" {
		t.Errorf("watcher status %+v, want up", st)
	}
}

func TestXIDWatcherWithoutRegistration(t *testing.T) {
	m := nvmlmodel.NewH200Pair()
	for _, g := range m.GPUs {
		g.Unsupported["RegisterEvents"] = true
	}
	w := nvml.NewXIDWatcher(nvml.NewReader(m, "", nil), nil)
	w.Wait = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, 10*time.Millisecond); close(done) }()
	time.Sleep(50 * time.Millisecond)
	if w.Status().Up {
		t.Error("watcher up with no GPU registered for XID events")
	}
	cancel()
	<-done
}
