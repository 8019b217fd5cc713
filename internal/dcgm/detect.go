package dcgm

import (
	"net"
	"strings"
	"time"
)

// EngineListening reports whether something accepts a connection at a
// host engine address (as Config.Address takes it) within timeout. It is a
// hint for the log, not a DCGM handshake, and loads no library: one
// connect, closed at once. A vsock address is never probed.
//
// The exporter does not turn the DCGM source on by itself when an engine
// answers: watching the profiling fields takes the GPU's performance
// counters, and while DCGM holds them Nsight Compute and other CUPTI
// profilers on that GPU fail. That is the operator's call
// (--collector.dcgm), so main only says that an engine is there.
func EngineListening(address string, timeout time.Duration) bool {
	network, addr := "tcp", address
	switch {
	case strings.HasPrefix(address, "/"):
		network = "unix"
	case strings.HasPrefix(address, "unix://"):
		network, addr = "unix", strings.TrimPrefix(address, "unix://")
	case strings.HasPrefix(address, "tcp://"):
		addr = strings.TrimPrefix(address, "tcp://")
	case strings.Contains(address, "://"):
		return false
	}
	if network == "tcp" {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			addr = net.JoinHostPort(strings.Trim(addr, "[]"), "5555") // DCGM's default port
		}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
