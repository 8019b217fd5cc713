package collectives

import (
	"fmt"
	"os"
	"strings"
)

// The collectives child sets these before NCCL is loaded (NCCL reads its
// environment once, at its first call). Every other NCCL_* variable the
// operator set (interfaces, IB HCAs, plugins, P2P and SHM switches)
// reaches NCCL unchanged, so the probe takes the paths jobs take.
//
//   - NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS: the transport NCCL chose for
//     each connection is only in its INFO log. Each "Channel ... via" line
//     is logged as INIT|P2P, INIT|SHM or INIT|NET, and the CollNet and NVLS
//     setup as INIT|NET and INIT|NVLS (src/transport/*.cc, 2.18 to 2.27);
//     the lines that say which network carried a NET connection are INIT
//     ("Using network IB", src/init.cc) and INIT|NET (the IB transport's
//     device list with each port's link layer, net_ib.cc; aws-ofi-nccl's
//     "Selected provider is efa"), 2.14 to 2.30. So INIT alone would do;
//     the transports' own subsystems are named as well in case a version
//     logs one of them without INIT (NET also brings NCCL's per-NIC
//     "GPU Direct RDMA Enabled/Disabled" lines, for a person reading the
//     log; nothing parses them).
//   - NCCL_DEBUG_FILE: a private file, read back for the transports. Never
//     stdout, which carries the round's JSON.
//   - NCCL_NVLS_ENABLE=0 unless the operator allows NVLS (--nvls): on a
//     shared machine a program using multicast can put the host's GPUs
//     out of service, and NVLink SHARP is what a probe must not start.
//     With --nvls, the operator's setting, or NCCL's default, stands.
//
// An operator's NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE are
// overridden: the probe needs the INFO lines, in its own file.
const ncclDebugSubsystems = "INIT,P2P,SHM,NET"

// setNCCLEnvironment sets the variables above in this process and
// returns the debug file's path; the caller removes it.
func setNCCLEnvironment(nvls bool) (string, error) {
	f, err := os.CreateTemp("", "gpulink-nccl-*.log")
	if err != nil {
		return "", fmt.Errorf("NCCL debug file: %w", err)
	}
	path := f.Name()
	f.Close()
	// NCCL expands %h and %p in the name: a directory with a % in it would
	// send the log elsewhere, and the transports would go unreported.
	if strings.Contains(path, "%") {
		os.Remove(path)
		return "", fmt.Errorf("NCCL debug file %s: NCCL would expand the %% in its name; set TMPDIR to a directory without one", path)
	}
	set := map[string]string{
		"NCCL_DEBUG":        "INFO",
		"NCCL_DEBUG_SUBSYS": ncclDebugSubsystems,
		"NCCL_DEBUG_FILE":   path,
	}
	if !nvls {
		set["NCCL_NVLS_ENABLE"] = "0"
	}
	for k, v := range set {
		if err := os.Setenv(k, v); err != nil {
			os.Remove(path)
			return "", fmt.Errorf("setting %s: %w", k, err)
		}
	}
	return path, nil
}
