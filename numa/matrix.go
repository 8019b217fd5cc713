package numa

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MatrixGPU is a GPU as the matrix needs it: its address and, for each
// other GPU by position, how many NVLinks join them.
type MatrixGPU struct {
	Address string
	NVLinks []int
}

// Matrix prints the topology the way nvidia-smi topo -m does, so the two
// can be compared line by line: GPU rows then NIC rows, each cell the
// NV# or PCIe path class, then the GPU's CPU and NUMA affinity. Like
// nvidia-smi it lists only NICs with an RDMA device. gpus are in NVML
// index order.
func (t *Topology) Matrix(gpus []MatrixGPU) string {
	var nics []*PCIDevice
	for _, n := range t.NICs {
		if len(n.RDMANames) > 0 {
			nics = append(nics, n)
		}
	}
	// nvidia-smi numbers NICs in RDMA device order: mlx5_2 before mlx5_10.
	slices.SortStableFunc(nics, func(a, b *PCIDevice) int { return NaturalCompare(a.RDMANames[0], b.RDMANames[0]) })
	devs := make([]*PCIDevice, 0, len(gpus)+len(nics))
	for _, g := range gpus {
		d := t.Device(g.Address)
		if d == nil {
			d = &PCIDevice{Address: g.Address, NUMANode: -1}
		}
		devs = append(devs, d)
	}
	devs = append(devs, nics...)
	name := func(i int) string {
		if i < len(gpus) {
			return fmt.Sprintf("GPU%d", i)
		}
		return fmt.Sprintf("NIC%d", i-len(gpus))
	}

	var b strings.Builder
	for i := range devs {
		b.WriteString("\t" + name(i))
	}
	b.WriteString("\tCPU Affinity\tNUMA Affinity\n")
	for i, a := range devs {
		b.WriteString(name(i))
		for j, c := range devs {
			b.WriteByte('\t')
			switch {
			case i == j:
				b.WriteString(" X ")
			case i < len(gpus) && j < len(gpus) && gpus[i].NVLinks[j] > 0:
				fmt.Fprintf(&b, "NV%d", gpus[i].NVLinks[j])
			case a.HostBridge == "" || c.HostBridge == "":
				b.WriteString("N/A")
			default:
				b.WriteString(t.Path(a, c).String())
			}
		}
		if i < len(gpus) {
			cpus, node := "N/A", "N/A"
			if a.LocalCPUs.Valid {
				cpus = a.LocalCPUs.V.String()
			}
			if n := t.NodeOf(a); n >= 0 {
				node = fmt.Sprint(n)
			}
			b.WriteString("\t" + cpus + "\t" + node)
		}
		b.WriteByte('\n')
	}
	if len(nics) > 0 {
		b.WriteString("\nNIC Legend:\n\n")
		for i, n := range nics {
			fmt.Fprintf(&b, "  NIC%d: %s\n", i, n.RDMANames[0])
		}
	}
	return b.String()
}

// NaturalCompare orders names with their digit runs compared as numbers:
// mlx5_2 before mlx5_10, as nvidia-smi numbers NICs. Runs are read 18
// digits at a time, so no run overflows.
func NaturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da != "" && db != "" {
			x, _ := strconv.ParseUint(da, 10, 64)
			y, _ := strconv.ParseUint(db, 10, 64)
			if x != y {
				if x < y {
					return -1
				}
				return 1
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && i < 18 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}
