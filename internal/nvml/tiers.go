package nvml

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sampler"
)

// readGPU reads GPU i in one sample: statics where not read yet, the fast
// tier, and the slow tier when it is due (else the last slow values).
func (r *Reader) readGPU(i int, now time.Time, errs *sampler.Tally) GPUState {
	d := r.devices[i]
	if d.handle == nil {
		if !r.slowDue(d, now) {
			return GPUState{Identity: d.id, Lost: true}
		}
		if d = r.open(i); d.handle == nil {
			r.devices[i] = d
			return GPUState{Identity: d.id, Lost: true}
		}
		r.logger.Info("GPU opened", "gpu", i, "uuid", d.id.UUID)
		r.devices[i], r.setChanged = d, true
	}
	rd := &read{r: r, d: d, errs: errs}
	h := d.handle

	// Ask the cheapest call first: a lost GPU answers it with GPU_IS_LOST
	// and is not asked anything else. It is asked even where unsupported.
	pstate, ret := h.GetPerformanceState()
	rd.ok("performance state", ret)
	if rd.lost {
		return r.lose(d)
	}
	if d.lost {
		// The GPU answers again (a reset): identify it anew, as at
		// discovery, and re-read the pairs.
		r.logger.Info("GPU answers again", "gpu", i)
		d = r.identify(i, h)
		r.devices[i], r.setChanged = d, true
		rd.d = d
	}
	g := GPUState{Identity: d.id}
	if ret == nvml.SUCCESS {
		g.PerformanceState = sampler.Some(int(pstate))
	}

	if !d.static.read {
		if d.static = readStatics(rd, h); rd.lost {
			return r.lose(d)
		}
	}
	s := &d.static
	g.Clocks.SMMax, g.Clocks.MemoryMax = s.smMax, s.memMax
	g.PCIe.MaxGeneration, g.PCIe.MaxWidth, g.PCIe.GPUMaxGeneration = s.pcieMaxGen, s.pcieMaxWidth, s.pcieGPUMaxGen
	g.Throttle.Supported = d.supported

	if r.readFast(rd, h, &g); rd.lost {
		return r.lose(d)
	}
	if r.slowDue(d, now) {
		before := errs.Count
		r.readSlow(rd, h, &g)
		if !rd.lost {
			d.slow = slowOf(&g)
			if errs.Count == before {
				d.slowAt = now
			} // else: try again next sample
		}
	} else {
		d.slow.apply(&g)
	}
	if rd.lost {
		// Readings taken before the GPU went are not trustworthy.
		return r.lose(d)
	}
	return g
}

// slowDue says whether the slow tier is to be read for d in a sample at now.
func (r *Reader) slowDue(d *device, now time.Time) bool {
	return d.slowAt.IsZero() || now.Sub(d.slowAt) >= r.slowInterval
}

// lose marks d lost: everything kept of it is dropped, and it is
// identified anew when it answers again.
func (r *Reader) lose(d *device) GPUState {
	if !d.lost {
		r.logger.Warn("GPU lost", "gpu", d.id.Index, "uuid", d.id.UUID)
	}
	d.lost = true
	d.static, d.links, d.slow, d.slowAt = deviceStatic{}, nil, slowValues{}, time.Time{}
	return GPUState{Identity: d.id, Lost: true}
}

// readStatics reads what does not change while the driver is loaded and
// was not read at discovery. It is read again next sample if a read
// failed.
func readStatics(rd *read, h nvml.Device) deviceStatic {
	const mhz = 1e6
	var s deviceStatic
	before := rd.errs.Count
	if v, ret := h.GetMaxClockInfo(nvml.CLOCK_SM); rd.ok("SM max clock", ret) {
		s.smMax = sampler.Some(float64(v) * mhz)
	}
	if v, ret := h.GetMaxClockInfo(nvml.CLOCK_MEM); rd.ok("memory max clock", ret) {
		s.memMax = sampler.Some(float64(v) * mhz)
	}
	for _, c := range []struct {
		dst  *sampler.Opt[int]
		get  func() (int, nvml.Return)
		what string
	}{
		{&s.pcieMaxGen, h.GetMaxPcieLinkGeneration, "PCIe max generation"},
		{&s.pcieMaxWidth, h.GetMaxPcieLinkWidth, "PCIe max width"},
		{&s.pcieGPUMaxGen, h.GetGpuMaxPcieLinkGeneration, "PCIe GPU max generation"},
	} {
		if v, ret := c.get(); rd.ok(c.what, ret) {
			*c.dst = sampler.Some(v)
		}
	}
	s.read = !rd.lost && rd.errs.Count == before
	return s
}

// readFast reads the fast tier: single calls for what NVML has no field
// for, NVLink states, then one batch of field values.
func (r *Reader) readFast(rd *read, h nvml.Device, g *GPUState) {
	readFastCalls(rd, h, g)
	if rd.lost {
		return
	}
	g.NVLinks = newLinks(rd.d.id.NVLinkCount)
	fields := fastTiers[fastTierKey{r.linkStateFields, r.linkTraffic}]
	if !r.linkStateFields {
		readNVLinkStates(rd, h, g.NVLinks)
	}
	g.Throttle.Seconds = make(map[string]float64, len(throttleFields))
	readFieldTier(rd, h, g, fields)
	readLinkStatics(rd, h, g.NVLinks)
}

// readFastCalls reads the fast values NVML has no field for.
func readFastCalls(rd *read, h nvml.Device, g *GPUState) {
	const mhz = 1e6
	if v, ok := get(rd, "SM clock", func() (uint32, nvml.Return) { return h.GetClockInfo(nvml.CLOCK_SM) }); ok {
		g.Clocks.SM = sampler.Some(float64(v) * mhz)
	}
	if v, ok := get(rd, "memory clock", func() (uint32, nvml.Return) { return h.GetClockInfo(nvml.CLOCK_MEM) }); ok {
		g.Clocks.Memory = sampler.Some(float64(v) * mhz)
	}
	if v, ok := get(rd, "clock event reasons", h.GetCurrentClocksEventReasons); ok {
		g.Throttle.Active = sampler.Some(v)
	}
	if v, ok := get(rd, "GPU temperature", func() (uint32, nvml.Return) { return h.GetTemperature(nvml.TEMPERATURE_GPU) }); ok {
		g.GPUTemperature = sampler.Some(float64(v))
	}
	if u, ok := get(rd, "utilization", h.GetUtilizationRates); ok {
		g.Utilization = sampler.Some(float64(u.Gpu) / 100)
		g.MemoryUtilization = sampler.Some(float64(u.Memory) / 100)
	}
	readMemory(rd, h, g)
	if v, ok := get(rd, "PCIe generation", h.GetCurrPcieLinkGeneration); ok {
		g.PCIe.Generation = sampler.Some(v)
	}
	if v, ok := get(rd, "PCIe width", h.GetCurrPcieLinkWidth); ok {
		g.PCIe.Width = sampler.Some(v)
	}
	// Compute and MIG mode are fast, though they rarely change: the probe
	// scheduler decides by them, and a context opened on a GPU just set to
	// EXCLUSIVE_PROCESS would keep the operator's job from starting.
	if v, ok := get(rd, "compute mode", h.GetComputeMode); ok {
		g.ComputeMode = sampler.Some(computeModeName(v))
	}
	if cur, ok := get(rd, "MIG mode", func() (int, nvml.Return) { cur, _, ret := h.GetMigMode(); return cur, ret }); ok {
		g.MIGEnabled = sampler.Some(cur == nvml.DEVICE_MIG_ENABLE)
		if was := rd.d.mig; was.Valid && was.V != g.MIGEnabled.V {
			// What a GPU supports differs with MIG on and off: ask again.
			clear(rd.d.off)
		}
		rd.d.mig = g.MIGEnabled
	}
}

// readMemory prefers the v2 call: v1 counts the driver's reserved memory as
// used, so an idle H200 shows 615 MiB used where nvidia-smi shows 0.
func readMemory(rd *read, h nvml.Device, g *GPUState) {
	if rd.asks("memory info v2", -1) {
		m, ret := h.GetMemoryInfo_v2()
		switch {
		case ret == nvml.SUCCESS:
			g.MemoryUsed = sampler.Some(float64(m.Used))
			g.MemoryTotal = sampler.Some(float64(m.Total))
			g.MemoryReserved = sampler.Some(float64(m.Reserved))
			return
		case ret == nvml.ERROR_GPU_IS_LOST:
			rd.ok("memory info", ret)
			return
		case unsupported(ret):
			rd.ok("memory info v2", ret) // remembered: v1 from now on
		}
	}
	if m, ok := get(rd, "memory info", h.GetMemoryInfo); ok {
		g.MemoryUsed = sampler.Some(float64(m.Used))
		g.MemoryTotal = sampler.Some(float64(m.Total))
	}
}

// readSlow reads the slow tier: one batch of field values (ECC, row
// remapping, retired pages, PCIe and NVLink error counters).
func (r *Reader) readSlow(rd *read, h nvml.Device, g *GPUState) {
	for i := range g.NVLinks {
		g.NVLinks[i].Errors = make(map[string]float64, len(nvlinkErrorFields))
	}
	readFieldTier(rd, h, g, slowFields)
	if rd.lost {
		return
	}
	r.readFabric(rd, h, g)
}

// slowValues are the slow tier's values, carried from the sample that read
// them to the samples until the next read. The NVLink error maps are
// shared by those samples' snapshots and never written after the read.
type slowValues struct {
	ecc                  ECC
	replays, correctable sampler.Opt[float64]
	linkErrors           []map[string]float64
	fabric               sampler.Opt[Fabric]
}

func slowOf(g *GPUState) slowValues {
	s := slowValues{ecc: g.ECC, replays: g.PCIe.Replays, correctable: g.PCIe.CorrectableErrors, fabric: g.Fabric}
	s.linkErrors = make([]map[string]float64, len(g.NVLinks))
	for i := range g.NVLinks {
		s.linkErrors[i] = g.NVLinks[i].Errors
	}
	return s
}

func (s *slowValues) apply(g *GPUState) {
	g.ECC = s.ecc
	g.PCIe.Replays, g.PCIe.CorrectableErrors = s.replays, s.correctable
	g.Fabric = s.fabric
	for i := range g.NVLinks {
		if i < len(s.linkErrors) {
			g.NVLinks[i].Errors = s.linkErrors[i]
		} else {
			g.NVLinks[i].Errors = map[string]float64{}
		}
	}
}

func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "default"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "exclusive_thread"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "prohibited"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "exclusive_process"
	}
	return "unknown"
}
