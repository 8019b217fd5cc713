package ncclcheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/nccllog"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/numa"
	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/nccl"
)

// MinVersion is the oldest NCCL the probes load (ncclCommInitRankConfig
// came in 2.14), as a version code.
const MinVersion = 21400

// Unlimited is RLIMIT_MEMLOCK's RLIM_INFINITY.
const Unlimited = math.MaxUint64

// Env is what a check reads.
type Env struct {
	// Root is the filesystem root: "/" on a node, a fixture tree in tests.
	// /sys, /proc, /dev/infiniband and the library directories are read
	// below it.
	Root string
	// Library is --nccl.library: a soname the loader looks up, or a path.
	Library string
	// Getenv reads NCCL_NET_PLUGIN and LD_LIBRARY_PATH.
	Getenv func(string) string
	// Memlock is this process's RLIMIT_MEMLOCK soft limit, Unlimited for
	// none.
	Memlock func() (uint64, error)
	// LoadVersion loads the library the loader finds for Library and
	// returns its version code; nil where the caller must not load it
	// (the daemon: NCCL is the child's), and the version is then read from
	// the library file's name where it has one (libnccl.so.2.21.5).
	LoadVersion func(library string) (int, error)
}

// Status is how an item of the report stands.
type Status string

// Statuses: Missing fails the check; Warn costs bandwidth but not RDMA;
// Info only says.
const (
	StatusOK      Status = "ok"
	StatusMissing Status = "missing"
	StatusWarn    Status = "warn"
	StatusInfo    Status = "info"
)

// Checks, the items that pass or fail (the check label).
const (
	CheckLibrary     = "library"
	CheckPlugin      = "network_plugin"
	CheckRDMADevices = "rdma_devices"
	CheckMemlock     = "memlock"
	CheckGPUDirect   = "gpudirect"
	CheckNICPorts    = "nic_ports"
	CheckNetworkGPU  = "expected_network"
)

// MemlockMinimum is the soft RLIMIT_MEMLOCK below which, without
// CAP_IPC_LOCK, the check calls RDMA impossible: NCCL registers every
// buffer it sends from (4 MiB per channel and peer by default), and
// docker's default 64 KiB (8 MiB on newer engines) fails the first.
const MemlockMinimum = 64 << 20

// Checks lists the checks that pass or fail, for the metric's label.
var Checks = []string{CheckLibrary, CheckPlugin, CheckRDMADevices, CheckMemlock, CheckGPUDirect}

// Item is one line of the report.
type Item struct {
	Check  string
	Status Status
	Detail string
}

// Report is what a session between nodes would use and what it lacks.
type Report struct {
	// LibraryPath is the library file found ("" where none was);
	// Version its version ("2.21.5"; "" unknown).
	LibraryPath, Version string
	// Plugin is the network plugin NCCL would load: the file found, or
	// "" for NCCL's own IB and Socket transports.
	Plugin string
	// Networks are what each GPU should use (probes.NetworksFor).
	Networks []probes.GPUNetwork
	Items    []Item
}

// Ready is false where no session between nodes could run (no usable
// NCCL), or one could not use the RDMA the node's NICs have.
func (r *Report) Ready() bool {
	return !slices.ContainsFunc(r.Items, func(it Item) bool { return it.Status == StatusMissing })
}

// Passed says whether check passed: no item of it is missing.
func (r *Report) Passed(check string) bool {
	return !slices.ContainsFunc(r.Items, func(it Item) bool { return it.Check == check && it.Status == StatusMissing })
}

// Write prints the report, one line per item, and a last line with the
// verdict.
func (r *Report) Write(w io.Writer) error {
	for _, it := range r.Items {
		if _, err := fmt.Fprintf(w, "%-8s %-17s %s\n", it.Status, it.Check, it.Detail); err != nil {
			return err
		}
	}
	verdict := "ready: a session between nodes can use what this node's NICs offer"
	if !r.Ready() {
		verdict = "NOT READY: see the lines marked missing"
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}

// Check reads the node and reports. topo and ports may be nil (not
// readable): the expected network is then unknown, or sockets.
func Check(env Env, topo *numa.Topology, ports *nic.Snapshot) *Report {
	r := &Report{Networks: probes.NetworksFor(topo, ports)}
	expected := expectedNetwork(r.Networks)
	rdma := expected != "" // some GPU's network is RDMA
	add := func(check string, st Status, format string, args ...any) {
		r.Items = append(r.Items, Item{check, st, fmt.Sprintf(format, args...)})
	}
	dirs := env.libraryDirs()

	// The library.
	r.LibraryPath = env.findLibrary(env.Library, dirs)
	code, loadErr := 0, error(nil)
	if env.LoadVersion != nil {
		code, loadErr = env.LoadVersion(env.Library)
	} else if r.LibraryPath != "" {
		code = versionFromName(env.resolve(r.LibraryPath))
	}
	if code > 0 {
		r.Version = nccl.VersionString(code)
	}
	where := r.LibraryPath
	if where == "" {
		where = env.Library + " (found by the loader)"
	}
	switch {
	case loadErr != nil:
		add(CheckLibrary, StatusMissing, "%s cannot be loaded: %v (give the library's path, or put its directory on LD_LIBRARY_PATH)", env.Library, loadErr)
	case env.LoadVersion == nil && r.LibraryPath == "":
		add(CheckLibrary, StatusMissing, "%s not found on LD_LIBRARY_PATH, in the loader's configuration or the usual library directories", env.Library)
	case code > 0 && code < MinVersion:
		add(CheckLibrary, StatusMissing, "%s is NCCL %s; the probes need 2.14 or later", where, r.Version)
	case code > 0:
		add(CheckLibrary, StatusOK, "%s, NCCL %s", where, r.Version)
	default:
		add(CheckLibrary, StatusOK, "%s, version unknown until a collective round loads it", where)
	}

	// The network plugin.
	plugin, wanted := env.findPlugin(dirs)
	r.Plugin = plugin
	switch {
	case wanted == "none":
		st := StatusOK
		if expected == nccllog.NetworkEFA {
			st = StatusMissing
		}
		add(CheckPlugin, st, "NCCL_NET_PLUGIN=none: NCCL's own IB and Socket transports only")
	case plugin != "":
		add(CheckPlugin, StatusOK, "%s", plugin)
	case expected == nccllog.NetworkEFA:
		add(CheckPlugin, StatusMissing, "no %s on the library path: EFA is reached only through aws-ofi-nccl (mount /opt/amazon/ofi-nccl and set NCCL_NET_PLUGIN and LD_LIBRARY_PATH)", wanted)
	default:
		add(CheckPlugin, StatusOK, "none (no %s): NCCL's own IB and Socket transports", wanted)
	}

	// The RDMA devices a process needs to open verbs.
	uverbs, _ := filepath.Glob(filepath.Join(env.Root, "dev", "infiniband", "uverbs*"))
	for i := range uverbs {
		uverbs[i] = env.onNode(uverbs[i])
	}
	slices.SortFunc(uverbs, cmpNatural)
	switch {
	case len(uverbs) > 4:
		add(CheckRDMADevices, StatusOK, "%d devices, %s to %s", len(uverbs), uverbs[0], uverbs[len(uverbs)-1])
	case len(uverbs) > 0:
		add(CheckRDMADevices, StatusOK, "%s", strings.Join(uverbs, " "))
	case rdma:
		add(CheckRDMADevices, StatusMissing, "no /dev/infiniband/uverbs*, but the NICs have %s ports up: mount /dev/infiniband into the container (an RDMA device plugin's resource, or the host path)", expected)
	default:
		add(CheckRDMADevices, StatusInfo, "none, and no RDMA port is up: sockets are all there is")
	}

	// Memlock.
	limit, err := uint64(0), errors.New("not read")
	if env.Memlock != nil {
		limit, err = env.Memlock()
	}
	ipcLock := env.hasCapIPCLock()
	switch {
	case err != nil:
		add(CheckMemlock, StatusWarn, "RLIMIT_MEMLOCK cannot be read: %v", err)
	case limit == Unlimited:
		add(CheckMemlock, StatusOK, "RLIMIT_MEMLOCK unlimited")
	case ipcLock:
		add(CheckMemlock, StatusOK, "RLIMIT_MEMLOCK %s, but CAP_IPC_LOCK lifts it", bytesString(limit))
	case rdma && limit < MemlockMinimum:
		add(CheckMemlock, StatusMissing, "RLIMIT_MEMLOCK %s: RDMA registers NCCL's buffers and needs it unlimited (ulimit -l unlimited, or CAP_IPC_LOCK)", bytesString(limit))
	case rdma:
		add(CheckMemlock, StatusWarn, "RLIMIT_MEMLOCK %s: NCCL's documentation asks for unlimited", bytesString(limit))
	default:
		add(CheckMemlock, StatusInfo, "RLIMIT_MEMLOCK %s (only RDMA needs it)", bytesString(limit))
	}

	// GPUDirect RDMA's kernel side.
	if topo != nil {
		g := topo.GPUDirect
		kernel := fmt.Sprintf("nvidia_peermem %s, dma-buf %s", yesNo(g.PeermemLoaded.Valid, g.PeermemLoaded.V, "loaded", "not loaded"),
			yesNo(g.DMABufSupported.Valid, g.DMABufSupported.V, "offered", "not offered"))
		switch {
		case !rdma:
			add(CheckGPUDirect, StatusInfo, "%s", kernel)
		case g.PeermemLoaded.V || g.DMABufSupported.V:
			add(CheckGPUDirect, StatusOK, "%s", kernel)
		default:
			add(CheckGPUDirect, StatusWarn, "%s: RDMA will stage through host memory (load nvidia_peermem, or use a driver and kernel with dma-buf)", kernel)
		}
	}

	// The ports, and what each GPU should use.
	if ports != nil {
		for _, p := range ports.Ports {
			add(CheckNICPorts, StatusInfo, "%s port %d: %s, %s%s", p.Device, p.Port, kindName(p.Kind), stateName(p), rateName(p))
		}
		if len(ports.Ports) == 0 {
			add(CheckNICPorts, StatusInfo, "no RDMA ports")
		}
	}
	for _, e := range r.Networks {
		gdr := "without GPUDirect RDMA"
		if e.GDR {
			gdr = "with GPUDirect RDMA"
		}
		rails := "no usable NIC"
		if len(e.RailNICs) > 0 {
			rails = fmt.Sprintf("rail %s, %s", strings.Join(e.RailNICs, "+"), e.Path)
		}
		if e.Network == nccllog.NetworkSocket {
			gdr = ""
		} else {
			gdr = " " + gdr
		}
		add(CheckNetworkGPU, StatusInfo, "GPU %s: %s%s (%s)", e.GPU, e.Network, gdr, rails)
	}
	return r
}

// libraryDirs are where the loader looks, in its order: LD_LIBRARY_PATH,
// the directories of /etc/ld.so.conf and its includes, the default ones.
func (env Env) libraryDirs() []string {
	var dirs []string
	add := func(d string) {
		if d != "" && filepath.IsAbs(d) && !slices.Contains(dirs, d) {
			dirs = append(dirs, filepath.Clean(d))
		}
	}
	if env.Getenv != nil {
		for d := range strings.SplitSeq(env.Getenv("LD_LIBRARY_PATH"), ":") {
			add(d)
		}
	}
	confs := []string{"/etc/ld.so.conf"}
	more, _ := filepath.Glob(filepath.Join(env.Root, "etc", "ld.so.conf.d", "*.conf"))
	for _, m := range more {
		confs = append(confs, env.onNode(m))
	}
	for _, c := range confs {
		f, err := os.Open(filepath.Join(env.Root, c))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "include") {
				add(line)
			}
		}
		f.Close()
	}
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu",
		"/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib"} {
		add(d)
	}
	return dirs
}

// findLibrary is the file name names: itself where it holds a slash,
// else the first in dirs. "" where none is there.
func (env Env) findLibrary(name string, dirs []string) string {
	if name == "" {
		return ""
	}
	if strings.Contains(name, "/") {
		if _, err := os.Stat(filepath.Join(env.Root, name)); err == nil {
			return name
		}
		return ""
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(env.Root, d, name)); err == nil {
			return filepath.Join(d, name)
		}
	}
	return ""
}

// findPlugin is the network plugin NCCL would load, and the name it looks
// for: NCCL_NET_PLUGIN unset is libnccl-net.so; "none" turns plugins off;
// a name "x" is libnccl-net-x.so, or x itself where that is a file name
// or path (NCCL 2.22 on tries both).
func (env Env) findPlugin(dirs []string) (found, wanted string) {
	v := ""
	if env.Getenv != nil {
		v = env.Getenv("NCCL_NET_PLUGIN")
	}
	switch {
	case v == "":
		wanted = "libnccl-net.so"
	case v == "none":
		return "", "none"
	case strings.Contains(v, "/") || strings.HasSuffix(v, ".so"):
		wanted = v
		if f := env.findLibrary(v, dirs); f != "" {
			return f, wanted
		}
		return "", wanted
	default:
		wanted = "libnccl-net-" + v + ".so"
		if f := env.findLibrary(v, dirs); f != "" {
			return f, wanted
		}
	}
	return env.findLibrary(wanted, dirs), wanted
}

// resolve follows symbolic links of a path below the root, as far as it
// can, and returns the last name (libnccl.so.2 -> libnccl.so.2.21.5).
func (env Env) resolve(path string) string {
	for range 8 {
		target, err := os.Readlink(filepath.Join(env.Root, path))
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return path
}

var versionedName = regexp.MustCompile(`libnccl\.so\.(\d+)\.(\d+)\.(\d+)$`)

// versionFromName reads a version code from a name like
// libnccl.so.2.21.5; 0 where it has none.
func versionFromName(path string) int {
	m := versionedName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return 0
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	patch, _ := strconv.Atoi(m[3])
	if minor > 99 || patch > 99 {
		return 0
	}
	return major*10000 + minor*100 + patch
}

// hasCapIPCLock reads this process's effective capabilities
// (/proc/self/status CapEff) for CAP_IPC_LOCK (14), which lifts the
// memlock limit.
func (env Env) hasCapIPCLock() bool {
	f, err := os.Open(filepath.Join(env.Root, "proc", "self", "status"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<14) != 0
		}
	}
	return false
}

func kindName(k nic.RDMAKind) string {
	if k == "" {
		return "unknown kind"
	}
	return string(k)
}

func stateName(p nic.RDMAPort) string {
	switch up := p.Up(); {
	case up.Valid && up.V:
		return "up"
	case up.Valid:
		return fmt.Sprintf("down (%s, %s)", or(p.State, "?"), or(p.PhysState, "?"))
	}
	return "state unknown"
}

func rateName(p nic.RDMAPort) string {
	if !p.RateBytes.Valid {
		return ""
	}
	return fmt.Sprintf(", %g Gb/s", p.RateBytes.V*8/1e9)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func yesNo(valid, v bool, yes, no string) string {
	switch {
	case !valid:
		return "unknown"
	case v:
		return yes
	}
	return no
}

func bytesString(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// cmpNatural orders names by their text, and a number at their end by
// its value: uverbs2 before uverbs10.
func cmpNatural(a, b string) int {
	ta, na := splitNumber(a)
	tb, nb := splitNumber(b)
	if ta != tb {
		return strings.Compare(ta, tb)
	}
	return na - nb
}

func splitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}

// onNode is the node's name for a path found below the root.
func (env Env) onNode(p string) string {
	rel, err := filepath.Rel(env.Root, p)
	if err != nil {
		return p
	}
	return "/" + filepath.ToSlash(rel)
}

// Source samples the report for the daemon: the topology and NIC readers
// give what the NICs call for, env the rest.
type Source struct {
	Env      Env
	Topology func() *numa.Topology
	NICs     func() *nic.Snapshot
	// Ready are closed once the topology and NICs have been read once
	// (their samplers' FirstSampled): a sample waits for them (within its
	// deadline), so that the daemon's first report knows what the NICs
	// call for.
	Ready []<-chan struct{}
}

// Sample implements sampler.Source.
func (s *Source) Sample(ctx context.Context) (*Report, error) {
	for _, ready := range s.Ready {
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("the topology and NICs were not read in time: %w", context.Cause(ctx))
		}
	}
	var topo *numa.Topology
	var ports *nic.Snapshot
	if s.Topology != nil {
		topo = s.Topology()
	}
	if s.NICs != nil {
		ports = s.NICs()
	}
	return Check(s.Env, topo, ports), ctx.Err()
}

// expectedNetwork is the RDMA network the GPUs expect ("" for none): the
// first GPU's that is not sockets.
func expectedNetwork(es []probes.GPUNetwork) string {
	for _, e := range es {
		if e.Network != nccllog.NetworkSocket {
			return e.Network
		}
	}
	return ""
}
