package nvml_test

import (
	"errors"
	"maps"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

func TestFabricHealthyOnDGXH100(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	snap := sample(t, nvml.NewReader(m, "", nil))
	for _, g := range snap.GPUs {
		if !g.Fabric.Valid {
			t.Fatalf("GPU %d: no fabric on an NVSwitch system", g.Index)
		}
		f := g.Fabric.V
		if f.State != gonvml.GPU_FABRIC_STATE_COMPLETED || nvml.FabricStateName(f.State) != "completed" ||
			f.Status != gonvml.SUCCESS || f.CliqueID != 1 {
			t.Errorf("GPU %d fabric %+v", g.Index, f)
		}
		if f.ClusterUUID != "5a1e7d2c-410b-4e9a-8f31-6c02d4e57710" {
			t.Errorf("cluster uuid %q", f.ClusterUUID)
		}
		want := map[string]bool{"degraded_bandwidth": false, "route_recovery_in_progress": false,
			"route_unhealthy": false, "access_timeout_recovery_in_progress": false, "incorrect_configuration": false}
		if !maps.Equal(f.Health, want) {
			t.Errorf("GPU %d health %v, want %v", g.Index, f.Health, want)
		}
		if !g.RecoveryAction.Valid || g.RecoveryAction.V != 0 {
			t.Errorf("GPU %d recovery action %+v, want 0 (none)", g.Index, g.RecoveryAction)
		}
	}
}

func TestFabricHealthDecode(t *testing.T) {
	for _, c := range []struct {
		mask uint32
		want map[string]bool
	}{
		{0, map[string]bool{}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE, map[string]bool{"degraded_bandwidth": true}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE << 2, map[string]bool{"route_recovery_in_progress": true}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE << 4, map[string]bool{"route_unhealthy": false}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE << 6, map[string]bool{"access_timeout_recovery_in_progress": true}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS << 8, map[string]bool{"incorrect_configuration": true}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE << 8, map[string]bool{"incorrect_configuration": false}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_FALSE << 12, map[string]bool{"partition_not_assigned": true}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_TRUE << 12, map[string]bool{"partition_not_assigned": false}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED << 14, map[string]bool{"fabric_manager_disconnected": true}},
		{gonvml.GPU_FABRIC_HEALTH_MASK_GFM_STATE_CONNECTED << 14, map[string]bool{"fabric_manager_disconnected": false}},
	} {
		if got := nvml.DecodeFabricHealth(c.mask); !maps.Equal(got, c.want) {
			t.Errorf("mask %#x: %v, want %v", c.mask, got, c.want)
		}
	}
	for name := range nvml.DecodeFabricHealth(0xffffffff) {
		found := false
		for _, r := range nvml.FabricHealthReasons {
			found = found || r == name
		}
		if !found {
			t.Errorf("decoded reason %q not in FabricHealthReasons", name)
		}
	}
}

func TestFabricNotStartedAndRecoveryReset(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	m.Update(func() {
		m.GPUs[3].Fabric.State = gonvml.GPU_FABRIC_STATE_NOT_STARTED
		m.GPUs[3].Fabric.HealthMask = gonvml.GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE
		m.GPUs[5].Fields[nvmlmodel.FieldKey{ID: gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION}] = float64(gonvml.GPU_RECOVERY_ACTION_GPU_RESET)
	})
	snap := sample(t, nvml.NewReader(m, "", nil))
	f := snap.GPUs[3].Fabric
	if !f.Valid || nvml.FabricStateName(f.V.State) != "not_started" || !f.V.Health["fabric_manager_disconnected"] {
		t.Errorf("GPU 3 fabric %+v", f)
	}
	if a := snap.GPUs[5].RecoveryAction; !a.Valid || nvml.RecoveryActionNames[a.V] != "gpu_reset" {
		t.Errorf("GPU 5 recovery action %+v", a)
	}
}

// TestFabricUnsupportedQuiet: a GPU without a fabric (NOT_SUPPORTED, the
// call missing from the library, or state NOT_SUPPORTED) and a driver
// without the recovery action field leave both absent, with no error.
func TestFabricUnsupportedQuiet(t *testing.T) {
	for name, set := range map[string]func(g *nvmlmodel.GPU){
		"not supported":      func(g *nvmlmodel.GPU) { g.Fabric = nil },
		"function not found": func(g *nvmlmodel.GPU) { g.Errors["GetGpuFabricInfoV"] = gonvml.ERROR_FUNCTION_NOT_FOUND },
		"state not supported": func(g *nvmlmodel.GPU) {
			g.Fabric = &gonvml.GpuFabricInfo_v3{Version: 3, State: gonvml.GPU_FABRIC_STATE_NOT_SUPPORTED}
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := nvmlmodel.NewDGXH100()
			m.Update(func() {
				for _, g := range m.GPUs {
					set(g)
					delete(g.Fields, nvmlmodel.FieldKey{ID: gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION})
				}
			})
			r := nvml.NewReader(m, "", nil, nvml.WithSlowInterval(0))
			for range 2 {
				snap := sample(t, r)
				for _, g := range snap.GPUs {
					if g.Fabric.Valid || g.RecoveryAction.Valid {
						t.Errorf("GPU %d: fabric %+v recovery %+v, want absent", g.Index, g.Fabric, g.RecoveryAction)
					}
				}
			}
		})
	}
}

// TestFabricErrorCounted: another error is counted, and the value absent.
func TestFabricErrorCounted(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	m.Update(func() { m.GPUs[0].Errors["GetGpuFabricInfoV"] = gonvml.ERROR_UNKNOWN })
	snap, err := nvml.NewReader(m, "", nil).Sample(t.Context())
	if err == nil {
		t.Error("no error for a failed fabric call")
	}
	if snap == nil || snap.GPUs[0].Fabric.Valid || !snap.GPUs[1].Fabric.Valid {
		t.Errorf("snapshot %v", snap)
	}
}

// TestFabricNoSwitches: GPUs joined without NVSwitch have no fabric.
func TestFabricNoSwitches(t *testing.T) {
	snap := sample(t, nvml.NewReader(nvmlmodel.NewH200Pair(), "", nil))
	for _, g := range snap.GPUs {
		if g.Fabric.Valid || !g.RecoveryAction.Valid {
			t.Errorf("GPU %d fabric %+v recovery %+v", g.Index, g.Fabric, g.RecoveryAction)
		}
	}
}

// plainLibrary hides the model's FabricSource: the reader looks the
// fabric calls up among syms.
type plainLibrary struct {
	gonvml.Interface
	syms map[string]bool
}

func (l plainLibrary) Extensions() gonvml.ExtendedInterface { return l }

func (l plainLibrary) LookupSymbol(name string) error {
	if l.syms[name] {
		return nil
	}
	return errors.New("no symbol " + name)
}

// TestFabricNoSymbol: a library without either fabric call is never
// called for it (that would kill the process): the value is absent.
func TestFabricNoSymbol(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	snap := sample(t, nvml.NewReader(plainLibrary{m, nil}, "", nil))
	for _, g := range snap.GPUs {
		if g.Fabric.Valid {
			t.Errorf("GPU %d fabric %+v, want absent", g.Index, g.Fabric)
		}
	}
}

// TestFabricV1Only: a library with only the unversioned call answers
// state, status, clique and cluster, and no health.
func TestFabricV1Only(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	for _, g := range m.GPUs {
		g.GetGpuFabricInfoFunc = func() (gonvml.GpuFabricInfo, gonvml.Return) {
			return gonvml.GpuFabricInfo{CliqueId: 7, State: gonvml.GPU_FABRIC_STATE_IN_PROGRESS,
				Status: uint32(gonvml.ERROR_NOT_READY)}, gonvml.SUCCESS
		}
	}
	snap := sample(t, nvml.NewReader(plainLibrary{m, map[string]bool{"nvmlDeviceGetGpuFabricInfo": true}}, "", nil))
	for _, g := range snap.GPUs {
		f := g.Fabric
		if !f.Valid || f.V.State != gonvml.GPU_FABRIC_STATE_IN_PROGRESS || f.V.CliqueID != 7 ||
			f.V.Status != gonvml.ERROR_NOT_READY || f.V.Health != nil {
			t.Errorf("GPU %d fabric %+v", g.Index, f)
		}
	}
}
