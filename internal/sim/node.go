// Package sim is the simulated node behind --sim: the exporter's real
// samplers, collectors and probe scheduler run unchanged while the three
// hardware seams are swapped for models. NVML is go-nvml's mock server as
// internal/sim/nvmlmodel wraps it; sysfs and procfs are a tree of
// internal/sim/machine's model written to a temporary directory and kept
// up to date; the probe runner returns modelled rounds that follow the
// simulated links' state.
//
// The node is alive: counters move and gauges wander as on a machine at
// work. A fault file (YAML, see ParseFaults) breaks it in the ways the
// alert rules look for, and is re-read while the node runs; removing a
// fault restores health. Decoding the file (faults.go) and checking it
// against the machine (check.go) are kept apart from applying it to the
// seams (effects.go).
package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/internal/sim/nvmlmodel"
)

// Config says which node to simulate and how.
type Config struct {
	// Profile is one of ProfileNames.
	Profile string
	// FaultsFile is the fault file; "" or a file that does not exist is a
	// healthy node.
	FaultsFile string
	// Seed makes the node's wandering repeatable; 0 means 1.
	Seed uint64
	// Tick is how often counters and gauges move (default 1s). A flapping
	// port shortens it to half its period.
	Tick time.Duration
	// Poll is how often the fault file is checked for changes (default
	// 1s).
	Poll time.Duration
	// Dir is where the temporary tree is made; default /dev/shm where it
	// exists (the tree is thousands of small files), else the system's
	// temporary directory.
	Dir string
	// HostProcesses, when set, is the procfs of the machine the node runs
	// on (/proc): its processes whose CUDA_VISIBLE_DEVICES names
	// simulated GPUs are those GPUs' compute processes (hostProcesses).
	HostProcesses string
	Logger        *slog.Logger
}

// Node is a running simulated node.
type Node struct {
	cfg     Config
	profile Profile
	logger  *slog.Logger
	root    string
	fs      hostfs.Root
	nvml    *nvmlmodel.Library
	syncer  *machine.Syncer
	runner  *Runner
	// base is the machine in good health, what faults may name; gpus its
	// GPUs in NVML order.
	base *machine.Machine
	gpus []*machine.Device
	// fnOf maps every NIC name (RDMA device or interface) to its PCI
	// function: a port's state is the function's.
	fnOf map[string]string

	mu     sync.Mutex
	live   *live
	faults []*activeFault
	// fileData is the fault file's content as last read (nil: none);
	// a poll that reads the same bytes changes nothing.
	fileData []byte
	fileSeen bool
	last     time.Time // the latest tick
	tickTook time.Duration
	tickErr  error
	errors   uint64
	closed   bool
	// published are called after each publish (OnPublish).
	published []func()

	// status is what Status reports, kept apart from mu so that a scrape
	// never waits on a tick writing the tree.
	status  atomic.Pointer[sampler.Status]
	version atomic.Uint64
}

// activeFault is a fault in force and what it has done so far.
type activeFault struct {
	Fault
	since time.Time
	// fired: an XID was delivered.
	fired bool
	// started, downs and ups: a flapping port's transitions counted so far.
	started    bool
	downs, ups int64
}

// Start builds the node, writes its tree, reads the fault file and takes
// the first tick. A fault file that cannot be used is an error naming the
// file, entry and field. Close removes the tree.
func Start(cfg Config) (*Node, error) {
	p, ok := Profiles[cfg.Profile]
	if !ok {
		return nil, fmt.Errorf("unknown simulated profile %q: one of %s", cfg.Profile, strings.Join(ProfileNames(), ", "))
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	dir := cfg.Dir
	if dir == "" {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			dir = "/dev/shm"
		}
	}
	root, err := os.MkdirTemp(dir, "gpulink-sim-"+p.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("simulated node: %w", err)
	}
	n := &Node{
		cfg: cfg, profile: p, logger: cfg.Logger.With("source", "sim"), root: root,
		fs:     hostfs.Under(root),
		syncer: syncerWithPauses(root),
	}
	n.base = p.Machine()
	n.gpus, n.fnOf = n.base.GPUs(), nicFunctions(n.base)
	n.nvml = nvmlmodel.New(n.base)
	n.live = newLive(rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)), n.nvml, n.base, n.fnOf)
	n.runner = newRunner(n, cfg.Seed)
	if err := n.start(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Node) start() error {
	n.setIdentities()
	if n.cfg.FaultsFile != "" {
		data, err := readFaultsFile(n.cfg.FaultsFile)
		if err != nil {
			return err
		}
		faults, err := n.parse(data)
		if err != nil {
			return err
		}
		n.setFaults(data, faults, time.Now())
	}
	return n.Advance(time.Now())
}

// setIdentities gives the GPUs UUIDs derived from the profile, so that a
// restarted simulated node keeps its series.
func (n *Node) setIdentities() {
	n.nvml.Update(func() {
		for i, g := range n.nvml.GPUs {
			a := fnv64(fmt.Sprintf("%s/gpu%d", n.profile.Name, i))
			b := fnv64(fmt.Sprintf("gpu%d/%s", i, n.profile.Name))
			g.UUID = fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", uint32(a>>32), uint16(a>>16), uint16(a), uint16(b>>48), b&0xffffffffffff)
		}
	})
}

// readFaultsFile reads the fault file; one that does not exist reads as
// empty (a healthy node), as the contract says.
func readFaultsFile(name string) ([]byte, error) {
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fault file: %w", err)
	}
	return data, nil
}

func (n *Node) parse(data []byte) ([]Fault, error) {
	faults, err := ParseFaults(n.cfg.FaultsFile, data)
	if err != nil {
		return nil, err
	}
	if err := CheckFaults(n.cfg.FaultsFile, n.base, faults); err != nil {
		return nil, err
	}
	return faults, nil
}

// setFaults puts faults in force: one already in force keeps its state (a
// flapping port keeps its phase), a new one starts now. n.mu must not be
// held.
func (n *Node) setFaults(data []byte, faults []Fault, now time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := map[Fault]*activeFault{}
	for _, af := range n.faults {
		old[af.Fault] = af
	}
	next := make([]*activeFault, 0, len(faults))
	for _, f := range faults {
		if af, ok := old[f]; ok {
			next = append(next, af)
			delete(old, f)
			continue
		}
		next = append(next, &activeFault{Fault: f, since: now})
	}
	for f := range old {
		n.logger.Info("fault removed", "fault", describeFault(f))
	}
	for _, af := range next {
		if af.since.Equal(now) {
			n.logger.Info("fault injected", "fault", describeFault(af.Fault))
		}
	}
	n.faults, n.fileData, n.fileSeen = next, data, true
	n.publish()
}

// Reload reads the fault file again and, if it changed, puts its faults in
// force. A file that cannot be used is logged and counted, and the faults
// in force stay. It is what Run calls every Poll.
func (n *Node) Reload() error {
	if n.cfg.FaultsFile == "" {
		return nil
	}
	data, err := readFaultsFile(n.cfg.FaultsFile)
	if err == nil {
		n.mu.Lock()
		same := n.fileSeen && bytes.Equal(data, n.fileData)
		n.mu.Unlock()
		if same {
			return nil
		}
		var faults []Fault
		if faults, err = n.parse(data); err == nil {
			n.setFaults(data, faults, time.Now())
			return nil
		}
	}
	n.mu.Lock()
	n.errors++
	// Remember the bad content so it is reported once, not every poll.
	n.fileData, n.fileSeen = data, true
	n.publish()
	n.mu.Unlock()
	n.logger.Error("fault file not used; the faults in force stay", "err", err)
	return err
}

// Faults returns the faults in force.
func (n *Node) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Fault, len(n.faults))
	for i, af := range n.faults {
		out[i] = af.Fault
	}
	return out
}

// Run moves the node every tick and checks the fault file every poll
// until ctx ends.
func (n *Node) Run(ctx context.Context) {
	nextPoll := time.Now().Add(n.cfg.Poll)
	for {
		t := time.NewTimer(n.tick())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now := <-t.C:
			if !now.Before(nextPoll) {
				_ = n.Reload() // Reload logs and counts a file it cannot use
				nextPoll = now.Add(n.cfg.Poll)
			}
			if err := n.Advance(now); err != nil {
				n.logger.Error("simulated node tick failed", "err", err)
			}
		}
	}
}

// tick is the configured tick, or half the shortest flapping period.
func (n *Node) tick() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.cfg.Tick
	for _, af := range n.faults {
		if af.Kind == NICFlapping {
			d = min(d, af.Period/2)
		}
	}
	return max(d, 50*time.Millisecond)
}

// Advance moves the node to now: counters grow by what the time since the
// last tick gave, gauges wander, the faults in force are laid over the
// healthy state, and the tree on disk is brought up to date. Tests call it
// with chosen times instead of Run.
func (n *Node) Advance(now time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("simulated node closed")
	}
	start := time.Now()
	dt := 0.0
	if !n.last.IsZero() {
		// A node that was suspended does not make up for the lost time
		// in one step.
		dt = min(max(now.Sub(n.last).Seconds(), 0), 60)
	}
	eff := n.effects(now)
	if n.cfg.HostProcesses != "" {
		eff.host = hostProcesses(n.cfg.HostProcesses, n.uuids(), n.modelledPIDs())
	}
	n.live.step(dt, eff)
	n.nvml.Update(func() { n.live.writeNVML(n.nvml, dt, eff) })
	// The mocks' record of calls, which only tests read, would grow for ever.
	n.nvml.ForgetCalls()
	// A tick is milliseconds of work on the exporter's P: see Pause.
	machine.Pause()
	m := n.profile.Machine()
	n.live.writeSysfs(m, dt, eff)
	n.container(m)
	linkHostProcesses(m, n.cfg.HostProcesses, eff.host)
	machine.Pause()
	err := n.syncer.Sync(m)
	n.last, n.tickTook, n.tickErr = now, time.Since(start), err
	if err != nil {
		n.errors++
	}
	n.publish()
	return err
}

// uuids are the GPUs' UUIDs in NVML order.
func (n *Node) uuids() []string {
	var out []string
	n.nvml.Update(func() {
		for _, g := range n.nvml.GPUs {
			out = append(out, g.UUID)
		}
	})
	return out
}

// modelledPIDs are the processes the profile's machine has, which a host
// process of the same PID must not shadow.
func (n *Node) modelledPIDs() map[int]bool {
	out := map[int]bool{}
	for _, p := range n.base.Processes {
		out[p.PID] = true
	}
	return out
}

// publish makes the node's state what Status reports. n.mu is held.
func (n *Node) publish() {
	st := sampler.Status{Name: "sim", Up: n.tickErr == nil && !n.last.IsZero(), LastDuration: n.tickTook, Errors: n.errors}
	if n.tickErr == nil {
		st.LastSuccess = n.last
	}
	n.status.Store(&st)
	n.version.Add(1)
	for _, f := range n.published {
		f()
	}
}

// OnPublish has f called after every change of Status, as a sampler's,
// so that the /metrics handler builds its next body then rather than at
// the next scrape. f runs with the node's lock held: it must not call
// the node's Reload, Faults, Advance or Close.
func (n *Node) OnPublish(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.published = append(n.published, f)
}

// FS is the simulated sysfs and procfs.
func (n *Node) FS() hostfs.Root { return n.fs }

// CuFileConfig is where the node's tree holds cuFile's configuration (the
// file is there only on a profile with GPUDirect Storage installed).
func (n *Node) CuFileConfig() string { return filepath.Join(n.root, machine.CuFileConfigPath) }

// NVML is the simulated NVML library.
func (n *Node) NVML() nvml.Interface { return n.nvml }

// Fake is the fake NVML machine underneath, for tests.
func (n *Node) Fake() *nvmlmodel.Library { return n.nvml }

// Runner is the modelled probe runner.
func (n *Node) Runner() *Runner { return n.runner }

// Machine is the machine simulated, in good health: what faults may name.
func (n *Node) Machine() *machine.Machine { return n.base }

// Profile is the profile simulated.
func (n *Node) Profile() Profile { return n.profile }

// Status reports the simulated node as a source (source="sim"): up while
// its last tick wrote the tree; its errors count failed ticks and fault
// files that could not be used.
func (n *Node) Status() sampler.Status {
	if st := n.status.Load(); st != nil {
		return *st
	}
	return sampler.Status{Name: "sim"}
}

// Version changes whenever Status may have.
func (n *Node) Version() uint64 { return n.version.Load() }

// Close removes the simulated tree, after the tick in progress if any;
// the node does not tick again. It is safe to call more than once.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	return os.RemoveAll(n.root)
}

// describeFault is a fault in one line for the log: its kind and the
// fields it gives.
func describeFault(f Fault) string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	for _, k := range kindFields[f.Kind].fields() {
		if v := f.field(k); v != unset.field(k) {
			fmt.Fprintf(&b, " %s=%v", k, v)
		}
	}
	return b.String()
}

// fnv64 is FNV-1a with splitmix64's finalizer, for values derived from
// names: names that differ in one character give unrelated values.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// syncerWithPauses syncs into root, parking between the parts of every
// sync: the tick runs on the exporter's P (see machine.Pause).
func syncerWithPauses(root string) *machine.Syncer {
	s := machine.NewSyncer(root)
	s.Pause = machine.Pause
	return s
}
