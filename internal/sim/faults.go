package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpulink/gpulink_exporter/probes"
)

// FaultKind names one kind of fault the fault file can inject.
type FaultKind string

// The fault kinds. Each is one entry form in the fault file; the README's
// "Fault file" section (under "Simulated node") lists them with their
// fields and effects.
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
	ProcessFarMemory FaultKind = "process_far_memory"
	ProcessExit      FaultKind = "process_exit"
	Throttle         FaultKind = "throttle"
	XID              FaultKind = "xid"
	ProbeBandwidth   FaultKind = "probe_bandwidth"
	ProbeLatency     FaultKind = "probe_latency"
	FabricDown       FaultKind = "fabric_down"
	RecoveryAction   FaultKind = "recovery_action"
	ACSRedirect      FaultKind = "acs_redirect"
	PeermemMissing   FaultKind = "peermem_missing"
	NCCLTransport    FaultKind = "nccl_transport"
	// NCCLNetSocket: the container does not see the RDMA devices
	// (/dev/infiniband), and NCCL takes sockets between nodes though the
	// NICs' RDMA ports are up: the classic silent fallback.
	NCCLNetSocket FaultKind = "nccl_net_socket"
	// NCCLGDROff: NCCL's network connections go without GPUDirect RDMA
	// (staged through host memory) where the node calls for it.
	NCCLGDROff FaultKind = "nccl_gdr_off"
	// NVFSMissing: nvidia-fs not loaded where GPUDirect Storage is
	// installed; cuFile falls back to compatibility mode (storage.go).
	NVFSMissing FaultKind = "nvidia_fs_missing"
)

// fieldSpec says which fields a kind takes, each by its YAML name, in the
// order they are checked: exactly one of oneOf, then the required ones,
// then the optional ones.
type fieldSpec struct {
	oneOf, required, optional []string
}

func (s fieldSpec) fields() []string { return slices.Concat(s.oneOf, s.required, s.optional) }

var kindFields = map[FaultKind]fieldSpec{
	PCIeWidth:        {oneOf: []string{"gpu", "device"}, required: []string{"width"}},
	PCIeGeneration:   {oneOf: []string{"gpu", "device"}, required: []string{"generation"}},
	NVLinkDown:       {required: []string{"gpu", "link"}},
	NVLinkErrors:     {required: []string{"gpu", "link", "per_second"}},
	NICRate:          {required: []string{"device", "fraction"}},
	NICDown:          {required: []string{"device"}},
	NICFlapping:      {required: []string{"device", "period"}},
	NICSymbolErrors:  {required: []string{"device", "per_second"}},
	ProcessFarSocket: {required: []string{"gpu"}, optional: []string{"pid"}},
	ProcessFarMemory: {required: []string{"gpu"}, optional: []string{"pid"}},
	ProcessExit:      {required: []string{"pid"}},
	Throttle:         {required: []string{"gpu", "reason"}},
	XID:              {required: []string{"gpu", "code"}},
	ProbeBandwidth:   {required: []string{"gpu", "probe", "fraction"}, optional: []string{"peer_gpu"}},
	ProbeLatency:     {required: []string{"gpu", "probe", "factor"}, optional: []string{"peer_gpu"}},
	FabricDown:       {required: []string{"gpu"}},
	RecoveryAction:   {required: []string{"gpu", "action"}},
	ACSRedirect:      {oneOf: []string{"gpu", "device"}},
	PeermemMissing:   {},
	NCCLTransport:    {required: []string{"transport"}, optional: []string{"gpus"}},
	NCCLNetSocket:    {},
	NCCLGDROff:       {},
	NVFSMissing:      {},
}

// FaultKinds lists the kinds in the order the fault file documents them.
var FaultKinds = []FaultKind{PCIeWidth, PCIeGeneration, NVLinkDown, NVLinkErrors, NICRate, NICDown,
	NICFlapping, NICSymbolErrors, ProcessFarSocket, ProcessFarMemory, ProcessExit, Throttle, XID, ProbeBandwidth, ProbeLatency, FabricDown,
	RecoveryAction, ACSRedirect, PeermemMissing, NCCLTransport, NCCLNetSocket, NCCLGDROff, NVFSMissing}

// ThrottleReasons are the clock event reasons a throttle fault may hold
// active: the ones a healthy GPU never shows for long.
var ThrottleReasons = []string{"hw_thermal_slowdown", "hw_power_brake_slowdown", "hw_slowdown",
	"sw_thermal_slowdown", "sw_power_cap"}

// Fault is one entry of the fault file, each field decoded from the key
// its yaml tag names. Fields a kind does not take are zero; GPU and
// PeerGPU are -1 where not given.
type Fault struct {
	Kind FaultKind `yaml:"kind"`
	// GPU is the NVML index of the GPU the fault is on.
	GPU int `yaml:"gpu"`
	// Link is an NVLink of that GPU.
	Link int `yaml:"link"`
	// Width and Generation are what a PCIe link trains at.
	Width      int `yaml:"width"`
	Generation int `yaml:"generation"`
	// Device is an RDMA device (mlx5_0, rdmap76s0) or a network interface;
	// for a PCIe fault, the PCI function (0000:38:00.0) whose link, the
	// one above it, trains so, where that is not a GPU's; for acs_redirect,
	// the root or downstream port whose ACS redirects.
	Device string `yaml:"device"`
	// Fraction scales a port rate or a probe's bandwidth; Factor a probe's
	// latency.
	Fraction float64 `yaml:"fraction"`
	Factor   float64 `yaml:"factor"`
	// PerSecond is how fast an error counter grows.
	PerSecond float64 `yaml:"per_second"`
	// Period is how long a flapping port stays in each state: a duration
	// ("3s") or a number of seconds.
	Period time.Duration `yaml:"period"`
	// Reason is a clock event reason (ThrottleReasons).
	Reason string `yaml:"reason"`
	// Code is an XID.
	Code uint64 `yaml:"code"`
	// Probe is the probe kind a probe fault changes; PeerGPU narrows a
	// peer probe to the pair with that GPU.
	Probe   probes.Kind `yaml:"probe"`
	PeerGPU int         `yaml:"peer_gpu"`
	// PID is a process of the machine on the GPU that a process fault
	// moves, 0 starting a new one; for process_exit, the process of the
	// machine that ends.
	PID int `yaml:"pid"`
	// Action is an NVML GPU recovery action, 1 (gpu_reset) to 7
	// (system_reboot).
	Action int `yaml:"action"`
	// Transport is what NCCL falls back to (NCCLTransports); GPUs, where
	// given, are the GPUs whose connections fall back, else every GPU's.
	Transport string  `yaml:"transport"`
	GPUs      GPUList `yaml:"gpus"`
}

// NCCLTransports are the transports an nccl_transport fault may make NCCL
// fall back to: host shared memory, or the network.
var NCCLTransports = []string{probes.TransportSHM, probes.TransportNet}

// GPUList is a set of GPU indices as the fault file lists them ([0, 3]),
// kept in a comparable form, sorted and comma-separated ("0,3"), so that a
// Fault stays a value that == compares. "" is none given.
type GPUList string

// Indices are the GPUs of the list in order.
func (l GPUList) Indices() []int {
	if l == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(string(l), ",") {
		i, err := strconv.Atoi(f)
		if err != nil {
			continue // only ever written by decodeField
		}
		out = append(out, i)
	}
	return out
}

// Has reports whether GPU i is in the list.
func (l GPUList) Has(i int) bool { return slices.Contains(l.Indices(), i) }

// makeGPUList is the list of indices, sorted.
func makeGPUList(indices []int) GPUList {
	sorted := slices.Sorted(slices.Values(indices))
	parts := make([]string, len(sorted))
	for i, v := range sorted {
		parts[i] = strconv.Itoa(v)
	}
	return GPUList(strings.Join(parts, ","))
}

// faultField is the index of the Fault field each YAML key decodes into.
var faultField = func() map[string]int {
	out := map[string]int{}
	t := reflect.TypeFor[Fault]()
	for i := range t.NumField() {
		out[t.Field(i).Tag.Get("yaml")] = i
	}
	return out
}()

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
// Empty content, or no faults key, is a healthy node. Each entry is
// decoded strictly into a Fault (a known kind, the fields it takes and no
// other, each of its type) and validated; whether the machine has the
// GPUs and devices the faults name is CheckFaults'.
func ParseFaults(name string, data []byte) ([]Fault, error) {
	fileErr := func(format string, args ...any) error {
		return &FaultError{File: name, Entry: -1, Err: fmt.Errorf(format, args...)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fileErr("not a YAML mapping with a faults list: %w", err)
	}
	var list []*yaml.Node
	if len(doc.Content) > 0 && doc.Content[0].Tag != "!!null" {
		top := doc.Content[0]
		if top.Kind != yaml.MappingNode {
			return nil, fileErr("not a YAML mapping with a faults list: got %s", describe(top))
		}
		seen := false
		for i := 0; i < len(top.Content); i += 2 {
			key, val := top.Content[i], top.Content[i+1]
			switch {
			case key.Value != "faults":
				return nil, fileErr("unknown top-level key %s: the file holds only \"faults\"", key.Value)
			case seen:
				return nil, fileErr("faults given twice")
			case val.Kind == yaml.SequenceNode:
				list = val.Content
			case val.Tag != "!!null":
				return nil, fileErr("faults: want a list of faults, got %s", describe(val))
			}
			seen = true
		}
	}
	faults := make([]Fault, 0, len(list))
	for i, n := range list {
		f, err := decodeFault(n)
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

// decodeFault decodes one entry: its kind, then every field it gives, in
// name order so that the first error is the same whatever order the file
// lists them in, then the values.
func decodeFault(n *yaml.Node) (Fault, *FaultError) {
	if n.Kind != yaml.MappingNode {
		return Fault{}, &FaultError{Err: fmt.Errorf("want a mapping such as {kind: nic_down, device: mlx5_1}, got %s", describe(n))}
	}
	given := map[string]*yaml.Node{}
	for i := 0; i < len(n.Content); i += 2 {
		key := n.Content[i]
		if key.Kind != yaml.ScalarNode || key.Tag != "!!str" {
			return Fault{}, &FaultError{Err: fmt.Errorf("field name %s is not a string", describe(key))}
		}
		if _, dup := given[key.Value]; dup {
			return Fault{}, &FaultError{Field: key.Value, Err: fmt.Errorf("given twice")}
		}
		given[key.Value] = n.Content[i+1]
	}
	f := Fault{GPU: -1, PeerGPU: -1}
	kindNode, ok := given["kind"]
	if !ok {
		return Fault{}, &FaultError{Field: "kind", Err: fmt.Errorf("missing; one of %s", kindList())}
	}
	spec, known := kindFields[FaultKind(kindNode.Value)]
	if !known || kindNode.Tag != "!!str" {
		return Fault{}, &FaultError{Field: "kind", Err: fmt.Errorf("unknown kind %s; one of %s", describe(kindNode), kindList())}
	}
	f.Kind = FaultKind(kindNode.Value)
	fail := func(field string, err error) (Fault, *FaultError) {
		return Fault{}, &FaultError{Kind: f.Kind, Field: field, Err: err}
	}
	delete(given, "kind")
	takes, names := spec.fields(), slices.Sorted(maps.Keys(given))
	for _, k := range names {
		if !slices.Contains(takes, k) {
			return fail(k, fmt.Errorf("not a field of %s (it takes %s)", f.Kind, strings.Join(takes, ", ")))
		}
	}
	for _, k := range spec.required {
		if _, ok := given[k]; !ok {
			return fail(k, fmt.Errorf("missing"))
		}
	}
	for _, k := range names {
		if err := decodeField(reflect.ValueOf(&f).Elem().Field(faultField[k]).Addr().Interface(), given[k]); err != nil {
			return fail(k, err)
		}
	}
	// A field given is checked even where its value is the one that
	// means not given (peer_gpu: -1).
	return f, f.validate(func(k string) bool { return given[k] != nil })
}

// fieldTypes are the YAML scalars each type of Fault field takes, and
// what an error says was wanted. Tags are checked before decoding: the
// yaml package would truncate 8.5 into an int.
var fieldTypes = map[reflect.Type]struct {
	want string
	tags []string
}{
	reflect.TypeFor[int]():           {"a whole number", []string{"!!int"}},
	reflect.TypeFor[uint64]():        {"a whole number", []string{"!!int"}},
	reflect.TypeFor[float64]():       {"a number", []string{"!!int", "!!float"}},
	reflect.TypeFor[string]():        {"a name", []string{"!!str"}},
	reflect.TypeFor[probes.Kind]():   {"a name", []string{"!!str"}},
	reflect.TypeFor[time.Duration](): {"a duration such as 3s or 500ms", []string{"!!str", "!!int", "!!float"}},
	reflect.TypeFor[GPUList]():       {"a list of GPU indices such as [0, 3]", nil},
}

// decodeField decodes a YAML scalar into the Fault field p points at. A
// duration may be a number of seconds.
func decodeField(p any, n *yaml.Node) error {
	t := fieldTypes[reflect.TypeOf(p).Elem()]
	if l, ok := p.(*GPUList); ok {
		return decodeGPUList(l, n, t.want)
	}
	if n.Kind != yaml.ScalarNode || !slices.Contains(t.tags, n.Tag) {
		return fmt.Errorf("want %s, got %s", t.want, describe(n))
	}
	if d, ok := p.(*time.Duration); ok && n.Tag != "!!str" {
		var s float64
		err := n.Decode(&s)
		*d = time.Duration(s * float64(time.Second))
		return err
	}
	if n.Decode(p) != nil {
		return fmt.Errorf("want %s, got %s", t.want, describe(n))
	}
	return nil
}

// decodeGPUList decodes a list of whole numbers, each once; their range is
// the gpus check's.
func decodeGPUList(l *GPUList, n *yaml.Node, want string) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("want %s, got %s", want, describe(n))
	}
	var indices []int
	for _, e := range n.Content {
		var i int
		if e.Kind != yaml.ScalarNode || e.Tag != "!!int" || e.Decode(&i) != nil {
			return fmt.Errorf("want %s, got %s in the list", want, describe(e))
		}
		if slices.Contains(indices, i) {
			return fmt.Errorf("GPU %d listed twice", i)
		}
		indices = append(indices, i)
	}
	if len(indices) == 0 {
		return errors.New("an empty list: leave gpus out for every GPU")
	}
	*l = makeGPUList(indices)
	return nil
}

// describe says what a YAML value is, for errors.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Tag == "!!null":
		return "nothing"
	case n.Tag == "!!str":
		return strconv.Quote(n.Value)
	}
	return n.Value
}

func kindList() string {
	names := make([]string, len(FaultKinds))
	for i, k := range FaultKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// maxIndex bounds GPU and link indices: far more than any machine has.
const maxIndex = 1 << 16

// fieldChecks check one field's value, by its YAML name.
var fieldChecks = map[string]func(f Fault) error{
	"gpu":        func(f Fault) error { return inRange(f.GPU, 0, maxIndex) },
	"peer_gpu":   checkPeer,
	"link":       func(f Fault) error { return inRange(f.Link, 0, maxIndex) },
	"generation": func(f Fault) error { return inRange(f.Generation, 1, 6) },
	"code": func(f Fault) error {
		return want(f.Code >= 1 && f.Code <= math.MaxUint32, "%d out of range [1, %d]", f.Code, uint64(math.MaxUint32))
	},
	"fraction": func(f Fault) error {
		return want(f.Fraction > 0 && f.Fraction <= 1, "want a fraction in (0, 1], got %g", f.Fraction)
	},
	"per_second": func(f Fault) error { return want(f.PerSecond > 0, "want more than 0, got %g", f.PerSecond) },
	"factor": func(f Fault) error {
		return cmp.Or(want(f.Factor > 0, "want more than 0, got %g", f.Factor),
			want(f.Factor >= 1, "%g would make the probe faster; want 1 or more", f.Factor))
	},
	"width": func(f Fault) error {
		return want(slices.Contains([]int{1, 2, 4, 8, 12, 16, 32}, f.Width), "%d is not a PCIe link width (1, 2, 4, 8, 12, 16, 32)", f.Width)
	},
	"device": func(f Fault) error { return want(strings.TrimSpace(f.Device) != "", "want a name, got %q", f.Device) },
	"period": func(f Fault) error {
		return want(f.Period >= 100*time.Millisecond, "%s is too short; want 100ms or more, so that a sampler sees both states", f.Period)
	},
	"reason": func(f Fault) error {
		return want(slices.Contains(ThrottleReasons, f.Reason), "unknown reason %q; one of %s", f.Reason, strings.Join(ThrottleReasons, ", "))
	},
	"probe": checkProbe,
	"pid":   func(f Fault) error { return want(f.PID > 0, "want a process ID, got %d", f.PID) },
	"action": func(f Fault) error {
		return want(f.Action >= 1 && f.Action <= 7, "%d is not a recovery action other than none (1 gpu_reset ... 7 system_reboot)", f.Action)
	},
	"transport": func(f Fault) error {
		return want(slices.Contains(NCCLTransports, f.Transport), "unknown transport %q; one of %s", f.Transport, strings.Join(NCCLTransports, ", "))
	},
	"gpus": func(f Fault) error {
		for _, i := range f.GPUs.Indices() {
			if err := inRange(i, 0, maxIndex); err != nil {
				return err
			}
		}
		return want(f.GPUs != "", "an empty list: leave gpus out for every GPU")
	},
}

// Validate checks a fault's values: every field its kind takes, in the
// order the kind lists them, an optional one where it is set. The error
// is a *FaultError naming the field. ParseFaults validates what it
// decodes; Validate is for faults made otherwise.
func (f Fault) Validate() error {
	spec, ok := kindFields[f.Kind]
	if !ok {
		return &FaultError{Entry: -1, Field: "kind", Err: fmt.Errorf("unknown kind %q; one of %s", f.Kind, kindList())}
	}
	if err := f.validate(func(k string) bool { return slices.Contains(spec.required, k) || f.field(k) != unset.field(k) }); err != nil {
		return err
	}
	return nil
}

// validate checks the fields of f's kind that given says are given.
func (f Fault) validate(given func(field string) bool) *FaultError {
	spec := kindFields[f.Kind]
	if oneOf := spec.oneOf; len(oneOf) > 0 {
		switch n := len(slices.DeleteFunc(slices.Clone(oneOf), func(k string) bool { return !given(k) })); {
		case n == 0:
			return &FaultError{Entry: -1, Kind: f.Kind, Field: strings.Join(oneOf, " or "), Err: fmt.Errorf("missing")}
		case n > 1:
			return &FaultError{Entry: -1, Kind: f.Kind, Field: oneOf[1], Err: fmt.Errorf("give %s, not both", strings.Join(oneOf, " or "))}
		}
	}
	for _, k := range spec.fields() {
		if given(k) {
			if err := fieldChecks[k](f); err != nil {
				return &FaultError{Entry: -1, Kind: f.Kind, Field: k, Err: err}
			}
		}
	}
	return nil
}

// unset is a fault with no field given.
var unset = Fault{GPU: -1, PeerGPU: -1}

// field is the value of the field with a YAML name.
func (f Fault) field(name string) any { return reflect.ValueOf(f).Field(faultField[name]).Interface() }

func inRange(v, lo, hi int) error {
	return want(v >= lo && v <= hi, "%d out of range [%d, %d]", v, lo, hi)
}

// want is nil where ok holds, else the error.
func want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// bandwidthProbes and latencyProbes sort the probe kinds by what they
// measure.
var (
	bandwidthProbes = []probes.Kind{probes.HostToDevice, probes.DeviceToHost, probes.HostBidirectional,
		probes.DeviceLocalCopy, probes.PeerCopy, probes.PeerBidirectional}
	latencyProbes = []probes.Kind{probes.HostLatency, probes.PeerLatency, probes.LaunchLatency}
	peerProbes    = []probes.Kind{probes.PeerCopy, probes.PeerBidirectional, probes.PeerLatency}
)

func checkProbe(f Fault) error {
	kinds, what := bandwidthProbes, "bandwidth"
	if f.Kind == ProbeLatency {
		kinds, what = latencyProbes, "latency"
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return want(slices.Contains(kinds, f.Probe), "%q is not a %s probe; one of %s", f.Probe, what, strings.Join(names, ", "))
}

func checkPeer(f Fault) error {
	return cmp.Or(inRange(f.PeerGPU, 0, maxIndex),
		want(slices.Contains(peerProbes, f.Probe), "only peer probes have a peer; %s has none", f.Probe),
		want(f.PeerGPU != f.GPU, "GPU %d cannot be its own peer", f.GPU))
}

// valueFields say how much, not what: two faults that differ only in them
// set the same thing, and contradict each other (two widths for one link)
// or only repeat.
var valueFields = []string{"width", "generation", "per_second", "fraction", "factor", "period", "action", "transport"}

// conflictKey is what a fault sets: its kind (a port's state for nic_down
// and nic_flapping alike, a process's placement for the process kinds) of
// the fields given that name what it is on.
func (f Fault) conflictKey() string {
	what := string(f.Kind)
	switch f.Kind {
	case NICDown, NICFlapping:
		what = "port state"
	case ProcessFarSocket, ProcessFarMemory:
		if f.PID != 0 {
			return fmt.Sprintf("placement of process %d", f.PID)
		}
		what = "placement of the process started"
	case ProcessExit:
		return fmt.Sprintf("end of process %d", f.PID)
	}
	var on []string
	for _, k := range kindFields[f.Kind].fields() {
		if !slices.Contains(valueFields, k) && f.field(k) != unset.field(k) {
			on = append(on, fmt.Sprintf("%s %v", k, f.field(k)))
		}
	}
	if len(on) == 0 && f.Kind == NCCLTransport {
		on = append(on, "every GPU")
	}
	return what + " on " + strings.Join(on, ", ")
}

func checkConflicts(faults []Fault) *FaultError {
	first := map[string]int{}
	// The nccl_transport fault covering each GPU so far; -1 for one
	// covering every GPU.
	transportOf := map[int]int{}
	// The first process fault naming each PID: a process that ends
	// cannot also be moved.
	processFault := map[int]int{}
	for i, f := range faults {
		k := f.conflictKey()
		if j, dup := first[k]; dup {
			return &FaultError{Entry: i, Kind: f.Kind, Err: fmt.Errorf("sets the %s that faults[%d] sets already", k, j)}
		}
		first[k] = i
		if f.PID != 0 {
			if j, seen := processFault[f.PID]; seen && (faults[j].Kind == ProcessExit) != (f.Kind == ProcessExit) {
				does, other := "moves", "ends"
				if f.Kind == ProcessExit {
					does, other = other, does
				}
				return &FaultError{Entry: i, Kind: f.Kind, Field: "pid",
					Err: fmt.Errorf("%s process %d, which faults[%d] %s", does, f.PID, j, other)}
			}
			if _, seen := processFault[f.PID]; !seen {
				processFault[f.PID] = i
			}
		}
		if f.Kind != NCCLTransport {
			continue
		}
		// Two faults covering one GPU would give its connections two
		// transports.
		gpus := f.GPUs.Indices()
		if gpus == nil {
			gpus = []int{-1}
		}
		for _, g := range gpus {
			for _, other := range slices.Sorted(maps.Keys(transportOf)) {
				if j := transportOf[other]; other == g || other == -1 || g == -1 {
					return &FaultError{Entry: i, Kind: f.Kind, Field: "gpus",
						Err: fmt.Errorf("covers GPUs that faults[%d] already sends over a transport", j)}
				}
			}
		}
		for _, g := range gpus {
			transportOf[g] = i
		}
	}
	return nil
}
