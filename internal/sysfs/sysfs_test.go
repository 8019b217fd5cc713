package sysfs

import "testing"

func TestChainOf(t *testing.T) {
	for _, tc := range []struct {
		in, hb string
		chain  []string
	}{
		{"pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0", "pci0000:15",
			[]string{"0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"}},
		{"pci0000:00/0000:00:03.0/virtio2/net/eth0", "pci0000:00", []string{"0000:00:03.0"}},
		{"pci0000:00/0000:00:06.0", "pci0000:00", []string{"0000:00:06.0"}},
		{"virtual/net/lo", "", nil},
	} {
		hb, chain := ChainOf(tc.in)
		if hb != tc.hb || len(chain) != len(tc.chain) {
			t.Errorf("ChainOf(%q) = %q %v, want %q %v", tc.in, hb, chain, tc.hb, tc.chain)
			continue
		}
		for i := range chain {
			if chain[i] != tc.chain[i] {
				t.Errorf("ChainOf(%q) = %v, want %v", tc.in, chain, tc.chain)
			}
		}
	}
}
