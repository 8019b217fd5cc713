package numa

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sysfs"
)

// NUMANode is one NUMA node: its CPUs, memory, distances and allocation
// counters.
type NUMANode struct {
	ID   int
	CPUs CPUSet
	// MemTotal and MemFree are in bytes.
	MemTotal, MemFree sampler.Opt[uint64]
	// Distances are the node's row of the SLIT, by node ID: 10 is local.
	Distances map[int]int
	// Stat holds numastat counters (pages): numa_hit, numa_miss,
	// numa_foreign, interleave_hit, local_node, other_node.
	Stat map[string]uint64
}

// NUMAStatCounters are the numastat counters in the order they are
// exported; kernels print them in this order too.
var NUMAStatCounters = []string{"numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"}

// ReadNUMANodes reads every online node under root. A kernel without NUMA
// support has no node directory; that is no error and yields no nodes.
func ReadNUMANodes(root hostfs.Root) ([]NUMANode, error) {
	f := reader{root}
	var t sampler.Tally
	online := sysfs.OptString(&t, f.sys("devices", "system", "node", "online"))
	var ids []int
	if online.Valid {
		set, err := ParseCPUList(online.V) // same list format
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.sys("devices", "system", "node", "online"), err)
		}
		ids = set.CPUs()
	} else {
		// Older or trimmed trees: take the node directories that exist.
		for _, name := range globNames(f.sys("devices", "system", "node", "node*")) {
			if id, err := strconv.Atoi(strings.TrimPrefix(name, "node")); err == nil {
				ids = append(ids, id)
			}
		}
	}
	nodes := make([]NUMANode, 0, len(ids))
	for _, id := range ids {
		nodes = append(nodes, f.readNode(&t, id, ids))
	}
	return nodes, t.Err()
}

func (f reader) readNode(t *sampler.Tally, id int, ids []int) NUMANode {
	dir := f.sys("devices", "system", "node", "node"+strconv.Itoa(id))
	n := NUMANode{ID: id, Distances: map[int]int{}, Stat: map[string]uint64{}}
	if s := sysfs.OptString(t, filepath.Join(dir, "cpulist")); s.Valid {
		cpus, err := ParseCPUList(s.V)
		t.Add(wrapPath(dir, "cpulist", err))
		n.CPUs = cpus
	}
	if s := sysfs.OptString(t, filepath.Join(dir, "distance")); s.Valid {
		dist, err := parseDistances(s.V, ids)
		t.Add(wrapPath(dir, "distance", err))
		n.Distances = dist
	}
	if s := sysfs.OptString(t, filepath.Join(dir, "numastat")); s.Valid {
		stat, err := parseKeyValues(s.V)
		t.Add(wrapPath(dir, "numastat", err))
		n.Stat = stat
	}
	if s := sysfs.OptString(t, filepath.Join(dir, "meminfo")); s.Valid {
		mem, err := parseNodeMeminfo(s.V)
		t.Add(wrapPath(dir, "meminfo", err))
		if v, ok := mem["MemTotal"]; ok {
			n.MemTotal = sampler.Some(v)
		}
		if v, ok := mem["MemFree"]; ok {
			n.MemFree = sampler.Some(v)
		}
	}
	return n
}

func wrapPath(dir, file string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
}

// parseDistances parses a node's distance row ("10 21"), whose columns are
// the online nodes in order.
func parseDistances(s string, ids []int) (map[int]int, error) {
	fields := strings.Fields(s)
	if len(fields) != len(ids) {
		return map[int]int{}, fmt.Errorf("%d distances for %d nodes", len(fields), len(ids))
	}
	out := make(map[int]int, len(fields))
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || v > 255 {
			return map[int]int{}, fmt.Errorf("distance %q is not 0-255", f)
		}
		out[ids[i]] = v
	}
	return out, nil
}

// parseKeyValues parses "name value" lines, as numastat and vmstat print.
// Lines that do not parse are skipped and reported, the rest kept.
func parseKeyValues(s string) (map[string]uint64, error) {
	out := map[string]uint64{}
	var bad error
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			bad = fmt.Errorf("line %q: want \"name value\"", sc.Text())
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			bad = fmt.Errorf("line %q: %w", sc.Text(), err)
			continue
		}
		out[f[0]] = v
	}
	return out, bad
}

// parseNodeMeminfo parses a node's meminfo ("Node 0 MemTotal:  4812272
// kB") into bytes by field name; HugePages_* counts stay page counts.
func parseNodeMeminfo(s string) (map[string]uint64, error) {
	out := map[string]uint64{}
	var bad error
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 || f[0] != "Node" || !strings.HasSuffix(f[2], ":") {
			bad = fmt.Errorf("line %q: want \"Node <n> <name>: <value> [kB]\"", sc.Text())
			continue
		}
		v, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			bad = fmt.Errorf("line %q: %w", sc.Text(), err)
			continue
		}
		if len(f) > 4 && f[4] == "kB" {
			if v > (1<<64-1)/1024 {
				bad = fmt.Errorf("line %q: value overflows", sc.Text())
				continue
			}
			v *= 1024
		}
		out[strings.TrimSuffix(f[2], ":")] = v
	}
	return out, bad
}
