package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Fabric is a GPU's NVLink fabric registration as NVML reports it
// (nvmlDeviceGetGpuFabricInfoV): Hopper and later on NVSwitch systems.
type Fabric struct {
	// State is nvmlGpuFabricState_t: 1 not started, 2 in progress, 3
	// completed (FabricStateNames). 0 (not supported) is never kept: the
	// whole Fabric is absent then.
	State int
	// Status is the registration's result, an nvml.Return (0: success);
	// meaningful once State is completed.
	Status nvml.Return
	// CliqueID and ClusterUUID say which NVLink domain the GPU joined.
	CliqueID    uint32
	ClusterUUID string
	// Health is the health mask decoded, by FabricHealthReasons name: true
	// where the reason applies. Reasons the GPU does not report are
	// absent; nil when the driver gives no mask (version 1 of the call).
	Health map[string]bool
}

// FabricStateNames names nvmlGpuFabricState_t values.
var FabricStateNames = []string{"not_supported", "not_started", "in_progress", "completed"}

// FabricStateName names a fabric state.
func FabricStateName(s int) string {
	if s >= 0 && s < len(FabricStateNames) {
		return FabricStateNames[s]
	}
	return "unknown"
}

// fabricHealthField is one field of nvmlGpuFabricInfo's health mask.
type fabricHealthField struct {
	name         string
	shift, width uint32
	// bad says whether a value (other than 0, not supported) means the
	// reason applies.
	bad func(v uint32) bool
}

// FabricHealthReasons are the health mask's reasons in export order.
var FabricHealthReasons = []string{
	"degraded_bandwidth", "route_recovery_in_progress", "route_unhealthy",
	"access_timeout_recovery_in_progress", "incorrect_configuration",
	"partition_not_assigned", "fabric_manager_disconnected",
}

var fabricHealthFields = []fabricHealthField{
	{"degraded_bandwidth", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW,
		func(v uint32) bool { return v == nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE }},
	{"route_recovery_in_progress", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY,
		func(v uint32) bool { return v == nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE }},
	{"route_unhealthy", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY,
		func(v uint32) bool { return v == nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE }},
	{"access_timeout_recovery_in_progress", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY,
		func(v uint32) bool { return v == nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE }},
	{"incorrect_configuration", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION,
		func(v uint32) bool { return v != nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE }},
	{"partition_not_assigned", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_PARTITION_ASSIGNED, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_PARTITION_ASSIGNED,
		func(v uint32) bool { return v == nvml.GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_FALSE }},
	{"fabric_manager_disconnected", nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_GFM_STATE,
		func(v uint32) bool { return v == nvml.GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED }},
}

// DecodeFabricHealth decodes nvmlGpuFabricInfo's health mask: per reason,
// whether it applies; reasons the mask says are not supported are absent.
// (The WIDTH constants are masks, not bit counts: 3 is two bits, 15 four.)
func DecodeFabricHealth(mask uint32) map[string]bool {
	h := make(map[string]bool, len(fabricHealthFields))
	for _, f := range fabricHealthFields {
		v := (mask >> f.shift) & f.width
		if v == 0 {
			continue
		}
		h[f.name] = f.bad(v)
	}
	return h
}

// RecoveryActionNames names nvmlDeviceGpuRecoveryAction_t values (the field
// FI_DEV_GET_GPU_RECOVERY_ACTION), by value.
var RecoveryActionNames = []string{
	"none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset",
	"recover_imex_domain", "bus_reset", "system_reboot",
}

// FabricSource is implemented by an nvml.Interface that answers the fabric
// call itself: go-nvml's mock cannot, as its versioned handler calls the
// real library. The simulated node's library implements it.
type FabricSource interface {
	GpuFabricInfo(h nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return)
}

// fabricCall is which fabric call the loaded library has.
type fabricCall int

const (
	fabricUnknown fabricCall = iota
	fabricV                  // nvmlDeviceGetGpuFabricInfoV
	fabricV1                 // nvmlDeviceGetGpuFabricInfo only
	fabricNone
)

// lookupSymbol asks the library whether it has a symbol; a library that
// cannot say (a mock) is taken to lack it.
func lookupSymbol(lib nvml.Interface, name string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return lib.Extensions().LookupSymbol(name) == nil
}

// fabricInfo asks the GPU's fabric info through the newest call the
// library has: V3, V2 where the driver knows no V3, V1 where the library
// has no versioned call; FUNCTION_NOT_FOUND where it has none. Calling a
// symbol the library lacks would kill the process, so it is looked up
// first, once.
func (r *Reader) fabricInfo(h nvml.Device) (nvml.GpuFabricInfo_v3, nvml.Return) {
	if s, ok := r.lib.(FabricSource); ok {
		return s.GpuFabricInfo(h)
	}
	if r.fabricCall == fabricUnknown {
		switch {
		case lookupSymbol(r.lib, "nvmlDeviceGetGpuFabricInfoV"):
			r.fabricCall = fabricV
		case lookupSymbol(r.lib, "nvmlDeviceGetGpuFabricInfo"):
			r.fabricCall = fabricV1
		default:
			r.fabricCall = fabricNone
		}
	}
	switch r.fabricCall {
	case fabricV:
		v3, ret := h.GetGpuFabricInfoV().V3()
		if ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			return v3, ret
		}
		v2, ret := h.GetGpuFabricInfoV().V2()
		return nvml.GpuFabricInfo_v3{Version: v2.Version, ClusterUuid: v2.ClusterUuid, Status: v2.Status, CliqueId: v2.CliqueId,
			State: v2.State, HealthMask: v2.HealthMask}, ret
	case fabricV1:
		v1, ret := h.GetGpuFabricInfo()
		// Version 1 has no health mask: Version 0 says so.
		return nvml.GpuFabricInfo_v3{ClusterUuid: v1.ClusterUuid, Status: v1.Status, CliqueId: v1.CliqueId,
			State: v1.State}, ret
	}
	return nvml.GpuFabricInfo_v3{}, nvml.ERROR_FUNCTION_NOT_FOUND
}

// readFabric reads the GPU's fabric info into g; a GPU or driver without
// one leaves g.Fabric absent, quietly.
func (r *Reader) readFabric(rd *read, h nvml.Device, g *GPUState) {
	const what = "fabric info"
	if !rd.asks(what, -1) {
		return
	}
	info, ret := r.fabricInfo(h)
	if !rd.ok(what, ret) {
		return
	}
	if info.State == nvml.GPU_FABRIC_STATE_NOT_SUPPORTED {
		rd.ok(what, nvml.ERROR_NOT_SUPPORTED) // remembered: not asked again
		return
	}
	f := Fabric{State: int(info.State), Status: nvml.Return(info.Status), CliqueID: info.CliqueId,
		ClusterUUID: formatUUID(info.ClusterUuid)}
	if info.Version != 0 {
		f.Health = DecodeFabricHealth(info.HealthMask)
	}
	g.Fabric = sampler.Some(f)
}

// formatUUID writes 16 bytes as a UUID, 8-4-4-4-12 hex digits.
func formatUUID(b [16]uint8) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
