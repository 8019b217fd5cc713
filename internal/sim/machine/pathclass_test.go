package machine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The path classes the profiles' doc comments give, derived here from the
// model itself by nvidia-smi topo -m's definitions, so the comments (and
// the tables tests of the numa package are written from) cannot drift
// from the trees.

// chain returns the host bridge above addr and the functions from its
// root bus down to addr.
func chain(m *Machine, addr string) (*HostBridge, []*Device) {
	var hb *HostBridge
	var path []*Device
	for d := m.Device(addr); d != nil; d = m.Parent(d.Addr) {
		path = append([]*Device{d}, path...)
	}
	m.walk(func(h *HostBridge, _, d *Device) bool {
		if d == path[0] {
			hb = h
		}
		return hb == nil
	})
	return hb, path
}

// pathClass classifies the path between two functions: PIX when they meet
// inside one switch with no other switch on the path (or are functions
// of one device), PXB when they meet below the host bridge but the path
// crosses more than one switch, PHB when they meet only at the host
// bridge, NODE for different host bridges on one NUMA node, SYS across
// nodes.
func pathClass(m *Machine, a, b string) string {
	ha, ca := chain(m, a)
	hb, cb := chain(m, b)
	if ha != hb {
		if ca[len(ca)-1].NUMANode == cb[len(cb)-1].NUMANode {
			return "NODE"
		}
		return "SYS"
	}
	i := 0
	for i < len(ca) && i < len(cb) && ca[i] == cb[i] {
		i++
	}
	if i == 0 {
		return "PHB"
	}
	switches := 0
	for _, d := range append(ca[i-1:], cb[i:]...) {
		if d.Kind == UpstreamPort {
			switches++
		}
	}
	if switches <= 1 {
		return "PIX"
	}
	return "PXB"
}

// nics returns the addresses of the functions with RDMA devices, in
// device name order (mlx5_0, mlx5_1, ...), then those with only network
// interfaces.
func nics(m *Machine) (addrs, names []string) {
	type nic struct{ addr, name string }
	var rdma, eth []nic
	m.walk(func(_ *HostBridge, _, d *Device) bool {
		switch {
		case len(d.RDMA) > 0:
			rdma = append(rdma, nic{d.Addr, d.RDMA[0].Name})
		case len(d.Net) > 0:
			eth = append(eth, nic{d.Addr, d.Net[0].Name})
		}
		return true
	})
	slices.SortFunc(rdma, func(a, b nic) int {
		if len(a.name) != len(b.name) {
			return len(a.name) - len(b.name)
		}
		return strings.Compare(a.name, b.name)
	})
	for _, n := range append(rdma, eth...) {
		addrs, names = append(addrs, n.addr), append(names, n.name)
	}
	return addrs, names
}

// matrix prints GPU rows and NIC columns of path classes.
func matrix(m *Machine) string {
	addrs, names := nics(m)
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %s\n", "", strings.Join(names, " "))
	for i, g := range m.GPUs() {
		fmt.Fprintf(&b, "GPU%-2d", i)
		for _, n := range addrs {
			fmt.Fprintf(&b, " %s", pathClass(m, g.Addr, n))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestPathClasses(t *testing.T) {
	for _, c := range []struct {
		m    *Machine
		want string
	}{
		{DGXH100(), `
      mlx5_0 mlx5_1 mlx5_2 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_7 mlx5_8 mlx5_9
GPU0  PIX PIX NODE NODE SYS SYS SYS SYS NODE SYS
GPU1  PIX PIX NODE NODE SYS SYS SYS SYS NODE SYS
GPU2  NODE NODE PIX PIX SYS SYS SYS SYS NODE SYS
GPU3  NODE NODE PIX PIX SYS SYS SYS SYS NODE SYS
GPU4  SYS SYS SYS SYS PIX PIX NODE NODE SYS NODE
GPU5  SYS SYS SYS SYS PIX PIX NODE NODE SYS NODE
GPU6  SYS SYS SYS SYS NODE NODE PIX PIX SYS NODE
GPU7  SYS SYS SYS SYS NODE NODE PIX PIX SYS NODE
`},
		{DGXH100FarNICs(), `
      mlx5_0 mlx5_1 mlx5_2 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_7 mlx5_8
GPU0  PIX PIX NODE NODE NODE NODE NODE NODE NODE
GPU1  PIX PIX NODE NODE NODE NODE NODE NODE NODE
GPU2  NODE NODE PIX PIX NODE NODE NODE NODE NODE
GPU3  NODE NODE PIX PIX NODE NODE NODE NODE NODE
GPU4  SYS SYS SYS SYS SYS SYS SYS SYS SYS
GPU5  SYS SYS SYS SYS SYS SYS SYS SYS SYS
GPU6  SYS SYS SYS SYS SYS SYS SYS SYS SYS
GPU7  SYS SYS SYS SYS SYS SYS SYS SYS SYS
`},
		{DGXH100TwoNICs(), `
      mlx5_2 mlx5_6
GPU0  NODE SYS
GPU1  NODE SYS
GPU2  PIX SYS
GPU3  PIX SYS
GPU4  SYS NODE
GPU5  SYS NODE
GPU6  SYS PIX
GPU7  SYS PIX
`},
		{H200VM(), `
      eth0
GPU0  PHB
GPU1  PHB
`},
	} {
		if got := "\n" + matrix(c.m); got != c.want {
			t.Errorf("%s:\ngot%swant%s", c.m.Name, got, c.want)
		}
	}

	// p5: each GPU is PXB to its tray's four EFAs, NODE to the other EFAs
	// of its node and (GPUs 0-3) to the ENA, SYS to the rest.
	{
		m := AWSP5()
		addrs, names := nics(m)
		for gi, g := range m.GPUs() {
			for ni, n := range addrs {
				want := "SYS"
				switch tray := (ni / 4); {
				case names[ni] == "ens32" && gi < 4:
					want = "NODE"
				case names[ni] == "ens32":
				case tray == gi:
					want = "PXB"
				case tray/4 == gi/4:
					want = "NODE"
				}
				if got := pathClass(m, g.Addr, n); got != want {
					t.Errorf("%s: GPU%d-%s %s, want %s", m.Name, gi, names[ni], got, want)
				}
			}
		}
	}
	if got := pathClass(NoGPU(), "0000:41:00.0", "0000:42:00.0"); got != "PHB" {
		t.Errorf("no-gpu: NIC-NVMe %s, want PHB", got)
	}
}
