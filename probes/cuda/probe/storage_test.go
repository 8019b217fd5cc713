package probe

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpulink/gpulink_exporter/probes"
	"github.com/gpulink/gpulink_exporter/probes/cufile/cufiletest"
)

const (
	storageSize  = 16 << 20
	storageChunk = 4 << 20 // testSize: one request, and the device buffer
	storageDrive = "0000:00:05.0"
)

// storageMachine is fakeMachine with a directory to probe, mounted (in the
// fixture's mountinfo) as fstype with the given options, on an NVMe drive
// at storageDrive, and the fake cuFile; the returned log lists its calls.
func storageMachine(t *testing.T, fstype, options string) (ChildConfig, string, string) {
	t.Helper()
	return storageMachineAt(t, t.TempDir(), fstype, options)
}

func storageMachineAt(t *testing.T, dir, fstype, options string) (ChildConfig, string, string) {
	t.Helper()
	cfg := fakeMachine(t)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	ns := filepath.Join("pci0000:00", storageDrive, "nvme", "nvme0", "nvme0n1")
	if err := os.MkdirAll(filepath.Join(cfg.FS.Sys, "devices", ns), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.FS.Sys, "dev", "block"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("../../devices", ns), filepath.Join(cfg.FS.Sys, "dev", "block", dev)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.FS.Proc, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	mountinfo := fmt.Sprintf("22 1 254:0 / / rw - ext4 /dev/vda rw\n40 22 %s / %s rw,relatime - %s /dev/nvme0n1 %s\n", dev, dir, fstype, options)
	if err := os.WriteFile(filepath.Join(cfg.FS.Proc, "self", "mountinfo"), []byte(mountinfo), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "cufile.calls")
	t.Setenv("FAKE_CUFILE_LOG", log)
	cfg.CuFileLibrary = cufiletest.Build(t)
	return cfg, dir, log
}

func storageOptions(dir string, kinds ...probes.Kind) []probes.Options {
	return []probes.Options{{GPU: gpu0, HostNodes: hostNodes(), SizeBytes: storageChunk, Samples: testSamples,
		StorageDir: dir, StorageBytes: storageSize, Probes: kinds}}
}

// calls counts the fake cuFile's calls by name.
func calls(t *testing.T, log string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		n[strings.Fields(line)[0]]++
		if f := strings.Fields(line); (f[0] == "cuFileRead" || f[0] == "cuFileWrite") && f[1] != fmt.Sprint(storageChunk) {
			t.Errorf("cuFile request %q: want %d bytes each", line, storageChunk)
		}
	}
	return n
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the probe left %d file(s) in %s: %s", len(entries), dir, entries[0].Name())
	}
}

func TestStorageThroughCuFileNative(t *testing.T) {
	cfg, dir, log := storageMachine(t, "ext4", "rw,errors=remount-ro")
	round := RunRound(context.Background(), cfg, storageOptions(dir))
	g := round.GPUs[0]
	if !g.OK() {
		t.Fatalf("round not clean: %+v", g)
	}
	for _, kind := range probes.StorageKinds {
		r := find(t, g, kind, string(kind))
		if r.BytesPerSecond <= 0 || r.StorageMode != probes.StorageNative || r.StorageFilesystem != "ext4" ||
			r.StorageDrive != storageDrive || r.SizeBytes != storageSize || r.StorageNote != "" {
			t.Errorf("%s: %+v, want a rate through native cuFile on ext4 on drive %s", kind, r, storageDrive)
		}
	}
	if r := find(t, g, probes.StorageToDevice, probes.DirStorageToDevice); r.Samples != testSamples {
		t.Errorf("read samples %d, want %d", r.Samples, testSamples)
	}
	n := calls(t, log)
	// Written once, whole; read whole Samples times; and everything given
	// back.
	perFile := storageSize / storageChunk
	want := map[string]int{"cuFileDriverOpen": 1, "cuFileDriverGetProperties": 1, "cuFileHandleRegister": 1, "cuFileBufRegister": 1,
		"cuFileWrite": perFile, "cuFileRead": testSamples * perFile, "cuFileBufDeregister": 1, "cuFileHandleDeregister": 1, "cuFileDriverClose": 1}
	for k, v := range want {
		if n[k] != v {
			t.Errorf("%s called %d times, want %d (all calls: %v)", k, n[k], v, n)
		}
	}
	if g.DeviceMemoryBytes < storageChunk || g.BusySeconds <= 0 {
		t.Errorf("cost %+v: the device buffer and the I/O time count", g)
	}
	assertEmpty(t, dir)
}

func TestStorageCompatWhereNVFSIsNotLoaded(t *testing.T) {
	cfg, dir, _ := storageMachine(t, "xfs", "rw")
	t.Setenv("FAKE_CUFILE_NVFS", "0")
	round := RunRound(context.Background(), cfg, storageOptions(dir, probes.StorageToDevice))
	r := find(t, round.GPUs[0], probes.StorageToDevice, probes.DirStorageToDevice)
	if r.Error != "" || r.StorageMode != probes.StorageCompat || r.BytesPerSecond <= 0 {
		t.Errorf("%+v, want compat mode", r)
	}
	if len(round.GPUs[0].Results) != 1 {
		t.Errorf("results %+v: the write made the file unasked, and is not reported", round.GPUs[0].Results)
	}
	assertEmpty(t, dir)
}

func TestStorageCompatOnAFilesystemNVFSDoesNotServe(t *testing.T) {
	cfg, dir, _ := storageMachine(t, "ext4", "rw,data=journal")
	round := RunRound(context.Background(), cfg, storageOptions(dir, probes.StorageToDevice))
	if r := find(t, round.GPUs[0], probes.StorageToDevice, probes.DirStorageToDevice); r.StorageMode != probes.StorageCompat {
		t.Errorf("ext4 data=journal: %+v, want compat", r)
	}
}

func TestStoragePOSIXWithoutCuFile(t *testing.T) {
	for name, setup := range map[string]func(*ChildConfig){
		"no library":           func(c *ChildConfig) { c.CuFileLibrary = "/nonexistent/libcufile.so.0" },
		"driver will not open": func(*ChildConfig) { t.Setenv("FAKE_CUFILE_OPEN", "5033") },
	} {
		t.Run(name, func(t *testing.T) {
			cfg, dir, _ := storageMachine(t, "ext4", "rw")
			setup(&cfg)
			round := RunRound(context.Background(), cfg, storageOptions(dir))
			g := round.GPUs[0]
			for _, kind := range probes.StorageKinds {
				r := find(t, g, kind, string(kind))
				if r.Error != "" || r.StorageMode != probes.StoragePOSIX || r.BytesPerSecond <= 0 || r.StorageNote == "" {
					t.Errorf("%s: %+v, want a rate through O_DIRECT and copies, saying why not cuFile", kind, r)
				}
			}
			if g.HostMemoryBytes < 2*storageChunk {
				t.Errorf("pinned host memory %d, want the two bounce buffers counted", g.HostMemoryBytes)
			}
			assertEmpty(t, dir)
		})
	}
}

func TestStorageSkips(t *testing.T) {
	cfg, dir, _ := storageMachine(t, "ext4", "rw")
	missing := filepath.Join(dir, "absent")
	round := RunRound(context.Background(), cfg, storageOptions(missing))
	for _, kind := range probes.StorageKinds {
		r := find(t, round.GPUs[0], kind, string(kind))
		if r.Skipped == nil || r.Skipped.Reason != probes.SkipStorageMissingDir || !strings.Contains(r.Skipped.Detail, missing) || r.Error != "" {
			t.Errorf("missing directory: %+v", r)
		}
	}
	if !round.GPUs[0].OK() {
		t.Error("a skipped storage probe failed the round")
	}

	// A filesystem with less free space than the file and the reserve.
	t.Run("disk full", func(t *testing.T) {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			t.Fatal(err)
		}
		o := storageOptions(dir, probes.StorageToDevice)
		o[0].StorageBytes = (int64(fs.Bavail)*fs.Bsize - storageReserve + probes.MinSizeBytes) / probes.MinSizeBytes * probes.MinSizeBytes
		if o[0].StorageBytes > probes.MaxStorageBytes || o[0].StorageBytes < probes.MinSizeBytes {
			t.Skipf("%s has %d bytes free: no valid file size is too big for it", dir, int64(fs.Bavail)*fs.Bsize)
		}
		r := RunRound(context.Background(), cfg, o).GPUs[0].Results[0]
		if r.Skipped == nil || r.Skipped.Reason != probes.SkipStorageDiskFull {
			t.Errorf("%+v, want a disk_full skip", r)
		}
		assertEmpty(t, dir)
	})
}

// The filesystem refusing O_DIRECT at open: the kernel may have created
// the file by then, and the probe must not leave it.
func TestStorageNoDirectIOLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	err := openSkip(dir, unix.EINVAL)
	if s, ok := err.(*probes.Skip); !ok || s.Reason != probes.SkipStorageNoDirectIO || !strings.Contains(s.Detail, dir) {
		t.Errorf("EINVAL at open: %v", err)
	}
	if s, ok := openSkip(dir, unix.EROFS).(*probes.Skip); !ok || s.Reason != probes.SkipStoragePermission {
		t.Errorf("EROFS at open: %v", s)
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		return
	}
	// Where tmpfs still refuses O_DIRECT (before Linux 6.6), the real
	// path: the skip, and no file left.
	shm, err := os.MkdirTemp("/dev/shm", "gpulink-probe-test-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(shm)
	cfg, _, _ := storageMachineAt(t, shm, "tmpfs", "rw")
	round := RunRound(context.Background(), cfg, storageOptions(shm, probes.StorageToDevice))
	r := round.GPUs[0].Results[0]
	if r.Skipped != nil && r.Skipped.Reason != probes.SkipStorageNoDirectIO {
		t.Errorf("tmpfs: %+v", r)
	}
	if r.Skipped == nil && (r.Error != "" || r.StorageMode != probes.StorageCompat) {
		t.Errorf("tmpfs taking O_DIRECT (Linux 6.6 and later): %+v, want compat (cuFile does not serve tmpfs)", r)
	}
	assertEmpty(t, shm)
}

// cuFile echoes its errors on file descriptor 1, where the child prints
// its round for the daemon: the child must keep them out of it.
func TestChildKeepsCuFileOutputOffTheRound(t *testing.T) {
	cfg, dir, _ := storageMachine(t, "ext4", "rw")
	t.Setenv("FAKE_CUFILE_STDOUT", "cuFile initialization failed")
	t.Setenv("FAKE_CUFILE_OPEN", "5033")
	r := realChildRunner(t, cfg, time.Minute)
	r.Command = append(r.Command, "--cufile.library="+cfg.CuFileLibrary, "--path.procfs="+cfg.FS.Proc)
	o := storageOptions(dir, probes.StorageToDevice)[0]
	round, err := r.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res := round.GPUs[0].Results[0]; res.StorageMode != probes.StoragePOSIX || !strings.Contains(res.StorageNote, "CU_FILE_NVFS_SETUP_ERROR") {
		t.Errorf("%+v, want posix mode saying why", res)
	}
	assertEmpty(t, dir)
}

// A probe's file that kept its name because its child was killed before
// cuFile had it: the next probe in the directory removes it, and only it.
func TestRemoveStaleStorageFiles(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, fmt.Sprintf("%s%d-0000-18-00.0", storageFilePrefix, gone.Process.Pid))
	live := filepath.Join(dir, fmt.Sprintf("%s%d-0000-18-00.0", storageFilePrefix, os.Getpid()))
	odd := filepath.Join(dir, storageFilePrefix+"x-0000-18-00.0")
	other := filepath.Join(dir, "data.bin")
	for _, f := range []string{dead, live, odd, other} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleStorageFiles(dir)
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the file of exited pid %d is still there (%v)", gone.Process.Pid, err)
	}
	for _, f := range []string{live, odd, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v, want it kept", filepath.Base(f), err)
		}
	}
}
