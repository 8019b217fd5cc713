package collector_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/gpulink/gpulink_exporter/collector"
	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/nic"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/scrape/scrapetest"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
)

// nicWrite writes name/content pairs under root/sys/dir; a name ending in
// "@" is a symlink to the content.
func nicWrite(t *testing.T, root, dir string, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		name, link := strings.CutSuffix(kv[i], "@")
		p := filepath.Join(root, "sys", dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if link {
			err = os.Symlink(kv[i+1], p)
		} else {
			err = os.WriteFile(p, []byte(kv[i+1]+"\n"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// nicTree is a small machine: an NDR InfiniBand port on NUMA node 1, a
// RoCE port that is down with its symbol_error unreadable, an EFA device
// with no NUMA node, a virtio eth0 and lo.
func nicTree(t *testing.T) hostfs.Root {
	root := t.TempDir()
	ib := "devices/pci0000:00/0000:00:01.0/0000:01:00.0"
	roce := "devices/pci0000:00/0000:00:01.0/0000:02:00.0"
	efa := "devices/pci0000:10/0000:10:01.0/0000:11:00.0"
	nicWrite(t, root, ib, "numa_node", "1", "current_link_speed", "32.0 GT/s PCIe", "current_link_width", "16")
	nicWrite(t, root, roce, "numa_node", "1")
	nicWrite(t, root, efa, "numa_node", "-1")
	for _, p := range []struct{ fn, dev, state, phys, rate, layer string }{
		{ib, "mlx5_0", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"},
		{roce, "mlx5_1", "1: DOWN", "3: Disabled", "200 Gb/sec (4X HDR)", "Ethernet"},
	} {
		dir := filepath.Join(p.fn, "infiniband", p.dev)
		nicWrite(t, root, "class/infiniband", p.dev+"@", "../../"+dir)
		nicWrite(t, root, filepath.Join(dir, "ports/1"), "state", p.state, "phys_state", p.phys, "rate", p.rate,
			"link_layer", p.layer,
			"counters/port_rcv_data", "250", "counters/port_xmit_data", "500", "counters/symbol_error", "3",
			"counters/link_downed", "1", "counters/port_xmit_wait", "77",
			"hw_counters/out_of_sequence", "9", "hw_counters/rp_cnp_handled", "4", "hw_counters/rnr_nak_retry_err", "2")
	}
	// The RoCE port's symbol_error cannot be read: a directory in its place.
	p := filepath.Join(root, "sys", roce, "infiniband/mlx5_1/ports/1/counters/symbol_error")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(efa, "infiniband/rdmap17s0")
	nicWrite(t, root, "class/infiniband", "rdmap17s0@", "../../"+dir)
	nicWrite(t, root, filepath.Join(dir, "ports/1"), "state", "4: ACTIVE", "phys_state", "5: LinkUp",
		"rate", "100 Gb/sec (4X EDR)", "link_layer", "Unspecified", "hw_counters/rx_bytes", "1234",
		"hw_counters/retrans_pkts", "5", "hw_counters/rx_drops", "6", "hw_counters/retrans_bytes", "40960")
	nicWrite(t, root, efa, "driver@", "../../../../bus/pci/drivers/efa")

	virtio := "devices/pci0000:00/0000:00:03.0/virtio2/net/eth0"
	nicWrite(t, root, "devices/pci0000:00/0000:00:03.0", "numa_node", "-1")
	nicWrite(t, root, virtio, "operstate", "up", "carrier", "1", "speed", "-1", "carrier_changes", "2",
		"statistics/rx_bytes", "1000", "statistics/tx_bytes", "2000", "statistics/rx_errors", "0",
		"statistics/tx_errors", "0", "statistics/rx_dropped", "3", "statistics/tx_dropped", "0")
	nicWrite(t, root, "class/net", "eth0@", "../../"+virtio)
	nicWrite(t, root, "devices/virtual/net/lo", "operstate", "unknown", "statistics/rx_bytes", "5")
	nicWrite(t, root, "class/net", "lo@", "../../devices/virtual/net/lo")
	return hostfs.Under(root)
}

func nicRegistry(t *testing.T, fs hostfs.Root) (*prometheus.Registry, *collector.NICCollector) {
	t.Helper()
	s := sampler.New[*nic.Snapshot]("nic", &nic.Reader{FS: fs}, sampler.Options{Interval: time.Hour})
	s.SampleOnce(context.Background())
	if s.Latest() == nil {
		t.Fatal("no NIC snapshot")
	}
	c := collector.NewNICCollector(s)
	scrapetest.CheckText(t, c)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return reg, c
}

// nicProfileFS is a committed fixture tree.
func nicProfileFS(t *testing.T, profile string) hostfs.Root {
	root := machine.Load(t, profile)
	return hostfs.Under(root)
}

func TestNICCollectorLint(t *testing.T) {
	// Series: per RDMA port info, up, two states and rate, then one per
	// counter the device has; per interface info, up, speed where known,
	// carrier changes and six statistics.
	for _, tc := range []struct {
		name   string
		series int
	}{
		{"tree", 12 + 11 + 8 + 9 + 3},
		// 9 mlx5 ports x (5 + 10 standard + 9 driver counters), less
		// mlx5_1's unreadable symbol_error; 9 interfaces x 10, less
		// ibp92s0's unknown speed.
		{"dgx-h100-faults", 9*24 - 1 + 9*10 - 1},
		// 32 EFA ports x (5 + 8 counters); ens32 has no speed.
		{"aws-p5", 32*13 + 9},
		{"h200-vm", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := nicProfileFS
			if tc.name == "tree" {
				fs = func(t *testing.T, _ string) hostfs.Root { return nicTree(t) }
			}
			_, c := nicRegistry(t, fs(t, tc.name))
			problems, err := testutil.CollectAndLint(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("%s: %s", p.Metric, p.Text)
			}
			if n := testutil.CollectAndCount(c); n != tc.series {
				t.Errorf("%d series, want %d", n, tc.series)
			}
		})
	}
}

func TestNICCollectorMetrics(t *testing.T) {
	reg, _ := nicRegistry(t, nicTree(t))
	want := `
# HELP gpulink_nic_port_info RDMA port identity; value 1. kind is infiniband, roce, iwarp or efa; pci_bus_id is empty for a software device, numa_node where the platform does not say.
# TYPE gpulink_nic_port_info gauge
gpulink_nic_port_info{device="mlx5_0",kind="infiniband",link_layer="InfiniBand",numa_node="1",pci_bus_id="0000:01:00.0",port="1"} 1
gpulink_nic_port_info{device="mlx5_1",kind="roce",link_layer="Ethernet",numa_node="1",pci_bus_id="0000:02:00.0",port="1"} 1
gpulink_nic_port_info{device="rdmap17s0",kind="efa",link_layer="Unspecified",numa_node="",pci_bus_id="0000:11:00.0",port="1"} 1
# HELP gpulink_nic_port_up 1 if the port's logical state is ACTIVE and its physical state LinkUp.
# TYPE gpulink_nic_port_up gauge
gpulink_nic_port_up{device="mlx5_0",port="1"} 1
gpulink_nic_port_up{device="mlx5_1",port="1"} 0
gpulink_nic_port_up{device="rdmap17s0",port="1"} 1
# HELP gpulink_nic_port_physical_state_id Physical port state: 1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 Phy Test.
# TYPE gpulink_nic_port_physical_state_id gauge
gpulink_nic_port_physical_state_id{device="mlx5_0",port="1"} 5
gpulink_nic_port_physical_state_id{device="mlx5_1",port="1"} 3
gpulink_nic_port_physical_state_id{device="rdmap17s0",port="1"} 5
# HELP gpulink_nic_port_rate_bytes_per_second Rate the port's link trained at (lanes times lane speed), one direction.
# TYPE gpulink_nic_port_rate_bytes_per_second gauge
gpulink_nic_port_rate_bytes_per_second{device="mlx5_0",port="1"} 5e+10
gpulink_nic_port_rate_bytes_per_second{device="mlx5_1",port="1"} 2.5e+10
gpulink_nic_port_rate_bytes_per_second{device="rdmap17s0",port="1"} 1.25e+10
# HELP gpulink_nic_port_receive_bytes_total Bytes received (port_rcv_data times 4; EFA rx_bytes).
# TYPE gpulink_nic_port_receive_bytes_total counter
gpulink_nic_port_receive_bytes_total{device="mlx5_0",port="1"} 1000
gpulink_nic_port_receive_bytes_total{device="mlx5_1",port="1"} 1000
gpulink_nic_port_receive_bytes_total{device="rdmap17s0",port="1"} 1234
# HELP gpulink_nic_port_symbol_errors_total Minor link errors detected on one or more physical lanes (symbol_error).
# TYPE gpulink_nic_port_symbol_errors_total counter
gpulink_nic_port_symbol_errors_total{device="mlx5_0",port="1"} 3
# HELP gpulink_nic_port_retransmitted_packets_total Packets retransmitted (EFA retrans_pkts). mlx5 does not count these; see nak_sequence_errors and local_ack_timeouts.
# TYPE gpulink_nic_port_retransmitted_packets_total counter
gpulink_nic_port_retransmitted_packets_total{device="rdmap17s0",port="1"} 5
# HELP gpulink_nic_port_rnr_naks_total RNR (receiver not ready) NAKs this port received as a sender: the responder had no receive buffer posted, and the request waited and was retried (mlx5 rnr_nak_retry_err). A queue pair that runs out of RNR retries fails.
# TYPE gpulink_nic_port_rnr_naks_total counter
gpulink_nic_port_rnr_naks_total{device="mlx5_0",port="1"} 2
gpulink_nic_port_rnr_naks_total{device="mlx5_1",port="1"} 2
# HELP gpulink_nic_port_retransmitted_bytes_total Bytes retransmitted (EFA retrans_bytes).
# TYPE gpulink_nic_port_retransmitted_bytes_total counter
gpulink_nic_port_retransmitted_bytes_total{device="rdmap17s0",port="1"} 40960
# HELP gpulink_nic_port_cnp_handled_total Congestion notification packets this port acted on by lowering its send rate (mlx5 rp_cnp_handled).
# TYPE gpulink_nic_port_cnp_handled_total counter
gpulink_nic_port_cnp_handled_total{device="mlx5_0",port="1"} 4
gpulink_nic_port_cnp_handled_total{device="mlx5_1",port="1"} 4
# HELP gpulink_net_interface_info Physical network interface identity; value 1. Virtual interfaces are not exported. numa_node is empty where the platform does not say.
# TYPE gpulink_net_interface_info gauge
gpulink_net_interface_info{device="eth0",numa_node="",pci_bus_id="0000:00:03.0"} 1
# HELP gpulink_net_interface_up 1 if the interface's operstate is up (its carrier where the driver reports operstate unknown).
# TYPE gpulink_net_interface_up gauge
gpulink_net_interface_up{device="eth0"} 1
# HELP gpulink_net_interface_receive_drops_total Received packets dropped.
# TYPE gpulink_net_interface_receive_drops_total counter
gpulink_net_interface_receive_drops_total{device="eth0"} 3
`
	err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gpulink_nic_port_info", "gpulink_nic_port_up", "gpulink_nic_port_physical_state_id",
		"gpulink_nic_port_rate_bytes_per_second", "gpulink_nic_port_receive_bytes_total",
		"gpulink_nic_port_symbol_errors_total", "gpulink_nic_port_retransmitted_packets_total",
		"gpulink_nic_port_cnp_handled_total", "gpulink_nic_port_rnr_naks_total", "gpulink_nic_port_retransmitted_bytes_total",
		"gpulink_net_interface_info", "gpulink_net_interface_up",
		"gpulink_net_interface_receive_drops_total",
		// Absent values give no series: virtio's speed is -1.
		"gpulink_net_interface_speed_bytes_per_second")
	if err != nil {
		t.Error(err)
	}
}

// TestNICPromtoolCheckMetrics runs the real promtool over the NIC
// families. make test sets PROMTOOL; a plain go test skips it.
func TestNICPromtoolCheckMetrics(t *testing.T) {
	for name, fs := range map[string]hostfs.Root{"tree": nicTree(t), "dgx-h100-faults": nicProfileFS(t, "dgx-h100-faults"),
		"aws-p5": nicProfileFS(t, "aws-p5")} {
		reg, _ := nicRegistry(t, fs)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(&body, mf); err != nil {
				t.Fatal(err)
			}
		}
		promtoolCheck(t, name, body.String())
	}
}
