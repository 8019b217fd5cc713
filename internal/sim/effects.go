package sim

import (
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/nvml"
)

// effects are the faults in force at one tick, sorted by what they touch.
// The live machine writes a healthy state and lays these over it, so a
// fault that is gone leaves nothing behind but the counts it added.
type effects struct {
	gpus []gpuEffects
	// fns by PCI function address.
	fns map[string]*fnEffects
	// tree are the faults ApplyFaults lays over the tree at this tick:
	// those in force, a flapping port as nic_down while it is down.
	tree []Fault
	// ended are the PIDs of the profile's processes that have ended
	// (process_exit): NVML lists them on no GPU.
	ended map[int]bool
	// host are the host's processes on each GPU (Config.HostProcesses).
	host [][]int
}

type gpuEffects struct {
	// Width and Generation are the PCIe link's trained state; 0 leaves it
	// at its maximum.
	Width, Generation int
	// linksDown are NVLinks that are down; linkErrors the error rate of
	// links that are erroring, per second.
	linksDown  map[int]bool
	linkErrors map[int]float64
	// reasons are the clock event reasons held active.
	reasons []string
	// fabricDown: the GPU's NVLink fabric registration not started (Fabric
	// Manager gone); recoveryAction the driver's GPU recovery action.
	fabricDown     bool
	recoveryAction int
	// newPID, when set, is a process a fault started on the GPU
	// (newProcess), which NVML lists too.
	newPID int
}

// fnEffects is what faults do to one NIC function: its RDMA ports and
// network interfaces share the physical port.
type fnEffects struct {
	down bool
	// downs and ups are the transitions this tick: a port that went down
	// adds to link_downed and carrier_down_count.
	downs, ups int64
	// rate is the share of the port rate trained; 1 in health.
	rate float64
	// symbolErrors per second.
	symbolErrors float64
}

// effects works out the faults in force at now. It also does what a fault
// does once, as it happens: an XID is delivered the first time its fault
// is seen. n.mu is held.
func (n *Node) effects(now time.Time) effects {
	eff := effects{gpus: make([]gpuEffects, len(n.gpus)), fns: map[string]*fnEffects{}}
	for i := range eff.gpus {
		eff.gpus[i] = gpuEffects{linksDown: map[int]bool{}, linkErrors: map[int]float64{}}
	}
	fn := func(device string) *fnEffects {
		addr := n.fnOf[device]
		e := eff.fns[addr]
		if e == nil {
			e = &fnEffects{rate: 1}
			eff.fns[addr] = e
		}
		return e
	}
	flapping := map[string]*activeFault{}
	for _, af := range n.faults {
		var g *gpuEffects
		if af.GPU >= 0 {
			g = &eff.gpus[af.GPU]
		}
		if af.Kind != NICFlapping {
			eff.tree = append(eff.tree, af.Fault)
		}
		switch af.Kind {
		case PCIeWidth:
			// A switch port's link (device) is not the GPU's own, which
			// is what NVML reports.
			if g != nil {
				g.Width = af.Width
			}
		case PCIeGeneration:
			if g != nil {
				g.Generation = af.Generation
			}
		case NVLinkDown:
			g.linksDown[af.Link] = true
		case NVLinkErrors:
			g.linkErrors[af.Link] = af.PerSecond
		case NICRate:
			fn(af.Device).rate = af.Fraction
		case NICDown:
			fn(af.Device).down = true
		case NICFlapping:
			flapping[n.fnOf[af.Device]] = af
			fn(af.Device)
		case NICSymbolErrors:
			fn(af.Device).symbolErrors = af.PerSecond
		case ProcessFarSocket, ProcessFarMemory:
			if af.PID == 0 {
				g.newPID = newProcessPID(af.GPU)
			}
		case ProcessExit:
			if eff.ended == nil {
				eff.ended = map[int]bool{}
			}
			eff.ended[af.PID] = true
		case Throttle:
			g.reasons = append(g.reasons, af.Reason)
		case FabricDown:
			g.fabricDown = true
		case RecoveryAction:
			g.recoveryAction = af.Action
		case XID:
			if !af.fired {
				af.fired = true
				if !n.nvml.TrySendXID(af.GPU, af.Code) {
					n.logger.Warn("XID not delivered: nothing is waiting for NVML events (is the xid collector off?)", "gpu", af.GPU, "xid", af.Code)
				}
			}
		}
	}
	// Port states: every function's state follows its faults, and each
	// change is a transition the counters show.
	for addr, st := range n.live.fns {
		e := eff.fns[addr]
		if e == nil {
			if st.up {
				continue
			}
			e = &fnEffects{rate: 1}
			eff.fns[addr] = e
		}
		if af := flapping[addr]; af != nil {
			// Down for a period from the moment the fault appeared, then
			// up for a period, and so on. Every transition since the last
			// tick is counted, however many fit in it.
			if !af.started {
				af.started = true
				if !st.up {
					af.downs = 1 // it was down already: that down is counted
				}
			}
			k := int64(max(now.Sub(af.since), 0) / af.Period)
			downs, ups := k/2+1, (k+1)/2
			e.downs, e.ups = downs-af.downs, ups-af.ups
			af.downs, af.ups = downs, ups
			e.down = k%2 == 0
			if e.down {
				eff.tree = append(eff.tree, Fault{Kind: NICDown, GPU: -1, PeerGPU: -1, Device: af.Device})
			}
		} else if e.down == st.up {
			if e.down {
				e.downs = 1
			} else {
				e.ups = 1
			}
		}
		st.up = !e.down
	}
	return eff
}

// throttleFields are the NVML fields that keep time for a clock event
// reason, in nanoseconds; hw_slowdown has none.
var throttleFields = map[string]uint32{
	"sw_power_cap":            gonvml.FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
	"sw_thermal_slowdown":     gonvml.FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
	"hw_thermal_slowdown":     gonvml.FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
	"hw_power_brake_slowdown": gonvml.FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
}

// reasonMask is a clock event reason's bit.
func reasonMask(name string) uint64 {
	for _, r := range nvml.ClockEventReasons {
		if r.Name == name {
			return r.Mask
		}
	}
	return 0
}

// throttledClockMHz is the SM clock a reason holds a GPU at, roughly: a
// thermal or power brake slowdown halves it or worse, a software cap takes
// a few hundred MHz.
var throttledClockMHz = map[string]uint32{
	"hw_thermal_slowdown":     1095,
	"hw_power_brake_slowdown": 765,
	"hw_slowdown":             1200,
	"sw_thermal_slowdown":     1545,
	"sw_power_cap":            1710,
}

// clockMask is what NVML reports for reasons: a hardware slowdown of any
// cause also sets hw_slowdown, as the driver does.
func clockMask(reasons []string) uint64 {
	var m uint64
	for _, r := range reasons {
		m |= reasonMask(r)
		if r == "hw_thermal_slowdown" || r == "hw_power_brake_slowdown" {
			m |= reasonMask("hw_slowdown")
		}
	}
	return m
}
