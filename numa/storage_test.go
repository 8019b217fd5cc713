package numa_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/internal/hostfs"
	"github.com/gpulink/gpulink_exporter/internal/sampler"
	"github.com/gpulink/gpulink_exporter/internal/sim/machine"
	"github.com/gpulink/gpulink_exporter/numa"
)

// withDrives adds to the DGX H100 tree what the kernel shows of its NVMe
// drives and the filesystems on them: drive 0000:1a:00.0 partitioned, its
// second partition ext4 on /; drives 0000:3c:00.0 and 0000:9c:00.0 in an
// md RAID 0 with XFS on /raid (as DGX OS sets its data drives up); drive
// 0000:bc:00.0 behind a native-multipath head, on /scratch. tmpfs and
// overlay mounts sit on no drive.
func withDrives(t *testing.T) hostfs.Root {
	t.Helper()
	root := machine.Load(t, "dgx-h100")
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	// The profile's own block devices (its RAID over the four drives)
	// give way to these.
	for _, p := range []string{"dev/block", "devices/virtual/block"} {
		if err := os.RemoveAll(filepath.Join(sys, p)); err != nil {
			t.Fatal(err)
		}
	}
	dirs := map[string]string{ // major:minor -> directory under sys/devices
		"259:0": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0/nvme/nvme0/nvme0n1",
		"259:1": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0/nvme/nvme0/nvme0n1/nvme0n1p1",
		"259:2": "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0/nvme/nvme0/nvme0n1/nvme0n1p2",
		"259:3": "pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:02.0/0000:3c:00.0/nvme/nvme1/nvme1n1",
		"259:4": "pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:02.0/0000:9c:00.0/nvme/nvme2/nvme2n1",
		"9:0":   "virtual/block/md0",
		"259:5": "virtual/nvme-subsystem/nvme-subsys3/nvme3n1",
		"259:6": "pci0000:b7/0000:b7:01.0/0000:b8:00.0/0000:b9:02.0/0000:bc:00.0/nvme/nvme3/nvme3c3n1",
	}
	mkdir := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		mkdir(filepath.Dir(name))
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	for dev, dir := range dirs {
		mkdir(filepath.Join(sys, "devices", dir))
		link(filepath.Join("../../devices", dir), filepath.Join(sys, "dev", "block", dev))
	}
	for _, p := range []string{"nvme0n1p1", "nvme0n1p2"} {
		if err := os.WriteFile(filepath.Join(sys, "devices", filepath.Dir(dirs["259:1"]), p, "partition"), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	md := filepath.Join(sys, "devices", dirs["9:0"])
	link("../../../../"+dirs["259:3"], filepath.Join(md, "slaves", "nvme1n1"))
	link("../../../../"+dirs["259:4"], filepath.Join(md, "slaves", "nvme2n1"))
	head := filepath.Join(sys, "devices", dirs["259:5"])
	link("../../../../../"+dirs["259:6"], filepath.Join(head, "multipath", "nvme3c3n1"))
	mkdir(filepath.Join(proc, "self"))
	mountinfo := `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
23 22 0:21 / /dev/shm rw,nosuid,nodev shared:2 - tmpfs tmpfs rw
30 22 9:0 / /raid rw,relatime shared:9 - xfs /dev/md0 rw,attr2,inode64,sunit=1024,swidth=4096
31 22 259:5 / /scratch\040space rw,relatime shared:10 - ext4 /dev/nvme3n1 rw,data=journal
32 22 0:50 / /var/lib/docker/overlay2/x/merged rw,relatime - overlay overlay rw,lowerdir=/a
33 22 259:1 / /boot/efi rw,relatime shared:3 - vfat /dev/nvme0n1p1 rw
`
	if err := os.WriteFile(filepath.Join(proc, "self", "mountinfo"), []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	return hostfs.Root{Sys: sys, Proc: proc}
}

func TestBlockDeviceDrives(t *testing.T) {
	fs := withDrives(t)
	for dev, want := range map[string]string{
		"259:0": "0000:1a:00.0",              // a namespace
		"259:2": "0000:1a:00.0",              // a partition of it
		"9:0":   "0000:3c:00.0 0000:9c:00.0", // md RAID over two drives
		"259:5": "0000:bc:00.0",              // a multipath head, through its path
		"0:21":  "",                          // tmpfs
		"8:0":   "",                          // not there
	} {
		if got := strings.Join(numa.BlockDeviceDrives(fs, dev), " "); got != want {
			t.Errorf("BlockDeviceDrives(%s) = %q, want %q", dev, got, want)
		}
	}
}

func TestDriveMounts(t *testing.T) {
	topo, err := numa.ReadTopology(withDrives(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range topo.Mounts {
		got = append(got, m.MountPoint+" "+m.FSType+" "+strings.Join(m.Drives, ","))
	}
	want := []string{"/ ext4 0000:1a:00.0", "/raid xfs 0000:3c:00.0,0000:9c:00.0",
		"/scratch space ext4 0000:bc:00.0", "/boot/efi vfat 0000:1a:00.0"}
	if !slices.Equal(got, want) {
		t.Errorf("mounts on drives:\n got %q\nwant %q", got, want)
	}
}

func TestParseMountInfoBadLine(t *testing.T) {
	fs := withDrives(t)
	p := filepath.Join(fs.Proc, "self", "mountinfo")
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, append([]byte("garbage line\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	mounts, err := numa.ReadMounts(fs)
	if err == nil || !strings.Contains(err.Error(), `mountinfo line 1: "garbage line"`) {
		t.Errorf("a bad line: %v, want it named", err)
	}
	if len(mounts) != 6 {
		t.Errorf("%d mounts, want the 6 good lines kept", len(mounts))
	}
}

func TestGPUToDrivePaths(t *testing.T) {
	topo := loadTopology(t, "dgx-h100")
	gpu := topo.Device("0000:18:00.0")
	near, class := topo.NearestDrives(gpu)
	if len(near) != 1 || near[0].Address != "0000:1a:00.0" || class != numa.PathPIX {
		t.Errorf("nearest drives of GPU 0000:18:00.0: %v %v, want 0000:1a:00.0 on its own switch (PIX)", near, class)
	}
	if p := topo.Path(gpu, topo.Device("0000:bc:00.0")); p != numa.PathSYS {
		t.Errorf("GPU 0000:18:00.0 to drive 0000:bc:00.0: %v, want SYS", p)
	}
	// Under one switch the drive's Gen4 x4 link bounds the path, not the
	// GPU's Gen5 x16 nor the uplink they share.
	hop, ok := topo.SlowestHopBetween(gpu, topo.Device("0000:1a:00.0"), true)
	if !ok || hop.Device.Address != "0000:1a:00.0" {
		t.Fatalf("slowest hop GPU to its drive: %+v %v", hop, ok)
	}
	if bw := hop.Bandwidth(true); bw < 7.8e9 || bw > 7.9e9 {
		t.Errorf("drive link %.3g B/s, want Gen4 x4's 7.88e9", bw)
	}
}

func TestParseNVFSStats(t *testing.T) {
	s, err := numa.ParseNVFSStats([]byte(`GDS Version: 1.9.1.3
NVFS statistics(ver: 4.0)
NVFS Driver(version: 2:17:5)
Mellanox PeerDirect Supported: True
IO stats: Enabled, peer IO stats: Disabled
Logging level: info

Active Shadow-Buffer (MiB): 0
Active Process: 0
Reads                           : err=3 io_state_err=0
Sparse Reads                    : n=6 io=0 holes=0 pages=0
Writes                          : err=0 io_state_err=237 pg-cache=0 pg-cache-fail=0 pg-cache-eio=0
Ops                             : Read=1200 Write=40 BatchIO=0
GPU 0000:18:00.0 uuid:x : Registered_MiB=0 Cache_MiB=0 max_pinned_MiB=1 cross_root_port(%)=0
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != "2.17.5" || s.Reads.V != 1200 || s.Writes.V != 40 || s.ReadErrors.V != 3 || !s.WriteErrors.Valid || s.WriteErrors.V != 0 {
		t.Errorf("parsed %+v", s)
	}
	if _, err := numa.ParseNVFSStats([]byte("Ops : Read=x Write=1\n")); err == nil || !strings.Contains(err.Error(), `Read="x"`) {
		t.Errorf("a bad count: %v", err)
	}
}

func TestReadCuFileConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cufile.json")
	// As NVIDIA ships it: JSON with comments, and "//" inside a string.
	if err := os.WriteFile(p, []byte(`{
	// comment "with quotes"
	"logging": { "dir": "//var/log", /* block */ "level": "ERROR" },
	"properties": {
		"max_direct_io_size_kb" : 16384,
		// false: fail rather than bounce through host memory
		"allow_compat_mode": false
	}
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := numa.ReadCuFileConfig(p)
	if err != nil || !c.Found || c.AllowCompat {
		t.Errorf("ReadCuFileConfig = %+v, %v; want found, compat not allowed", c, err)
	}
	c, err = numa.ReadCuFileConfig(filepath.Join(dir, "absent.json"))
	if err != nil || c.Found || !c.AllowCompat {
		t.Errorf("absent config = %+v, %v; want not found, cuFile's default (compat allowed)", c, err)
	}
	if err := os.WriteFile(p, []byte(`{"properties": {`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(`{"properties": {"force_compat_mode": true}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := numa.ReadCuFileConfig(p); err != nil || !c.ForceCompat || !c.AllowCompat {
		t.Errorf("forced compat: %+v, %v", c, err)
	}
	if err := os.WriteFile(p, []byte(`{"properties": {`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := numa.ReadCuFileConfig(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a broken config: %v, want an error naming it", err)
	}
	if got := numa.CuFileConfigPath(func(string) string { return "" }); got != "/etc/cufile.json" {
		t.Errorf("default path %q", got)
	}
}

func TestNativeFilesystem(t *testing.T) {
	for _, tc := range []struct {
		fs, opts string
		want     bool
	}{
		{"ext4", "rw,relatime,errors=remount-ro", true},
		{"ext4", "rw,data=journal", false},
		{"xfs", "rw", true},
		{"lustre", "rw", true},
		{"tmpfs", "rw", false},
		{"overlay", "rw", false},
		{"btrfs", "rw", false},
	} {
		if got := numa.NativeFilesystem(tc.fs, tc.opts); got != tc.want {
			t.Errorf("NativeFilesystem(%s, %s) = %v", tc.fs, tc.opts, got)
		}
	}
}

func TestStorageSummary(t *testing.T) {
	fs := withDrives(t)
	if err := os.MkdirAll(filepath.Join(fs.Sys, "module", "nvidia_fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	topo, err := (&numa.TopologyReader{FS: fs, CuFileConfig: filepath.Join(t.TempDir(), "cufile.json")}).Sample(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gpus := []numa.MatrixGPU{{Address: "0000:18:00.0"}, {Address: "0000:db:00.0"}}
	want := `
NVMe drives nearest each GPU:

  GPU0: PIX 0000:1a:00.0
  GPU1: PIX 0000:bc:00.0

NVMe drives:

  0000:1a:00.0: link Gen4 x4, mounts / (ext4), /boot/efi (vfat)
  0000:3c:00.0: link Gen4 x4, mounts /raid (xfs)
  0000:9c:00.0: link Gen4 x4, mounts /raid (xfs)
  0000:bc:00.0: link Gen4 x4, mounts /scratch space (ext4)

GPUDirect Storage: nvidia-fs loaded; no cuFile configuration at ` + filepath.Join(filepath.Dir(topo.GDS.Config.Path), "cufile.json") + "\n"
	if got := topo.StorageSummary(gpus); got != want {
		t.Errorf("StorageSummary:\n%s\nwant:\n%s", got, want)
	}
	// A drive trained narrow shows its maximum beside.
	topo.NVMe[0].Link.Width = sampler.Some(2)
	if got := topo.StorageSummary(gpus); !strings.Contains(got, "0000:1a:00.0: link Gen4 x2 (of Gen4 x4)") {
		t.Errorf("downtrained drive:\n%s", got)
	}
	if got := loadTopology(t, "h200-vm").StorageSummary(nil); got != "" {
		t.Errorf("no drives: %q, want nothing", got)
	}
}
