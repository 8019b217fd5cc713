//go:build gpu

package nvml

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealFabricAndRecovery prints what the real GPU answers for the fabric
// and recovery action calls, supported or not, to compare with
// `nvidia-smi -q` (sections "Fabric" and "GPU Recovery Action"):
//
//	.device/gpu.test -test.v -test.run RealFabricAndRecovery; nvidia-smi -q | grep -A8 -i -e fabric -e recovery
func TestRealFabricAndRecovery(t *testing.T) {
	r := realReader(t)
	lib := r.lib
	for _, s := range []string{"nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"} {
		t.Logf("symbol %s: present %v", s, lookupSymbol(lib, s))
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("device count: %v", ret)
	}
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Errorf("GPU %d handle: %v", i, ret)
			continue
		}
		if lookupSymbol(lib, "nvmlDeviceGetGpuFabricInfoV") {
			v3, ret := h.GetGpuFabricInfoV().V3()
			t.Logf("GPU %d fabric V3: %v state %d (%s) status %d (%v) clique %d cluster %s health mask %#x summary %d",
				i, ret, v3.State, FabricStateName(int(v3.State)), v3.Status, nvml.Return(v3.Status), v3.CliqueId,
				formatUUID(v3.ClusterUuid), v3.HealthMask, v3.HealthSummary)
			if ret == nvml.SUCCESS {
				t.Logf("GPU %d fabric health decoded: %v", i, DecodeFabricHealth(v3.HealthMask))
			}
			v2, ret := h.GetGpuFabricInfoV().V2()
			t.Logf("GPU %d fabric V2: %v state %d status %d clique %d health mask %#x", i, ret, v2.State, v2.Status, v2.CliqueId, v2.HealthMask)
		}
		if lookupSymbol(lib, "nvmlDeviceGetGpuFabricInfo") {
			v1, ret := h.GetGpuFabricInfo()
			t.Logf("GPU %d fabric V1: %v state %d status %d clique %d cluster %s", i, ret, v1.State, v1.Status, v1.CliqueId, formatUUID(v1.ClusterUuid))
		}
		fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
		ret = h.GetFieldValues(fv)
		v, ok := fieldFloat(fv[0])
		t.Logf("GPU %d recovery action field %d: call %v field %v type %d value %v (decoded %v)",
			i, nvml.FI_DEV_GET_GPU_RECOVERY_ACTION, ret, nvml.Return(fv[0].NvmlReturn), fv[0].ValueType, v, ok)
	}
	snap, err := r.Sample(context.Background())
	if err != nil {
		t.Errorf("sample: %v", err)
	}
	for _, g := range snap.GPUs {
		t.Logf("reader: GPU %d fabric %+v recovery action %+v", g.Index, g.Fabric, g.RecoveryAction)
		if g.RecoveryAction.Valid && (g.RecoveryAction.V < 0 || g.RecoveryAction.V >= len(RecoveryActionNames)) {
			t.Errorf("GPU %d recovery action %d has no name", g.Index, g.RecoveryAction.V)
		}
	}
}
