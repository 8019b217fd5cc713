package probe

import (
	"os"
	"testing"
)

// Every Linux kernel with NUMA support has node 0; one without it answers
// mbind with ENOSYS, which is what machines in CI may do.
func TestAllocHostBindsToNode(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/node/node0"); err != nil {
		t.Skip("no NUMA node 0 on this kernel")
	}
	b, err := allocHost(4<<20, 0)
	if err != nil {
		t.Fatalf("allocHost(node 0): %v", err)
	}
	defer b.free()
	if b.node != 0 || len(b.mem) != 4<<20 {
		t.Fatalf("node %d, %d bytes", b.node, len(b.mem))
	}
	for _, off := range []int{0, 1 << 20, 4<<20 - 1} {
		if n, err := pageNode(b.mem, off); err != nil || n != 0 {
			t.Errorf("page at %d on node %d, %v", off, n, err)
		}
	}
}

func TestAllocHostRefusesAMissingNode(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/node/node0"); err != nil {
		t.Skip("no NUMA support")
	}
	// Node 1000 exists nowhere; the kernel refuses the binding.
	if b, err := allocHost(1<<20, 1000); err == nil {
		b.free()
		t.Fatal("binding to node 1000 succeeded")
	}
}

func TestAllocHostUnbound(t *testing.T) {
	b, err := allocHost(1<<20, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.free()
	if b.node != -1 {
		t.Errorf("unbound buffer says node %d", b.node)
	}
}
