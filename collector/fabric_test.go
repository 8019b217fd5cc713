package collector_test

import (
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

func TestFabricAndRecoveryMetrics(t *testing.T) {
	m := nvmlmodel.NewDGXH100()
	m.Update(func() {
		m.GPUs[1].Fabric.State = gonvml.GPU_FABRIC_STATE_IN_PROGRESS
		m.GPUs[1].Fabric.HealthMask |= gonvml.GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED << gonvml.GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE
		m.GPUs[2].Fields[nvmlmodel.FieldKey{ID: gonvml.FI_DEV_GET_GPU_RECOVERY_ACTION}] = float64(gonvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET)
	})
	body := newNode(t, m).scrape(t)
	g := func(i int) string {
		return `gpu="` + string(rune('0'+i)) + `",pci_bus_id="` + m.GPUs[i].PciBusID + `",uuid="` + m.GPUs[i].UUID + `"`
	}
	gr := func(i int, reason string) string {
		return `gpu="` + string(rune('0'+i)) + `",pci_bus_id="` + m.GPUs[i].PciBusID + `",reason="` + reason + `",uuid="` + m.GPUs[i].UUID + `"`
	}
	for _, want := range []string{
		`gpulink_gpu_fabric_state{` + g(0) + `} 3`,
		`gpulink_gpu_fabric_state{` + g(1) + `} 2`,
		`gpulink_gpu_fabric_status{` + g(0) + `} 0`,
		`gpulink_gpu_fabric_info{clique_id="1",cluster_uuid="5a1e7d2c-410b-4e9a-8f31-6c02d4e57710",` + g(0) + `} 1`,
		`gpulink_gpu_fabric_health{` + gr(0, "route_unhealthy") + `} 0`,
		`gpulink_gpu_fabric_health{` + gr(1, "fabric_manager_disconnected") + `} 1`,
		`gpulink_gpu_recovery_action{` + g(0) + `} 0`,
		`gpulink_gpu_recovery_action{` + g(2) + `} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, `gpulink_gpu_fabric_health{`+gr(0, "fabric_manager_disconnected")+`}`) {
		t.Error("a health reason the driver did not report is exported")
	}
}

func TestFabricAbsentWithoutSwitches(t *testing.T) {
	body := newNode(t, nvmlmodel.NewH200Pair()).scrape(t)
	if strings.Contains(body, "gpulink_gpu_fabric_state{") || strings.Contains(body, "gpulink_gpu_fabric_info{") {
		t.Error("fabric series on GPUs without a fabric")
	}
}
