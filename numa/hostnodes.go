package numa

import "slices"

// HostNodes are the NUMA nodes a host buffer for the device at addr can be
// placed on to measure the path from each: every node with memory, the
// device's own first, then the rest by distance from it (so a truncated
// list keeps the nearest). Nil when the kernel shows no nodes.
func (t *Topology) HostNodes(addr string) []int {
	if t == nil {
		return nil
	}
	var nodes []int
	for _, n := range t.Nodes {
		if !n.MemTotal.Valid || n.MemTotal.V > 0 {
			nodes = append(nodes, n.ID)
		}
	}
	own := -1
	if d := t.Device(addr); d != nil {
		own = t.NodeOf(d)
	}
	if !slices.Contains(nodes, own) {
		return nodes
	}
	var dist map[int]int
	if n := t.Node(own); n != nil {
		dist = n.Distances
	}
	slices.SortStableFunc(nodes, func(a, b int) int {
		rank := func(n int) int {
			if n == own {
				return -1
			}
			if d, ok := dist[n]; ok {
				return d
			}
			return 1 << 20
		}
		return rank(a) - rank(b)
	})
	return nodes
}
