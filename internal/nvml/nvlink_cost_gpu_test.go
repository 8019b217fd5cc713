//go:build gpu

package nvml

import (
	"sort"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealNVLinkFieldCost times each group of NVLink field values on GPU
// 0 alone, to tell which of them the fast tier's 33.7 ms per GPU (two
// H100s, NV18; 2.75 ms on an H100 with no NVLink) goes to, and whether the
// all-links throughput and the all-lanes error totals agree with the sums
// of the per-link values read beside them.
func TestRealNVLinkFieldCost(t *testing.T) {
	r := realReader(t)
	d := r.devices[0]
	h, n := d.handle, d.id.NVLinkCount
	if n == 0 {
		t.Skip("GPU 0 has no NVLink")
	}
	fields := func(scoped bool, ids ...uint32) []nvml.FieldValue {
		var fv []nvml.FieldValue
		for _, id := range ids {
			if !scoped {
				fv = append(fv, nvml.FieldValue{FieldId: id, ScopeId: allLinks})
				continue
			}
			for l := range n {
				fv = append(fv, nvml.FieldValue{FieldId: id, ScopeId: uint32(l)})
			}
		}
		return fv
	}
	var scalars []nvml.FieldValue
	for _, f := range fastFields {
		if !f.perLink && !f.allLinks {
			scalars = append(scalars, nvml.FieldValue{FieldId: f.id})
		}
	}
	tx, rx := uint32(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX), uint32(nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
	groups := []struct {
		name string
		fv   []nvml.FieldValue
	}{
		{"fast tier's scalar fields", scalars},
		{"one field, memory temperature", []nvml.FieldValue{{FieldId: nvml.FI_DEV_MEMORY_TEMP}}},
		{"TX throughput, per link", fields(true, tx)},
		{"TX and RX throughput, per link", fields(true, tx, rx)},
		{"TX throughput, link 0 only", []nvml.FieldValue{{FieldId: tx, ScopeId: 0}}},
		{"TX and RX throughput, all links (UINT_MAX)", fields(false, tx, rx)},
		{"error fields crc_flit, replay, recovery, per link", fields(true, nvml.FI_DEV_NVLINK_ERROR_DL_CRC, nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY)},
		{"error totals (38, 45, 52, 59)", []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL},
			{FieldId: nvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL}, {FieldId: nvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL},
			{FieldId: nvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL}}},
		{"state, per link", fields(true, nvml.FI_DEV_NVLINK_GET_STATE)},
	}
	for _, g := range groups {
		var took []time.Duration
		for range 7 {
			start := time.Now()
			if ret := h.GetFieldValues(g.fv); ret != nvml.SUCCESS {
				t.Errorf("%s: %v", g.name, ret)
			}
			took = append(took, time.Since(start))
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		var failed []string
		for _, f := range g.fv {
			if ret := nvml.Return(f.NvmlReturn); ret != nvml.SUCCESS {
				failed = append(failed, nvml.ErrorString(ret))
			}
		}
		t.Logf("%-52s %3d fields: median %8.3f ms  max %8.3f ms  (%d not read: %v)", g.name, len(g.fv),
			float64(took[3].Microseconds())/1000, float64(took[6].Microseconds())/1000, len(failed), failed)
	}
	calls := func() {
		for l := range n {
			_, _ = h.GetNvLinkErrorCounter(l, nvml.NVLINK_ERROR_DL_CRC_DATA)
		}
	}
	start := time.Now()
	calls()
	t.Logf("%-52s %3d calls:  %8.3f ms", "crc_data error counter calls", n, float64(time.Since(start).Microseconds())/1000)

	// The aggregate against the per-link sum, read back to back: idle
	// links move little, so they should agree to a few KiB.
	per, all := fields(true, tx, rx), fields(false, tx, rx)
	_ = h.GetFieldValues(per)
	_ = h.GetFieldValues(all)
	for i, name := range []string{"TX", "RX"} {
		var sum float64
		for _, f := range per[i*n : (i+1)*n] {
			v, _ := fieldFloat(f)
			sum += v
		}
		v, ok := fieldFloat(all[i])
		t.Logf("%s KiB: sum of links %.0f, all links %.0f (ok %v, ret %v)", name, sum, v, ok, nvml.Return(all[i].NvmlReturn))
	}
}
