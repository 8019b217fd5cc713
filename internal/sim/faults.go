package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v2"

	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
)

// FaultKind names one kind of fault the fault file can inject.
type FaultKind string

// The fault kinds. Each is one entry form in the fault file; README text in
// notes-sim.md lists them with their fields.
const (
	PCIeWidth        FaultKind = "pcie_width"
	PCIeGeneration   FaultKind = "pcie_generation"
	NVLinkDown       FaultKind = "nvlink_down"
	NVLinkErrors     FaultKind = "nvlink_errors"
	NICRate          FaultKind = "nic_rate"
	NICDown          FaultKind = "nic_down"
	NICFlapping      FaultKind = "nic_flapping"
	NICSymbolErrors  FaultKind = "nic_symbol_errors"
	ProcessFarSocket FaultKind = "process_far_socket"
	Throttle         FaultKind = "throttle"
	XID              FaultKind = "xid"
	ProbeBandwidth   FaultKind = "probe_bandwidth"
	ProbeLatency     FaultKind = "probe_latency"
)

// fieldSpec says which fields a kind takes: required ones and optional ones.
type fieldSpec struct {
	required, optional []string
}

var kindFields = map[FaultKind]fieldSpec{
	PCIeWidth:        {required: []string{"gpu", "width"}},
	PCIeGeneration:   {required: []string{"gpu", "generation"}},
	NVLinkDown:       {required: []string{"gpu", "link"}},
	NVLinkErrors:     {required: []string{"gpu", "link", "per_second"}},
	NICRate:          {required: []string{"device", "fraction"}},
	NICDown:          {required: []string{"device"}},
	NICFlapping:      {required: []string{"device", "period"}},
	NICSymbolErrors:  {required: []string{"device", "per_second"}},
	ProcessFarSocket: {required: []string{"gpu"}},
	Throttle:         {required: []string{"gpu", "reason"}},
	XID:              {required: []string{"gpu", "code"}},
	ProbeBandwidth:   {required: []string{"gpu", "probe", "fraction"}, optional: []string{"peer_gpu"}},
	ProbeLatency:     {required: []string{"gpu", "probe", "factor"}, optional: []string{"peer_gpu"}},
}

// FaultKinds lists the kinds in the order the fault file documents them.
var FaultKinds = []FaultKind{PCIeWidth, PCIeGeneration, NVLinkDown, NVLinkErrors, NICRate, NICDown,
	NICFlapping, NICSymbolErrors, ProcessFarSocket, Throttle, XID, ProbeBandwidth, ProbeLatency}

// ThrottleReasons are the clock event reasons a throttle fault may hold
// active: the ones a healthy GPU never shows for long.
var ThrottleReasons = []string{"hw_thermal_slowdown", "hw_power_brake_slowdown", "hw_slowdown",
	"sw_thermal_slowdown", "sw_power_cap"}

// Fault is one entry of the fault file. Fields a kind does not take are
// zero; GPU and PeerGPU are -1 where not given.
type Fault struct {
	Kind FaultKind
	// GPU is the NVML index of the GPU the fault is on.
	GPU int
	// Link is an NVLink of that GPU.
	Link int
	// Width and Generation are what a PCIe link trains at.
	Width, Generation int
	// Device is an RDMA device (mlx5_0, rdmap76s0) or a network interface.
	Device string
	// Fraction scales a port rate or a probe's bandwidth; Factor a probe's
	// latency.
	Fraction, Factor float64
	// PerSecond is how fast an error counter grows.
	PerSecond float64
	// Period is how long a flapping port stays in each state.
	Period time.Duration
	// Reason is a clock event reason (ThrottleReasons).
	Reason string
	// Code is an XID.
	Code uint64
	// Probe is the probe kind a probe fault changes; PeerGPU narrows a
	// peer probe to the pair with that GPU.
	Probe   probes.Kind
	PeerGPU int
}

// FaultError is a fault file that cannot be used: it names the file, the
// entry (its index in the faults list, -1 for the file as a whole) and the
// field.
type FaultError struct {
	File  string
	Entry int
	Kind  FaultKind
	Field string
	Err   error
}

func (e *FaultError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Entry >= 0 {
		fmt.Fprintf(&b, ": faults[%d]", e.Entry)
		if e.Kind != "" {
			fmt.Fprintf(&b, " (%s)", e.Kind)
		}
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *FaultError) Unwrap() error { return e.Err }

// ParseFaults reads a fault file's content. name is the file, for errors.
// Empty content, or no faults key, is a healthy node. The faults are
// checked for form only (a known kind, its fields, values in range);
// whether the machine has the GPUs and devices they name is Check's.
func ParseFaults(name string, data []byte) ([]Fault, error) {
	fileErr := func(err error) error { return &FaultError{File: name, Entry: -1, Err: err} }
	var top yaml.MapSlice
	if err := yaml.UnmarshalStrict(data, &top); err != nil {
		return nil, fileErr(fmt.Errorf("not a YAML mapping with a faults list: %w", err))
	}
	var list []any
	for _, item := range top {
		key, _ := item.Key.(string)
		if key != "faults" {
			return nil, fileErr(fmt.Errorf("unknown top-level key %v: the file holds only \"faults\"", item.Key))
		}
		if item.Value == nil {
			continue
		}
		l, ok := item.Value.([]any)
		if !ok {
			return nil, fileErr(fmt.Errorf("faults: want a list of faults, got %s", describe(item.Value)))
		}
		list = l
	}
	faults := make([]Fault, 0, len(list))
	for i, raw := range list {
		f, err := parseFault(raw)
		if err != nil {
			err.File, err.Entry = name, i
			return nil, err
		}
		faults = append(faults, f)
	}
	if err := checkConflicts(faults); err != nil {
		err.File = name
		return nil, err
	}
	return faults, nil
}

// entry is one fault's fields by name, with a record of which were used.
type entry struct {
	fields map[string]any
	err    *FaultError
}

func (e *entry) fail(field string, format string, args ...any) {
	if e.err == nil {
		e.err = &FaultError{Field: field, Err: fmt.Errorf(format, args...)}
	}
}

func parseFault(raw any) (Fault, *FaultError) {
	// Mappings below a yaml.MapSlice decode as MapSlices too.
	m, ok := raw.(yaml.MapSlice)
	if !ok {
		return Fault{}, &FaultError{Err: fmt.Errorf("want a mapping such as {kind: nic_down, device: mlx5_1}, got %s", describe(raw))}
	}
	e := &entry{fields: map[string]any{}}
	for _, item := range m {
		ks, ok := item.Key.(string)
		if !ok {
			return Fault{}, &FaultError{Err: fmt.Errorf("field name %v is not a string", item.Key)}
		}
		if _, dup := e.fields[ks]; dup {
			return Fault{}, &FaultError{Field: ks, Err: errors.New("given twice")}
		}
		e.fields[ks] = item.Value
	}
	kindRaw, ok := e.fields["kind"]
	if !ok {
		return Fault{}, &FaultError{Field: "kind", Err: fmt.Errorf("missing; one of %s", kindList())}
	}
	ks, _ := kindRaw.(string)
	kind := FaultKind(ks)
	spec, known := kindFields[kind]
	if !known {
		return Fault{}, &FaultError{Field: "kind", Err: fmt.Errorf("unknown kind %s; one of %s", describe(kindRaw), kindList())}
	}
	// Unknown and missing fields first, in name order, so the message is
	// the same whatever order the file lists them in.
	names := make([]string, 0, len(e.fields))
	for n := range e.fields {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if n != "kind" && !slices.Contains(spec.required, n) && !slices.Contains(spec.optional, n) {
			return Fault{}, &FaultError{Kind: kind, Field: n, Err: fmt.Errorf("not a field of %s (it takes %s)",
				kind, strings.Join(append(slices.Clone(spec.required), spec.optional...), ", "))}
		}
	}
	for _, n := range spec.required {
		if _, ok := e.fields[n]; !ok {
			return Fault{}, &FaultError{Kind: kind, Field: n, Err: errors.New("missing")}
		}
	}

	f := Fault{Kind: kind, GPU: -1, PeerGPU: -1}
	if _, ok := e.fields["gpu"]; ok {
		f.GPU = e.index("gpu")
	}
	switch kind {
	case PCIeWidth:
		f.Width = e.integer("width", 1, 32)
		if e.err == nil && !slices.Contains([]int{1, 2, 4, 8, 12, 16, 32}, f.Width) {
			e.fail("width", "%d is not a PCIe link width (1, 2, 4, 8, 12, 16, 32)", f.Width)
		}
	case PCIeGeneration:
		f.Generation = e.integer("generation", 1, 6)
	case NVLinkDown:
		f.Link = e.index("link")
	case NVLinkErrors:
		f.Link = e.index("link")
		f.PerSecond = e.positive("per_second")
	case NICRate:
		f.Device = e.name("device")
		f.Fraction = e.fraction("fraction")
	case NICDown:
		f.Device = e.name("device")
	case NICFlapping:
		f.Device = e.name("device")
		f.Period = e.duration("period")
	case NICSymbolErrors:
		f.Device = e.name("device")
		f.PerSecond = e.positive("per_second")
	case Throttle:
		f.Reason = e.name("reason")
		if e.err == nil && !slices.Contains(ThrottleReasons, f.Reason) {
			e.fail("reason", "unknown reason %q; one of %s", f.Reason, strings.Join(ThrottleReasons, ", "))
		}
	case XID:
		f.Code = uint64(e.integer("code", 1, math.MaxUint32))
	case ProbeBandwidth, ProbeLatency:
		f.Probe = probes.Kind(e.name("probe"))
		if _, ok := e.fields["peer_gpu"]; ok {
			f.PeerGPU = e.index("peer_gpu")
		}
		if kind == ProbeBandwidth {
			f.Fraction = e.fraction("fraction")
		} else {
			f.Factor = e.positive("factor")
			if e.err == nil && f.Factor < 1 {
				e.fail("factor", "%g would make the probe faster; want 1 or more", f.Factor)
			}
		}
		if e.err == nil {
			checkProbe(e, kind, f)
		}
	}
	if e.err != nil {
		e.err.Kind = kind
		return Fault{}, e.err
	}
	return f, nil
}

// bandwidthProbes and latencyProbes sort the probe kinds by what they
// measure.
var (
	bandwidthProbes = []probes.Kind{probes.HostToDevice, probes.DeviceToHost, probes.HostBidirectional,
		probes.DeviceLocalCopy, probes.PeerCopy, probes.PeerBidirectional}
	latencyProbes = []probes.Kind{probes.HostLatency, probes.PeerLatency, probes.LaunchLatency}
	peerProbes    = []probes.Kind{probes.PeerCopy, probes.PeerBidirectional, probes.PeerLatency}
)

func checkProbe(e *entry, kind FaultKind, f Fault) {
	want := bandwidthProbes
	if kind == ProbeLatency {
		want = latencyProbes
	}
	if !slices.Contains(want, f.Probe) {
		names := make([]string, len(want))
		for i, k := range want {
			names[i] = string(k)
		}
		e.fail("probe", "%q is not a %s probe; one of %s", f.Probe,
			map[FaultKind]string{ProbeBandwidth: "bandwidth", ProbeLatency: "latency"}[kind], strings.Join(names, ", "))
		return
	}
	if f.PeerGPU >= 0 && !slices.Contains(peerProbes, f.Probe) {
		e.fail("peer_gpu", "only peer probes have a peer; %s has none", f.Probe)
	}
	if f.PeerGPU >= 0 && f.PeerGPU == f.GPU {
		e.fail("peer_gpu", "GPU %d cannot be its own peer", f.GPU)
	}
}

// integer reads a whole number in [lo, hi].
func (e *entry) integer(field string, lo, hi int64) int {
	v := e.fields[field]
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		if x > math.MaxInt64 {
			n = math.MaxInt64
		} else {
			n = int64(x)
		}
	default:
		e.fail(field, "want a whole number, got %s", describe(v))
		return 0
	}
	if n < lo || n > hi {
		e.fail(field, "%d out of range [%d, %d]", n, lo, hi)
		return 0
	}
	return int(n)
}

// index reads a GPU or link index.
func (e *entry) index(field string) int { return e.integer(field, 0, 1<<16) }

// number reads an integer or a decimal.
func (e *entry) number(field string) float64 {
	v := e.fields[field]
	switch x := v.(type) {
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			e.fail(field, "want a finite number, got %v", x)
			return 0
		}
		return x
	}
	e.fail(field, "want a number, got %s", describe(v))
	return 0
}

func (e *entry) positive(field string) float64 {
	v := e.number(field)
	if e.err == nil && v <= 0 {
		e.fail(field, "want more than 0, got %g", v)
	}
	return v
}

// fraction reads a share in (0, 1]: what is left of a rate.
func (e *entry) fraction(field string) float64 {
	v := e.number(field)
	if e.err == nil && (v <= 0 || v > 1) {
		e.fail(field, "want a fraction in (0, 1], got %g", v)
	}
	return v
}

func (e *entry) name(field string) string {
	v := e.fields[field]
	s, ok := v.(string)
	if !ok || strings.TrimSpace(s) == "" {
		e.fail(field, "want a name, got %s", describe(v))
		return ""
	}
	return s
}

// duration reads "3s", "500ms", or a number of seconds; at least 100ms,
// so that a flapping port still shows both states to a sampler.
func (e *entry) duration(field string) time.Duration {
	var d time.Duration
	switch x := e.fields[field].(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(x); err != nil {
			e.fail(field, "want a duration such as 3s or 500ms, got %q", x)
			return 0
		}
	case int, int64, uint64, float64:
		d = time.Duration(e.number(field) * float64(time.Second))
	default:
		e.fail(field, "want a duration such as 3s or 500ms, got %s", describe(x))
		return 0
	}
	if e.err == nil && d < 100*time.Millisecond {
		e.fail(field, "%s is too short; want 100ms or more", d)
	}
	return d
}

// describe says what a YAML value is, for errors.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("%q", x)
	case []any:
		return "a list"
	case map[any]any, yaml.MapSlice:
		return "a mapping"
	case bool:
		return fmt.Sprintf("%v", x)
	}
	return fmt.Sprintf("%v", v)
}

func kindList() string {
	names := make([]string, len(FaultKinds))
	for i, k := range FaultKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// conflictKey is what a fault sets; two faults setting the same thing
// contradict each other (two widths for one link) or only repeat.
func (f Fault) conflictKey() string {
	switch f.Kind {
	case PCIeWidth, PCIeGeneration, ProcessFarSocket:
		return fmt.Sprintf("%s gpu %d", f.Kind, f.GPU)
	case NVLinkDown, NVLinkErrors:
		return fmt.Sprintf("%s gpu %d link %d", f.Kind, f.GPU, f.Link)
	case NICDown, NICFlapping:
		return "port state of " + f.Device
	case NICRate, NICSymbolErrors:
		return fmt.Sprintf("%s %s", f.Kind, f.Device)
	case Throttle:
		return fmt.Sprintf("throttle gpu %d %s", f.GPU, f.Reason)
	case XID:
		return fmt.Sprintf("xid gpu %d code %d", f.GPU, f.Code)
	case ProbeBandwidth, ProbeLatency:
		return fmt.Sprintf("%s gpu %d %s peer %d", f.Kind, f.GPU, f.Probe, f.PeerGPU)
	}
	return string(f.Kind)
}

func checkConflicts(faults []Fault) *FaultError {
	first := map[string]int{}
	for i, f := range faults {
		k := f.conflictKey()
		if j, dup := first[k]; dup {
			return &FaultError{Entry: i, Kind: f.Kind, Err: fmt.Errorf("sets the %s that faults[%d] sets already", k, j)}
		}
		first[k] = i
	}
	return nil
}

// Machine is what a fault may name on the node being simulated: its
// GPUs, their NVLinks and link capabilities, and its NICs.
type Machine struct {
	GPUs []MachineGPU
	// NICs by device name: RDMA devices and physical network interfaces.
	NICs map[string]MachineNIC
	// NUMANodes is how many NUMA nodes the machine has.
	NUMANodes int
}

// MachineGPU is one GPU a fault may name.
type MachineGPU struct {
	PCIBusID                string
	NVLinks                 int
	MaxGeneration, MaxWidth int
	// NUMANode is the GPU's node; -1 when unknown.
	NUMANode int
}

// MachineNIC is one device a NIC fault may name.
type MachineNIC struct {
	// RDMA is true for an RDMA device, false for a network interface.
	RDMA bool
	// Rate is true when it has a rate or speed a nic_rate fault can lower.
	Rate bool
	// SymbolErrors is true when it has a symbol_error counter (mlx5; EFA
	// has none).
	SymbolErrors bool
}

// Check reports the first fault that names something the machine lacks:
// a GPU, NVLink, peer or NIC it does not have, or a link state beyond what
// the GPU's link supports. name is the file, for the error.
func (m *Machine) Check(name string, faults []Fault) error {
	for i, f := range faults {
		fail := func(field, format string, args ...any) error {
			return &FaultError{File: name, Entry: i, Kind: f.Kind, Field: field, Err: fmt.Errorf(format, args...)}
		}
		if f.GPU >= len(m.GPUs) {
			return fail("gpu", "GPU %d: this node has GPUs 0-%d", f.GPU, len(m.GPUs)-1)
		}
		if f.PeerGPU >= len(m.GPUs) {
			return fail("peer_gpu", "GPU %d: this node has GPUs 0-%d", f.PeerGPU, len(m.GPUs)-1)
		}
		var g MachineGPU
		if f.GPU >= 0 {
			g = m.GPUs[f.GPU]
		}
		switch f.Kind {
		case PCIeWidth:
			if f.Width > g.MaxWidth {
				return fail("width", "x%d is wider than GPU %d's link can train (x%d)", f.Width, f.GPU, g.MaxWidth)
			}
		case PCIeGeneration:
			if f.Generation > g.MaxGeneration {
				return fail("generation", "Gen%d is beyond what GPU %d's link supports (Gen%d)", f.Generation, f.GPU, g.MaxGeneration)
			}
		case NVLinkDown, NVLinkErrors:
			if f.Link >= g.NVLinks {
				return fail("link", "GPU %d has NVLinks 0-%d", f.GPU, g.NVLinks-1)
			}
		case NICRate, NICDown, NICFlapping, NICSymbolErrors:
			nic, ok := m.NICs[f.Device]
			if !ok {
				return fail("device", "no RDMA device or network interface %q on this node (%s)", f.Device, m.nicList())
			}
			if f.Kind == NICRate && !nic.Rate {
				return fail("device", "%s reports no rate or speed to lower", f.Device)
			}
			if f.Kind == NICSymbolErrors && !nic.SymbolErrors {
				return fail("device", "%s has no symbol_error counter (EFA devices and plain interfaces have none)", f.Device)
			}
		case ProcessFarSocket:
			if m.NUMANodes < 2 {
				return fail("gpu", "this node has one NUMA node: no socket is far")
			}
			if g.NUMANode < 0 {
				return fail("gpu", "GPU %d's NUMA node is unknown", f.GPU)
			}
		}
	}
	return nil
}

func (m *Machine) nicList() string {
	var names []string
	for n := range m.NICs {
		names = append(names, n)
	}
	slices.SortFunc(names, numa.NaturalCompare)
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	return strings.Join(names, ", ")
}
