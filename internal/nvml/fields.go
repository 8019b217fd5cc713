package nvml

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// Values NVML offers as field values are read in one GetFieldValues call
// per GPU and tier rather than one call each. Where a GPU does not support
// a field, the single call that gives the same value (its fallback) is
// asked instead, from then on.

// fieldSpec is one value read as a field.
type fieldSpec struct {
	id uint32
	// perLink fields are read once per NVLink, the link as scope.
	perLink bool
	// allLinks fields are a GPU's value summed over its NVLinks (scope
	// allLinks), asked only of a GPU that has NVLinks.
	allLinks bool
	// what names the field in logs and errors, and in the GPU's record of
	// what it does not support.
	what string
	set  func(g *GPUState, link int, v float64)
	// fb indexes fallbacks: the single call for the value; -1 for none.
	fb int
}

// fallbacks are the single calls that stand in for unsupported fields.
// link is -1 for a GPU's value.
var fallbacks []func(rd *read, h nvml.Device, g *GPUState, link int)

func fallback(f func(rd *read, h nvml.Device, g *GPUState, link int)) int {
	fallbacks = append(fallbacks, f)
	return len(fallbacks) - 1
}

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
// each; the calls stand in where a driver lacks the field (data CRC on
// driver 580).
var nvlinkErrorFields = []struct {
	name    string
	id      uint32
	counter nvml.NvLinkErrorCounter
}{
	{"crc_flit", nvml.FI_DEV_NVLINK_ERROR_DL_CRC, nvml.NVLINK_ERROR_DL_CRC_FLIT},
	{"crc_data", nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, nvml.NVLINK_ERROR_DL_CRC_DATA},
	{"replay", nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, nvml.NVLINK_ERROR_DL_REPLAY},
	{"recovery", nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, nvml.NVLINK_ERROR_DL_RECOVERY},
}

// NVLinkErrorTypes are the NVLink error counters, in export order.
var NVLinkErrorTypes = []string{"crc_flit", "crc_data", "replay", "recovery"}

// P2PCapabilities are the peer-to-peer capabilities read per GPU pair.
var P2PCapabilities = []string{"read", "write", "nvlink", "atomics"}

// The tiers' fields; built by init, with their fallbacks.
var fastFields, slowFields []fieldSpec

// fastTierKey picks one of the fast tier's field lists: NVLink states as
// fields (else calls), and each link's data counters.
type fastTierKey struct{ linkStates, linkTraffic bool }

var fastTiers = map[fastTierKey][]fieldSpec{}

func init() {
	fastFields = []fieldSpec{
		// GetPowerUsage answers the 1 s average from Ampere on (bar
		// GA100), which is this field; before, where the field is not
		// supported, it answers instant power as the call did.
		{id: nvml.FI_DEV_POWER_AVERAGE, what: "power usage (field)",
			set: func(g *GPUState, _ int, v float64) { g.Power = sampler.Some(v / 1000) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, "power usage", h.GetPowerUsage); ok {
					g.Power = sampler.Some(float64(v) / 1000)
				}
			})},
		{id: nvml.FI_DEV_POWER_CURRENT_LIMIT, what: "enforced power limit (field)",
			set: func(g *GPUState, _ int, v float64) { g.PowerLimit = sampler.Some(v / 1000) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, "enforced power limit", h.GetEnforcedPowerLimit); ok {
					g.PowerLimit = sampler.Some(float64(v) / 1000)
				}
			})},
		{id: nvml.FI_DEV_TOTAL_ENERGY_CONSUMPTION, what: "energy (field)",
			set: func(g *GPUState, _ int, v float64) { g.Energy = sampler.Some(v / 1000) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, "energy", h.GetTotalEnergyConsumption); ok {
					g.Energy = sampler.Some(float64(v) / 1000)
				}
			})},
		{id: nvml.FI_DEV_MEMORY_TEMP, what: "memory temperature", fb: -1,
			set: func(g *GPUState, _ int, v float64) { g.MemoryTemperature = sampler.Some(v) }},
		// Drivers before 570 do not know the field: NOT_SUPPORTED,
		// quietly absent.
		{id: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION, what: "GPU recovery action", fb: -1,
			set: func(g *GPUState, _ int, v float64) { g.RecoveryAction = sampler.Some(int(v)) }},
	}
	for _, t := range throttleFields {
		reason, policy := t.reason, t.fallback
		fb := -1
		if policy >= 0 {
			// Older drivers keep some of the reasons' time only as
			// violation status.
			fb = fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, "violation status "+reason, func() (nvml.ViolationTime, nvml.Return) { return h.GetViolationStatus(policy) }); ok {
					g.Throttle.Seconds[reason] = float64(v.ViolationTime) / 1e9
				}
			})
		}
		fastFields = append(fastFields, fieldSpec{id: t.field, what: "clock event time " + reason, fb: fb,
			set: func(g *GPUState, _ int, v float64) { g.Throttle.Seconds[reason] = v / 1e9 }})
	}
	// NVLink data counters: the GPU's total over its links every sample,
	// one field each (scope allLinks); each link's only when asked for
	// (WithLinkTraffic). On two H100s with 18 links each, the 36 per-link
	// fields cost 26.7 ms of a GPU's 33.7 ms fast batch, the two totals
	// 1.3 ms (bench/RESULTS.md, 2026-11-25, third session).
	fastFields = append(fastFields,
		fieldSpec{id: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, allLinks: true, what: "NVLink TX bytes, all links",
			set: func(g *GPUState, _ int, v float64) { g.NVLinkTransmitBytes = sampler.Some(v * 1024) },
			fb:  fallback(sumOfLinks(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, "NVLink TX bytes", func(g *GPUState) *sampler.Opt[float64] { return &g.NVLinkTransmitBytes }))},
		fieldSpec{id: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, allLinks: true, what: "NVLink RX bytes, all links",
			set: func(g *GPUState, _ int, v float64) { g.NVLinkReceiveBytes = sampler.Some(v * 1024) },
			fb:  fallback(sumOfLinks(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, "NVLink RX bytes", func(g *GPUState) *sampler.Opt[float64] { return &g.NVLinkReceiveBytes }))},
	)
	linkTraffic := []fieldSpec{
		{id: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, perLink: true, what: "NVLink TX bytes", fb: -1,
			set: func(g *GPUState, l int, v float64) { g.NVLinks[l].TransmitBytes = sampler.Some(v * 1024) }},
		{id: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, perLink: true, what: "NVLink RX bytes", fb: -1,
			set: func(g *GPUState, l int, v float64) { g.NVLinks[l].ReceiveBytes = sampler.Some(v * 1024) }},
	}
	linkState := fieldSpec{id: nvml.FI_DEV_NVLINK_GET_STATE, perLink: true, what: "NVLink state (field)",
		set: func(g *GPUState, l int, v float64) { g.NVLinks[l].Active = v == nvml.NVLINK_STATE_ACTIVE },
		fb:  fallback(func(rd *read, h nvml.Device, g *GPUState, l int) { readNVLinkState(rd, h, g.NVLinks, l) }),
	}
	for _, states := range []bool{false, true} {
		for _, links := range []bool{false, true} {
			var tier []fieldSpec
			if states {
				tier = append(tier, linkState)
			}
			tier = append(tier, fastFields...)
			if links {
				tier = append(tier, linkTraffic...)
			}
			fastTiers[fastTierKey{states, links}] = tier
		}
	}

	ecc := func(id uint32, what string, typ nvml.MemoryErrorType, kind nvml.EccCounterType, dst func(*ECC) *sampler.Opt[float64]) fieldSpec {
		return fieldSpec{id: id, what: what + " (field)",
			set: func(g *GPUState, _ int, v float64) { *dst(&g.ECC) = sampler.Some(v) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, what, func() (uint64, nvml.Return) { return h.GetTotalEccErrors(typ, kind) }); ok {
					*dst(&g.ECC) = sampler.Some(float64(v))
				}
			})}
	}
	remap := fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
		if !rd.asks("remapped rows", -1) {
			return
		}
		e := &g.ECC
		if corr, unc, pending, failed, ret := h.GetRemappedRows(); rd.ok("remapped rows", ret) {
			e.RemappedCorrectable = sampler.Some(float64(corr))
			e.RemappedUncorrectable = sampler.Some(float64(unc))
			e.RemapPending = sampler.Some(pending)
			e.RemapFailed = sampler.Some(failed)
		}
	})
	retired := func(id uint32, what string, cause nvml.PageRetirementCause, dst func(*ECC) *sampler.Opt[float64]) fieldSpec {
		return fieldSpec{id: id, what: what + " (field)",
			set: func(g *GPUState, _ int, v float64) { *dst(&g.ECC) = sampler.Some(v) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if p, ok := get(rd, what, func() ([]uint64, nvml.Return) { return h.GetRetiredPages(cause) }); ok {
					*dst(&g.ECC) = sampler.Some(float64(len(p)))
				}
			})}
	}
	slowFields = []fieldSpec{
		ecc(nvml.FI_DEV_ECC_SBE_VOL_TOTAL, "ECC corrected volatile", nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC,
			func(e *ECC) *sampler.Opt[float64] { return &e.CorrectedVolatile }),
		ecc(nvml.FI_DEV_ECC_DBE_VOL_TOTAL, "ECC uncorrected volatile", nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC,
			func(e *ECC) *sampler.Opt[float64] { return &e.UncorrectedVolatile }),
		ecc(nvml.FI_DEV_ECC_SBE_AGG_TOTAL, "ECC corrected aggregate", nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC,
			func(e *ECC) *sampler.Opt[float64] { return &e.CorrectedAggregate }),
		ecc(nvml.FI_DEV_ECC_DBE_AGG_TOTAL, "ECC uncorrected aggregate", nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC,
			func(e *ECC) *sampler.Opt[float64] { return &e.UncorrectedAggregate }),
		{id: nvml.FI_DEV_REMAPPED_COR, what: "remapped rows correctable (field)", fb: remap,
			set: func(g *GPUState, _ int, v float64) { g.ECC.RemappedCorrectable = sampler.Some(v) }},
		{id: nvml.FI_DEV_REMAPPED_UNC, what: "remapped rows uncorrectable (field)", fb: remap,
			set: func(g *GPUState, _ int, v float64) { g.ECC.RemappedUncorrectable = sampler.Some(v) }},
		{id: nvml.FI_DEV_REMAPPED_PENDING, what: "remapped rows pending (field)", fb: remap,
			set: func(g *GPUState, _ int, v float64) { g.ECC.RemapPending = sampler.Some(v != 0) }},
		{id: nvml.FI_DEV_REMAPPED_FAILURE, what: "remapped rows failure (field)", fb: remap,
			set: func(g *GPUState, _ int, v float64) { g.ECC.RemapFailed = sampler.Some(v != 0) }},
		retired(nvml.FI_DEV_RETIRED_SBE, "retired pages (single bit)", nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
			func(e *ECC) *sampler.Opt[float64] { return &e.RetiredSingleBit }),
		retired(nvml.FI_DEV_RETIRED_DBE, "retired pages (double bit)", nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
			func(e *ECC) *sampler.Opt[float64] { return &e.RetiredDoubleBit }),
		{id: nvml.FI_DEV_RETIRED_PENDING, what: "retired pages pending (field)",
			set: func(g *GPUState, _ int, v float64) { g.ECC.RetiredPending = sampler.Some(v != 0) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, "retired pages pending", h.GetRetiredPagesPendingStatus); ok {
					g.ECC.RetiredPending = sampler.Some(v == nvml.FEATURE_ENABLED)
				}
			})},
		{id: nvml.FI_DEV_PCIE_REPLAY_COUNTER, what: "PCIe replay counter (field)",
			set: func(g *GPUState, _ int, v float64) { g.PCIe.Replays = sampler.Some(v) },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, _ int) {
				if v, ok := get(rd, "PCIe replay counter", h.GetPcieReplayCounter); ok {
					g.PCIe.Replays = sampler.Some(float64(v))
				}
			})},
		{id: nvml.FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, what: "PCIe correctable errors", fb: -1,
			set: func(g *GPUState, _ int, v float64) { g.PCIe.CorrectableErrors = sampler.Some(v) }},
	}
	for _, f := range nvlinkErrorFields {
		name, counter, what := f.name, f.counter, "NVLink "+f.name+" errors"
		slowFields = append(slowFields, fieldSpec{id: f.id, perLink: true, what: what + " (field)",
			set: func(g *GPUState, l int, v float64) { g.NVLinks[l].Errors[name] = v },
			fb: fallback(func(rd *read, h nvml.Device, g *GPUState, l int) {
				if v, ok := getAt(rd, what, l, func() (uint64, nvml.Return) { return h.GetNvLinkErrorCounter(l, counter) }); ok {
					g.NVLinks[l].Errors[name] = float64(v)
				}
			})})
	}
}

// allLinks is the scope that asks NVML for a GPU's value summed over
// every NVLink ("A scopeId of UINT_MAX returns aggregate value summed up
// across all links", nvml.h).
const allLinks = math.MaxUint32

// sumOfLinks is the fallback of an all-links field a driver does not
// support: the per-link fields in one call, summed. A sum that misses a
// link is not set, so that the counter never falls back.
func sumOfLinks(id uint32, what string, dst func(*GPUState) *sampler.Opt[float64]) func(rd *read, h nvml.Device, g *GPUState, link int) {
	return func(rd *read, h nvml.Device, g *GPUState, _ int) {
		if len(g.NVLinks) == 0 || !rd.asks(what, -1) {
			return
		}
		fv := make([]nvml.FieldValue, len(g.NVLinks))
		for l := range fv {
			fv[l] = nvml.FieldValue{FieldId: id, ScopeId: uint32(l)}
		}
		if !rd.ok(what, h.GetFieldValues(fv)) {
			return
		}
		sum := 0.0
		for l := range fv {
			if !rd.okAt(what, l, nvml.Return(fv[l].NvmlReturn)) {
				return
			}
			v, ok := fieldFloat(fv[l])
			if !ok {
				rd.errs.Add(fmt.Errorf("GPU %d %s link %d: unknown value type %d", rd.d.id.Index, what, l, fv[l].ValueType))
				return
			}
			sum += v
		}
		*dst(g) = sampler.Some(sum * 1024)
	}
}

// maxFieldsPerCall keeps each GetFieldValues request small; NVML documents
// no limit but drivers have differed.
const maxFieldsPerCall = 64

// fieldBatch is one tier's GetFieldValues request for one GPU, kept from
// sample to sample so that a sample allocates none of it.
type fieldBatch struct {
	fv   []nvml.FieldValue
	reqs []fieldReq
	// need is, per fallback, the links (bit link+1; bit 0 the GPU) whose
	// value the batch did not give.
	need []uint64
}

// fieldReq says what fv[i] is: the spec and the link.
type fieldReq struct {
	spec, link int32
}

func (b *fieldBatch) fallBack(s *fieldSpec, link int) {
	if s.fb >= 0 && link < 63 {
		b.need[s.fb] |= 1 << (link + 1)
	}
}

// readFieldTier reads specs into g: the supported fields in batches, then
// the fallback calls for fields the GPU does not support, or all of them
// when the batch call itself failed. A field that answers another error is
// counted and not asked again through its call.
func readFieldTier(rd *read, h nvml.Device, g *GPUState, specs []fieldSpec) {
	if rd.lost {
		return
	}
	b := &rd.d.batch
	b.fv, b.reqs = b.fv[:0], b.reqs[:0]
	if len(b.need) != len(fallbacks) {
		b.need = make([]uint64, len(fallbacks))
	}
	clear(b.need)
	batched := rd.asks("field values", -1)
	for si := range specs {
		s := &specs[si]
		first, last := -1, -1
		switch {
		case s.perLink:
			first, last = 0, len(g.NVLinks)-1
		case s.allLinks && len(g.NVLinks) == 0:
			continue
		}
		for link := first; link <= last; link++ {
			if !batched || !rd.asks(s.what, link) {
				b.fallBack(s, link)
				continue
			}
			scope := uint32(0)
			switch {
			case link >= 0:
				scope = uint32(link)
			case s.allLinks:
				scope = allLinks
			}
			b.reqs = append(b.reqs, fieldReq{int32(si), int32(link)})
			b.fv = append(b.fv, nvml.FieldValue{FieldId: s.id, ScopeId: scope})
		}
	}
	for start := 0; start < len(b.fv); start += maxFieldsPerCall {
		end := min(start+maxFieldsPerCall, len(b.fv))
		fv, reqs := b.fv[start:end], b.reqs[start:end]
		if !rd.ok("field values", h.GetFieldValues(fv)) {
			if rd.lost {
				return
			}
			for _, q := range reqs {
				b.fallBack(&specs[q.spec], int(q.link))
			}
			continue
		}
		for i, q := range reqs {
			s, link := &specs[q.spec], int(q.link)
			ret := nvml.Return(fv[i].NvmlReturn)
			if !rd.okAt(s.what, link, ret) {
				if rd.lost {
					return
				}
				if unsupported(ret) {
					b.fallBack(s, link)
				}
				continue
			}
			v, ok := fieldFloat(fv[i])
			if !ok {
				rd.errs.Add(fmt.Errorf("GPU %d %s: unknown value type %d", rd.d.id.Index, s.what, fv[i].ValueType))
				continue
			}
			s.set(g, link, v)
		}
	}
	for fb, links := range b.need {
		for ; links != 0; links &= links - 1 {
			fallbacks[fb](rd, h, g, bits.TrailingZeros64(links)-1)
			if rd.lost {
				return
			}
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
