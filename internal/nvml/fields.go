package nvml

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gpulink/gpulink_exporter/internal/sampler"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Counters that NVML exposes only as field values are read in one batched
// call per GPU rather than one call each.

// throttleFields are the clock event reasons NVML keeps time for, in
// nanoseconds. The fallback policy is read through the older violation
// status call on drivers without the field.
var throttleFields = []struct {
	reason   string
	field    uint32
	fallback nvml.PerfPolicyType
}{
	{"sw_power_cap", nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, nvml.PERF_POLICY_POWER},
	{"sync_boost", nvml.FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, nvml.PERF_POLICY_SYNC_BOOST},
	{"sw_thermal_slowdown", nvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, nvml.PERF_POLICY_THERMAL},
	{"hw_thermal_slowdown", nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, -1},
	{"hw_power_brake_slowdown", nvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, -1},
}

// nvlinkErrorFields are the per-link error counters as field values, scope
// the link. Batched they cost a quarter of one GetNvLinkErrorCounter call
// each; readNVLinkErrorCalls fills in what a driver lacks.
var nvlinkErrorFields = []struct {
	name string
	id   uint32
}{
	{"crc_flit", nvml.FI_DEV_NVLINK_ERROR_DL_CRC},
	{"crc_data", nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0},
	{"replay", nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY},
	{"recovery", nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY},
}

// maxFieldsPerCall keeps each GetFieldValues request small; NVML documents
// no limit but drivers have differed.
const maxFieldsPerCall = 64

// fieldRequest is one field to read and where its value goes.
type fieldRequest struct {
	id    uint32
	scope uint32
	what  string
	set   func(float64)
}

func readFields(rd *read, h nvml.Device, g *GPUState) {
	var reqs []fieldRequest
	add := func(id, scope uint32, what string, set func(float64)) {
		reqs = append(reqs, fieldRequest{id, scope, what, set})
	}
	add(nvml.FI_DEV_MEMORY_TEMP, 0, "memory temperature", func(v float64) { g.MemoryTemperature = sampler.Some(v) })
	g.Throttle.Seconds = map[string]float64{}
	for _, t := range throttleFields {
		reason := t.reason
		add(t.field, 0, "clock event time "+reason, func(v float64) { g.Throttle.Seconds[reason] = v / 1e9 })
	}
	add(nvml.FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, 0, "PCIe correctable errors", func(v float64) { g.PCIe.CorrectableErrors = sampler.Some(v) })
	for i := range g.NVLinks {
		link := &g.NVLinks[i]
		scope := uint32(link.Link)
		add(nvml.FI_DEV_NVLINK_GET_SPEED, scope, "NVLink speed", func(v float64) {
			if v > 0 { // a down link reports 0: no speed, not a slow one
				link.SpeedBytes = sampler.Some(v * 1e6) // MBps
			}
		})
		add(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scope, "NVLink TX bytes", func(v float64) { link.TransmitBytes = sampler.Some(v * 1024) })
		add(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, scope, "NVLink RX bytes", func(v float64) { link.ReceiveBytes = sampler.Some(v * 1024) })
		for _, f := range nvlinkErrorFields {
			name := f.name
			add(f.id, scope, "NVLink "+name+" errors (field)", func(v float64) { link.Errors[name] = v })
		}
	}

	for start := 0; start < len(reqs); start += maxFieldsPerCall {
		batch := reqs[start:min(start+maxFieldsPerCall, len(reqs))]
		fv := make([]nvml.FieldValue, len(batch))
		for i, q := range batch {
			fv[i] = nvml.FieldValue{FieldId: q.id, ScopeId: q.scope}
		}
		if !rd.ok("field values", h.GetFieldValues(fv)) {
			if rd.lost {
				return
			}
			continue
		}
		for i, q := range batch {
			if !rd.ok(q.what, nvml.Return(fv[i].NvmlReturn)) {
				continue
			}
			v, ok := fieldFloat(fv[i])
			if !ok {
				rd.errs.Add(fmt.Errorf("GPU %d %s: unknown value type %d", rd.d.id.Index, q.what, fv[i].ValueType))
				continue
			}
			q.set(v)
		}
	}

	// Older drivers keep some of the reasons' time only as violation status.
	for _, t := range throttleFields {
		if _, have := g.Throttle.Seconds[t.reason]; have || t.fallback < 0 {
			continue
		}
		if v, ret := h.GetViolationStatus(t.fallback); rd.ok("violation status "+t.reason, ret) {
			g.Throttle.Seconds[t.reason] = float64(v.ViolationTime) / 1e9
		}
	}
}

// fieldFloat decodes a field value by its type.
func fieldFloat(f nvml.FieldValue) (float64, bool) {
	b := f.Value[:]
	le := binary.LittleEndian
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(le.Uint64(b)), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(le.Uint32(b)), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(le.Uint64(b)), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(le.Uint64(b))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(le.Uint32(b))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(le.Uint16(b)), true
	}
	return 0, false
}

// FieldValueOf encodes v as NVML would, for fakes and tests.
func FieldValueOf(id, scope uint32, t nvml.ValueType, v float64) nvml.FieldValue {
	f := nvml.FieldValue{FieldId: id, ScopeId: scope, ValueType: uint32(t)}
	le := binary.LittleEndian
	switch t {
	case nvml.VALUE_TYPE_DOUBLE:
		le.PutUint64(f.Value[:], math.Float64bits(v))
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		le.PutUint32(f.Value[:], uint32(v))
	case nvml.VALUE_TYPE_SIGNED_INT:
		le.PutUint32(f.Value[:], uint32(int32(v)))
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		le.PutUint16(f.Value[:], uint16(v))
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		le.PutUint64(f.Value[:], uint64(int64(v)))
	default:
		le.PutUint64(f.Value[:], uint64(v))
	}
	return f
}
