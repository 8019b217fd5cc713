package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// live is the simulated machine's moving state: what its GPUs are doing
// and what its counters have added since start. Gauges wander toward a
// target set by the work on each GPU (a GPU with a compute process is
// busy), counters grow with the traffic. Everything random comes from one
// seeded source, so two nodes stepped alike are alike.
type live struct {
	rng   *rand.Rand
	gpus  []*gpuLive
	fns   map[string]*fnLive
	ports map[string]*portLive // by "device/port"
	nets  map[string]*netLive  // by interface name
	// portKeys and netNames in order: they draw on the random source.
	portKeys, netNames []string
	nodes              map[int]*nodeLive
	// nodeIDs in order, and the node of each CPU.
	nodeIDs   []int
	nodeOfCPU map[int]int
	// threads holds the CPU each thread of each process last ran on, by
	// PID; they move between CPUs of the node they started on, so a
	// process's placement never changes by itself.
	threads map[int]threadsLive
	// procs are the profile's GPU processes by NVML index.
	procs [][]gpuProcess
}

// gpuProcess is a process holding a GPU and the device memory it holds.
type gpuProcess struct {
	pid      int
	memBytes uint64
}

type gpuLive struct {
	util, memUtil, power, temp float64
	// nvlink is the NVLink traffic out of (and into) the GPU, bytes per
	// second each way, spread over its active links.
	nvlink float64
	// Fractions of counts not yet whole.
	energyMJ  float64
	linkErrs  [][4]float64
	nvlinkKiB []float64
}

// threadsLive are the CPUs a process's threads last ran on, and the CPUs
// it was allowed then.
type threadsLive struct {
	allowed string
	cpus    []int
}

// fnLive is a NIC function's port state as it was at the last tick.
type fnLive struct{ up bool }

type portLive struct {
	fn string
	// lineRate is the port's rate in health, bytes per second; traffic
	// what it moves now, each way.
	lineRate, traffic float64
	// counters says whether the port has counters/ (mlx5) or only
	// hw_counters (EFA).
	counters bool
	add      map[string]float64
}

type netLive struct {
	fn                     string
	traffic                float64
	add                    map[string]float64
	carrierUp, carrierDown uint64
}

type nodeLive struct {
	add     map[string]float64
	freeAdj float64 // share of free memory taken or given back
}

func newLive(rng *rand.Rand, nv *nvmlmodel.Library, m *machine.Machine, fnOf map[string]string) *live {
	l := &live{rng: rng, fns: map[string]*fnLive{}, ports: map[string]*portLive{}, nets: map[string]*netLive{},
		nodes: map[int]*nodeLive{}, nodeOfCPU: map[int]int{}, threads: map[int]threadsLive{}}
	for _, g := range nv.GPUs {
		gl := &gpuLive{power: 70, temp: 32, linkErrs: make([][4]float64, len(g.NVLinks)), nvlinkKiB: make([]float64, len(g.NVLinks))}
		l.gpus = append(l.gpus, gl)
	}
	for _, fn := range fnOf {
		l.fns[fn] = &fnLive{up: true}
	}
	walkDevices(m, func(d *machine.Device) {
		for _, ib := range d.RDMA {
			for _, p := range ib.Ports {
				rate := 0.0
				if r := parseGbps(p.Rate); r > 0 {
					rate = r * 1e9 / 8
				}
				l.portKeys = append(l.portKeys, portKey(ib.Name, p.Num))
				l.ports[portKey(ib.Name, p.Num)] = &portLive{fn: d.Addr, lineRate: rate, counters: p.Counters != nil,
					traffic: rate * (0.1 + 0.3*rng.Float64()), add: map[string]float64{}}
			}
		}
		for _, nd := range d.Net {
			l.netNames = append(l.netNames, nd.Name)
			l.nets[nd.Name] = &netLive{fn: d.Addr, traffic: 5e6 + 20e6*rng.Float64(), add: map[string]float64{}}
		}
	})
	for _, node := range m.Nodes {
		l.nodeIDs = append(l.nodeIDs, node.ID)
		cpus := mustCPUs(node.CPUs)
		for _, c := range cpus {
			l.nodeOfCPU[c] = node.ID
		}
		l.nodes[node.ID] = &nodeLive{add: map[string]float64{}}
	}
	byBus := map[string]int{}
	for i, g := range nv.GPUs {
		byBus[g.PciBusID] = i
	}
	l.procs = make([][]gpuProcess, len(nv.GPUs))
	for _, p := range m.Processes {
		for _, bus := range p.GPUs {
			if i, ok := byBus[bus]; ok {
				l.procs[i] = append(l.procs[i], gpuProcess{pid: p.PID, memBytes: processGPUMemory(p)})
			}
		}
	}
	return l
}

// processGPUMemory is what a process holds on its GPU: a training job
// most of an 80 GB H100, the MPS server little.
func processGPUMemory(p machine.Process) uint64 {
	if p.Comm == "nvidia-cuda-mps" {
		return 320 << 20
	}
	return (52 + fnv64(strconv.Itoa(p.PID))%20) << 30
}

func portKey(device string, port int) string { return device + "/" + strconv.Itoa(port) }

// parseGbps reads the number of an RDMA rate file, 0 if there is none.
func parseGbps(rate string) float64 {
	var v float64
	for i := 0; i < len(rate); i++ {
		c := rate[i]
		if c == ' ' {
			break
		}
		if c == '.' {
			frac := 0.1
			for i++; i < len(rate) && rate[i] >= '0' && rate[i] <= '9'; i++ {
				v += float64(rate[i]-'0') * frac
				frac /= 10
			}
			break
		}
		if c < '0' || c > '9' {
			return 0
		}
		v = v*10 + float64(c-'0')
	}
	return v
}

// wander moves x toward target with time constant tau seconds, plus noise
// of sd per square-root second.
func (l *live) wander(x, target, tau, sd, dt float64) float64 {
	if dt <= 0 {
		return x
	}
	a := 1 - math.Exp(-dt/tau)
	return x + (target-x)*a + sd*math.Sqrt(dt)*l.rng.NormFloat64()
}

// gpuProcs is GPU i's processes now: the profile's that have not ended,
// a fault's and the host's.
func (l *live) gpuProcs(i int, eff effects) []gpuProcess {
	ps := l.procs[i]
	if len(eff.ended) > 0 {
		ps = slices.DeleteFunc(slices.Clone(ps), func(p gpuProcess) bool { return eff.ended[p.pid] })
	}
	if e := eff.gpus[i]; e.newPID != 0 {
		ps = append(slices.Clip(ps), gpuProcess{pid: e.newPID, memBytes: 24 << 30})
	}
	if i < len(eff.host) {
		for _, pid := range eff.host[i] {
			ps = append(slices.Clip(ps), gpuProcess{pid: pid, memBytes: 8 << 30})
		}
	}
	return ps
}

// step moves the gauges and counts the traffic of dt seconds.
func (l *live) step(dt float64, eff effects) {
	for i, g := range l.gpus {
		busy := len(l.gpuProcs(i, eff)) > 0
		if busy {
			g.util = clamp(l.wander(g.util, 0.93, 8, 0.02, dt), 0.6, 1)
			g.memUtil = clamp(l.wander(g.memUtil, 0.55, 8, 0.03, dt), 0.2, 0.9)
			g.power = clamp(l.wander(g.power, 120+520*g.util, 5, 8, dt), 90, 670)
			g.nvlink = clamp(l.wander(g.nvlink, 110e9, 10, 8e9, dt), 20e9, 300e9)
		} else {
			g.util, g.memUtil, g.nvlink = 0, 0, 0
			g.power = clamp(l.wander(g.power, 70, 5, 0.8, dt), 64, 680)
		}
		g.temp = clamp(l.wander(g.temp, 27+0.065*g.power, 30, 0.2, dt), 25, 84)
	}
	for _, k := range l.portKeys {
		p := l.ports[k]
		e := eff.fns[p.fn]
		if e != nil && e.down {
			p.traffic = 0
		} else {
			line := p.lineRate
			if e != nil {
				line *= e.rate
			}
			if p.traffic == 0 {
				p.traffic = 0.1 * line
			}
			p.traffic = clamp(l.wander(p.traffic, 0.3*line, 20, 0.03*line, dt), 0.02*line, 0.6*line)
		}
		moved := p.traffic * dt
		if p.counters {
			// mlx5 data counters count 4-byte words; 4 KiB MTU.
			p.add["port_rcv_data"] += moved / 4
			p.add["port_xmit_data"] += moved * 0.97 / 4
			p.add["port_rcv_packets"] += moved / 4096
			p.add["port_xmit_packets"] += moved * 0.97 / 4096
			p.add["unicast_rcv_packets"] += moved / 4096
			p.add["unicast_xmit_packets"] += moved * 0.97 / 4096
			p.add["port_xmit_wait"] += moved / 1e5
			if e != nil {
				p.add["symbol_error"] += e.symbolErrors * dt
			}
		} else {
			// EFA: 8 KiB MTU, most traffic RDMA reads.
			p.add["rx_bytes"] += moved
			p.add["tx_bytes"] += moved * 0.97
			p.add["rx_pkts"] += moved / 8192
			p.add["tx_pkts"] += moved * 0.97 / 8192
			p.add["rdma_read_bytes"] += moved * 0.6
			p.add["rdma_read_resp_bytes"] += moved * 0.58
			p.add["rdma_write_bytes"] += moved * 0.3
			p.add["rdma_write_recv_bytes"] += moved * 0.29
			p.add["send_bytes"] += moved * 0.1
			p.add["recv_bytes"] += moved * 0.1
		}
		if e != nil && e.downs > 0 && p.counters {
			p.add["link_downed"] += float64(e.downs)
		}
	}
	for _, name := range l.netNames {
		n := l.nets[name]
		e := eff.fns[n.fn]
		if e != nil {
			n.carrierDown += uint64(e.downs)
			n.carrierUp += uint64(e.ups)
		}
		if e != nil && e.down {
			continue
		}
		n.traffic = clamp(l.wander(n.traffic, 15e6, 20, 2e6, dt), 1e6, 100e6)
		moved := n.traffic * dt
		n.add["rx_bytes"] += moved
		n.add["tx_bytes"] += moved * 0.8
		n.add["rx_packets"] += moved / 1500
		n.add["tx_packets"] += moved * 0.8 / 1500
		n.add["multicast"] += dt * 0.5
	}
	for _, id := range l.nodeIDs {
		n := l.nodes[id]
		// Page allocations: almost all on the node asked for, a few
		// spilled elsewhere (a miss here is a foreign on the node that was
		// asked).
		hits := (80_000 + 40_000*l.rng.Float64()) * dt
		n.add["numa_hit"] += hits
		n.add["local_node"] += hits * 0.999
		n.add["other_node"] += hits * 0.001
		n.add["numa_miss"] += hits * 0.0004
		for _, other := range l.nodeIDs {
			if other != id {
				l.nodes[other].add["numa_foreign"] += hits * 0.0004 / float64(len(l.nodeIDs)-1)
			}
		}
		n.freeAdj = clamp(l.wander(n.freeAdj, 0, 60, 0.0005, dt), -0.01, 0.01)
	}
}

// moveThreads lets each thread of p hop to another CPU of the node it is
// on, within what the process may use.
func (l *live) moveThreads(p *machine.Process, dt float64) {
	// A process bound elsewhere (a fault came or went) starts again from
	// where the tree puts its threads.
	tl, ok := l.threads[p.PID]
	if !ok || len(tl.cpus) != len(p.Threads) || tl.allowed != p.CPUsAllowed {
		tl = threadsLive{allowed: p.CPUsAllowed, cpus: make([]int, len(p.Threads))}
		for i, t := range p.Threads {
			tl.cpus[i] = t.CPU
		}
		l.threads[p.PID] = tl
	}
	cpus := tl.cpus
	if dt > 0 {
		allowed := mustCPUs(p.CPUsAllowed)
		for i, c := range cpus {
			if l.rng.Float64() > 0.2 {
				continue
			}
			node := l.nodeOfCPU[c]
			var choice []int
			for _, a := range allowed {
				if n, ok := l.nodeOfCPU[a]; ok && n == node {
					choice = append(choice, a)
				}
			}
			if len(choice) > 0 {
				cpus[i] = choice[l.rng.IntN(len(choice))]
			}
		}
	}
	for i := range p.Threads {
		p.Threads[i].CPU = cpus[i]
	}
}

// writeNVML sets every GPU's readings: the healthy state of the moment,
// with the faults laid over it. The machine's lock is held.
func (l *live) writeNVML(m *nvmlmodel.Library, dt float64, eff effects) {
	for i, g := range m.GPUs {
		gl, e := l.gpus[i], eff.gpus[i]
		procs := l.gpuProcs(i, eff)
		g.Processes = g.Processes[:0]
		var used uint64
		for _, p := range procs {
			g.Processes = append(g.Processes, nvml.ProcessInfo{Pid: uint32(p.pid), UsedGpuMemory: p.memBytes})
			used += p.memBytes
		}
		g.MemUsed = used
		busy := len(procs) > 0

		power := gl.power
		if slices.Contains(e.reasons, "sw_power_cap") && busy {
			power = float64(g.PowerLimitMW) / 1000 * 0.995
		}
		temp := gl.temp
		for _, r := range e.reasons {
			switch r {
			case "hw_thermal_slowdown":
				temp = max(temp, 91)
			case "sw_thermal_slowdown":
				temp = max(temp, 86)
			}
		}
		g.UtilGPU = uint32(math.Round(gl.util * 100))
		g.UtilMem = uint32(math.Round(gl.memUtil * 100))
		g.PowerMW = uint32(power * 1000)
		gl.energyMJ += power * 1000 * dt
		whole := math.Floor(gl.energyMJ)
		g.EnergyMJ += uint64(whole)
		gl.energyMJ -= whole
		g.TempC = uint32(math.Round(temp))
		g.MemTempC = uint32(math.Round(temp + 6))
		g.Fields[nvmlmodel.FieldKey{ID: nvml.FI_DEV_MEMORY_TEMP}] = float64(g.MemTempC)

		// Idle, an H100 drops its SM clock and says why; busy it boosts
		// to the maximum unless something holds it down.
		g.PState = nvml.PSTATE_0
		g.ClockReasons = clockMask(e.reasons)
		g.SMClockMHz = g.SMMaxMHz
		if !busy {
			g.ClockReasons |= reasonMask("gpu_idle")
			g.SMClockMHz = 345
		}
		for _, r := range e.reasons {
			g.SMClockMHz = min(g.SMClockMHz, throttledClockMHz[r])
			if f, ok := throttleFields[r]; ok {
				g.Fields[nvmlmodel.FieldKey{ID: f}] += dt * 1e9
			}
		}
		g.MemClockMHz = g.MemMaxMHz

		// A GPU with a fabric (NVSwitch profiles): registered and healthy,
		// or, with Fabric Manager gone, not started and disconnected.
		if g.Fabric != nil {
			g.Fabric = nvmlmodel.HealthyFabric(g.Fabric.ClusterUuid, g.Fabric.CliqueId)
			if e.fabricDown {
				const gfm = nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_GFM_STATE << nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE
				g.Fabric.State = nvml.GPU_FABRIC_STATE_NOT_STARTED
				g.Fabric.HealthMask = g.Fabric.HealthMask&^gfm |
					nvml.GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE
			}
		}
		g.Fields[nvmlmodel.FieldKey{ID: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}] = float64(e.recoveryAction)

		g.PCIeGen, g.PCIeWidth = g.PCIeMaxGen, g.PCIeMaxWidth
		if e.Generation > 0 {
			g.PCIeGen = e.Generation
		}
		if e.Width > 0 {
			g.PCIeWidth = e.Width
		}

		active := 0
		for l := range g.NVLinks {
			if !e.linksDown[l] {
				active++
			}
		}
		for link := range g.NVLinks {
			up := !e.linksDown[link]
			g.NVLinks[link].Up = up
			speed := 0.0
			if up {
				speed = 26562
				kib := gl.nvlink / float64(active) * dt / 1024
				g.Fields[nvmlmodel.FieldKey{ID: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, Scope: uint32(link)}] += kib
				g.Fields[nvmlmodel.FieldKey{ID: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, Scope: uint32(link)}] += kib * 0.98
			}
			g.Fields[nvmlmodel.FieldKey{ID: nvml.FI_DEV_NVLINK_GET_SPEED, Scope: uint32(link)}] = speed
			if rate := e.linkErrors[link]; rate > 0 {
				// A marginal link: every CRC error is a replay, and some
				// replays end in a recovery.
				acc := &gl.linkErrs[link]
				for c, share := range map[nvml.NvLinkErrorCounter]float64{
					nvml.NVLINK_ERROR_DL_CRC_FLIT: 1, nvml.NVLINK_ERROR_DL_REPLAY: 1,
					nvml.NVLINK_ERROR_DL_CRC_DATA: 0.2, nvml.NVLINK_ERROR_DL_RECOVERY: 0.1,
				} {
					acc[c] += rate * share * dt
					whole := math.Floor(acc[c])
					g.NVLinks[link].Errors[c] += uint64(whole)
					acc[c] -= whole
				}
			}
		}
	}
}

// writeSysfs brings a fresh healthy tree of the profile to the live state:
// counters grown, the faults in force laid over it by ApplyFaults, as over
// the fixtures, and threads moved.
func (l *live) writeSysfs(m *machine.Machine, dt float64, eff effects) {
	walkDevices(m, func(d *machine.Device) {
		for i := range d.RDMA {
			ib := &d.RDMA[i]
			for j := range ib.Ports {
				p := &ib.Ports[j]
				pl := l.ports[portKey(ib.Name, p.Num)]
				if pl == nil {
					continue
				}
				for k, v := range pl.add {
					if _, ok := p.Counters[k]; ok {
						p.Counters[k] += uint64(v)
					} else if _, ok := p.HWCounters[k]; ok {
						p.HWCounters[k] += uint64(v)
					}
				}
			}
		}
		for i := range d.Net {
			nd := &d.Net[i]
			nl := l.nets[nd.Name]
			if nl == nil {
				continue
			}
			for k, v := range nl.add {
				if _, ok := nd.Stats[k]; ok {
					nd.Stats[k] += uint64(v)
				}
			}
			nd.CarrierUp += nl.carrierUp
			nd.CarrierDown += nl.carrierDown
		}
	})
	for i := range m.Nodes {
		n := &m.Nodes[i]
		nl := l.nodes[n.ID]
		if n.NUMAStat == nil {
			n.NUMAStat = map[string]uint64{}
		}
		for k, v := range nl.add {
			n.NUMAStat[k] += uint64(v)
		}
		free := float64(n.MemFreeKB) * (1 + nl.freeAdj)
		n.MemFreeKB = uint64(min(free, float64(n.MemTotalKB)))
	}
	ApplyFaults(m, eff.tree)
	for i := range m.Processes {
		l.moveThreads(&m.Processes[i], dt)
	}
	// A process that has gone loses its threads' record.
	for pid := range l.threads {
		if !slices.ContainsFunc(m.Processes, func(p machine.Process) bool { return p.PID == pid }) {
			delete(l.threads, pid)
		}
	}
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }
