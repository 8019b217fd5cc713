package probe

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hostBuffer is host memory mapped by the prober itself rather than by the
// driver (cuMemHostAlloc gives no say over the NUMA node), so its pages can
// be bound to one node before they are touched and pinned.
type hostBuffer struct {
	mem []byte
	// node is the node every page was verified on; -1 when unbound.
	node int
}

// Linux memory policy constants (numaif.h).
const (
	mpolBind     = 2
	mpolMFStrict = 1 << 0
	mpolMFMove   = 1 << 1
	mpolFNode    = 1 << 0
	mpolFAddr    = 1 << 1
)

// allocHost maps size bytes. With node >= 0 the pages are bound to that
// node, faulted in there, and checked: a buffer whose pages landed
// elsewhere (the node is full, or a cpuset forbids it) is an error, since a
// result labelled with the wrong node would mislead.
func allocHost(size int64, node int) (*hostBuffer, error) {
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of host memory: %w", size, err)
	}
	b := &hostBuffer{mem: mem, node: -1}
	if node >= 0 {
		if err := mbind(mem, node); err != nil {
			b.free()
			return nil, fmt.Errorf("binding host memory to NUMA node %d: %w", node, err)
		}
	}
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		mem[i] = 0
	}
	if node >= 0 {
		for _, off := range []int{0, len(mem) / 2, len(mem) - 1} {
			got, err := pageNode(mem, off)
			if err != nil {
				b.free()
				return nil, fmt.Errorf("checking the NUMA node of host memory: %w", err)
			}
			if got != node {
				b.free()
				return nil, fmt.Errorf("host memory bound to NUMA node %d has pages on node %d", node, got)
			}
		}
		b.node = node
	}
	return b, nil
}

func (b *hostBuffer) free() {
	if b.mem != nil {
		unix.Munmap(b.mem)
		b.mem = nil
	}
}

func mbind(mem []byte, node int) error {
	if node >= 64*16 {
		return fmt.Errorf("node %d beyond the %d nodes supported", node, 64*16)
	}
	var mask [16]uint64
	mask[node/64] = 1 << (node % 64)
	_, _, errno := unix.Syscall6(unix.SYS_MBIND,
		uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)),
		mpolBind, uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64+1),
		mpolMFStrict|mpolMFMove)
	if errno != 0 {
		return errno
	}
	return nil
}

// pageNode asks the kernel which node the page holding mem[off] is on.
func pageNode(mem []byte, off int) (int, error) {
	var node int32
	_, _, errno := unix.Syscall6(unix.SYS_GET_MEMPOLICY,
		uintptr(unsafe.Pointer(&node)), 0, 0,
		uintptr(unsafe.Pointer(&mem[off])), mpolFNode|mpolFAddr, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(node), nil
}
