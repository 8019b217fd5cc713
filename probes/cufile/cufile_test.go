package cufile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpulink/gpulink_exporter/probes/cufile/cufiletest"
)

func openFake(t *testing.T, defines ...string) *Library {
	t.Helper()
	l, err := Open(cufiletest.Build(t, defines...))
	if err != nil {
		t.Fatalf("Open(fake): %v", err)
	}
	t.Cleanup(l.Close)
	return l
}

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/libcufile.so.0")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libcufile.so.0") {
		t.Fatalf("Open of a missing library: %v, want an error naming the path", err)
	}
}

func TestOpenMissingSymbolIsAnError(t *testing.T) {
	_, err := Open(cufiletest.Build(t, "OMIT_cuFileRead"))
	if err == nil || !strings.Contains(err.Error(), "symbol cuFileRead not found") {
		t.Fatalf("Open of a library without cuFileRead: %v", err)
	}
}

func TestDriverOpenErrorNamesCallAndCode(t *testing.T) {
	t.Setenv("FAKE_CUFILE_OPEN", "5001")
	l := openFake(t)
	err := l.DriverOpen()
	var e *Error
	if !errors.As(err, &e) || e.Call != "cuFileDriverOpen" || e.Code != DriverNotInitialized {
		t.Fatalf("DriverOpen with nvidia-fs missing: %v", err)
	}
	if want := "cuFileDriverOpen: CU_FILE_DRIVER_NOT_INITIALIZED (5001)"; err.Error() != want {
		t.Errorf("error text %q, want %q", err, want)
	}
}

func TestCUDADriverErrorCarriesCUDACode(t *testing.T) {
	t.Setenv("FAKE_CUFILE_FAIL", "cuFileBufRegister:5011")
	l := openFake(t)
	err := l.RegisterBuffer(4096, 1<<20)
	var e *Error
	if !errors.As(err, &e) || e.Code != CUDADriverError || e.CUDACode != 2 {
		t.Fatalf("RegisterBuffer failing in CUDA: %v", err)
	}
	if !strings.Contains(err.Error(), "CUDA error 2") {
		t.Errorf("error text %q does not carry the CUDA code", err)
	}
}

func TestPropertiesDecode(t *testing.T) {
	for _, tc := range []struct {
		nvfs, control string
		wantNVFS      bool
		wantCompat    bool
	}{
		{"2.17", "2", true, true},
		{"0", "2", false, true},
		{"2.20", "0", true, false},
	} {
		t.Run(tc.nvfs+"/"+tc.control, func(t *testing.T) {
			t.Setenv("FAKE_CUFILE_NVFS", tc.nvfs)
			t.Setenv("FAKE_CUFILE_CONTROL", tc.control)
			t.Setenv("FAKE_CUFILE_STATUS", "20") // NVMe and NFS
			l := openFake(t)
			if err := l.DriverOpen(); err != nil {
				t.Fatal(err)
			}
			defer l.DriverClose()
			p, err := l.Properties()
			if err != nil {
				t.Fatal(err)
			}
			if p.NVFS() != tc.wantNVFS || p.CompatAllowed() != tc.wantCompat {
				t.Errorf("%+v: NVFS %v compat %v, want %v %v", p, p.NVFS(), p.CompatAllowed(), tc.wantNVFS, tc.wantCompat)
			}
			if p.StatusFlags&SupportsNVMe == 0 || p.StatusFlags&SupportsNFS == 0 || p.StatusFlags&SupportsLustre != 0 {
				t.Errorf("status flags %#x, want NVMe and NFS only", p.StatusFlags)
			}
			if p.MaxDirectIOBytes != 16<<20 || p.MaxPinnedMemBytes != 32<<30 {
				t.Errorf("limits %d %d: the library gives KiB", p.MaxDirectIOBytes, p.MaxPinnedMemBytes)
			}
		})
	}
}

// mapped is memory outside the Go heap, standing in for device memory (the
// fake reads and writes through the pointer as given).
func mapped(t *testing.T, n int) []byte {
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

func TestWriteThenReadMovesTheBytes(t *testing.T) {
	l := openFake(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := l.Register(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Deregister()
	src, dst := mapped(t, 8192), mapped(t, 8192)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := h.Write(uint64(uintptr(unsafe.Pointer(&src[0]))), 8192, 4096); err != nil {
		t.Fatal(err)
	}
	if err := h.Read(uint64(uintptr(unsafe.Pointer(&dst[0]))), 4096, 8192); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst[:4096], src[4096:]) {
		t.Error("read back other bytes than were written at that offset")
	}
	// Past the end: a short read is an error, not a quiet partial result.
	if err := h.Read(uint64(uintptr(unsafe.Pointer(&dst[0]))), 8192, 8192); err == nil || !strings.Contains(err.Error(), "4096 of 8192 bytes") {
		t.Errorf("short read: %v", err)
	}
}

func TestIOErrorIsTheNegatedStatus(t *testing.T) {
	t.Setenv("FAKE_CUFILE_FAIL", "cuFileRead:5008")
	l := openFake(t)
	h, err := l.Register(0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Deregister()
	err = h.Read(4096, 4096, 0)
	var e *Error
	if !errors.As(err, &e) || e.Name() != "CU_FILE_IO_NOT_SUPPORTED" {
		t.Fatalf("read failing: %v", err)
	}
}

// The binding against Debian's real libcufile (libcufile0, non-free; make
// test fetches it through scripts/fetch-cufile.sh and names it in
// GPULINK_REAL_LIBCUFILE): on a machine without a GPU or nvidia-fs,
// cuFileDriverOpen fails, and the binding must say how in cuFile's terms.
func TestRealLibraryDriverOpenFailsWithoutGPU(t *testing.T) {
	path := os.Getenv("GPULINK_REAL_LIBCUFILE")
	if path == "" {
		t.Skip("GPULINK_REAL_LIBCUFILE not set: make test sets it after scripts/fetch-cufile.sh")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("GPULINK_REAL_LIBCUFILE=%s: %v", path, err)
	}
	if _, err := os.Stat("/dev/nvidia-fs0"); err == nil {
		t.Skip("nvidia-fs is loaded here: this test is the error path of a machine without it")
	}
	// cuFile logs to cufile.log in the working directory unless told
	// otherwise; the test leaves nothing in the package directory.
	logPath := filepath.Join(t.TempDir(), "cufile.log")
	t.Setenv("CUFILE_LOGFILE_PATH", logPath)
	t.Setenv("CUFILE_ENV_PATH_JSON", filepath.Join(t.TempDir(), "absent.json"))
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	defer l.Close()
	err = l.DriverOpen()
	if err == nil {
		l.DriverClose()
		t.Skip("cuFileDriverOpen succeeded: this machine has what GDS needs (a CUDA driver), not the error path")
	}
	var e *Error
	if !errors.As(err, &e) || e.Call != "cuFileDriverOpen" || e.Name() == "" {
		t.Fatalf("cuFileDriverOpen without a GPU: %v, want a named cuFile status", err)
	}
	t.Logf("real libcufile: %v", err)
	if _, err := os.Stat("cufile.log"); err == nil {
		t.Error("cuFile left cufile.log in the working directory")
	}
	if b, _ := os.ReadFile(logPath); len(b) == 0 {
		t.Error("cuFile wrote nothing to CUFILE_LOGFILE_PATH; it says why it failed there")
	}
}
