package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/probes/cuda/cudatest"
)

func openFake(t *testing.T, defines ...string) *Driver {
	t.Helper()
	d, err := Open(cudatest.Build(t, defines...))
	if err != nil {
		t.Fatalf("Open(fake): %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/libcuda.so.1")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Fatalf("Open of a missing library: %v, want an error naming the path", err)
	}
}

func TestOpenMissingSymbolIsAnError(t *testing.T) {
	lib := cudatest.Build(t, "OMIT_cuMemHostRegister_v2")
	_, err := Open(lib)
	if err == nil || !strings.Contains(err.Error(), "symbol cuMemHostRegister_v2 not found") {
		t.Fatalf("Open of a library without cuMemHostRegister_v2: %v", err)
	}
}

func TestInitFailureCarriesTheDriversName(t *testing.T) {
	t.Setenv("FAKE_CUDA_FAIL", "cuInit:100")
	_, err := Open(cudatest.Build(t))
	var ce *Error
	if !errors.As(err, &ce) || ce.Call != "cuInit" || ce.Code != 100 {
		t.Fatalf("Open with cuInit failing: %v", err)
	}
}

func TestDevicesByPCIAddress(t *testing.T) {
	t.Setenv("FAKE_CUDA_BUSIDS", "0000:00:06.0,0000:00:07.0")
	d := openFake(t)
	if v, err := d.Version(); err != nil || v != 13000 {
		t.Fatalf("Version = %d, %v", v, err)
	}
	// The fake answers as CUDA does, "00000000:00:07.0"; callers use any form.
	for _, addr := range []string{"0000:00:07.0", "00000000:00:07.0", "0000:00:07.0\n"} {
		dev, err := d.DeviceByPCIBusID(addr)
		if err != nil || dev.Ordinal != 1 {
			t.Errorf("DeviceByPCIBusID(%q) = %d, %v; want ordinal 1", addr, dev.Ordinal, err)
		}
		if id, _ := dev.PCIBusID(); id != "0000:00:07.0" {
			t.Errorf("PCIBusID = %q", id)
		}
	}
	if _, err := d.DeviceByPCIBusID("0000:18:00.0"); err == nil || !strings.Contains(err.Error(), "0000:18:00.0") {
		t.Errorf("an absent address: %v", err)
	}
}

func TestErrorsNameCallAndCode(t *testing.T) {
	t.Setenv("FAKE_CUDA_FAIL", "cuMemAlloc_v2:2:2")
	d := openFake(t)
	dev, err := d.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dev.RetainPrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := c.SetCurrent(); err != nil {
		t.Fatal(err)
	}
	p, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatalf("first Alloc: %v", err)
	}
	defer c.Free(p)
	_, err = c.Alloc(1 << 20)
	var ce *Error
	if !errors.As(err, &ce) || ce.Call != "cuMemAlloc_v2" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("second Alloc: %v, want cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if want := "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q, want prefix %q", err, want)
	}
}

func TestKernelsLoadAndBadPTXCarriesTheLog(t *testing.T) {
	d := openFake(t)
	dev, _ := d.Device(0)
	c, err := dev.RetainPrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := c.SetCurrent(); err != nil {
		t.Fatal(err)
	}
	m, err := c.LoadModule(Kernels)
	if err != nil {
		t.Fatalf("loading the embedded kernels: %v", err)
	}
	defer m.Unload()
	for _, k := range []string{"gpulink_spin", "gpulink_chase", "gpulink_empty"} {
		if _, err := m.Function(k); err != nil {
			t.Errorf("kernel %s: %v", k, err)
		}
	}
	if _, err := m.Function("nope"); err == nil || !strings.Contains(err.Error(), "kernel nope") {
		t.Errorf("absent kernel: %v", err)
	}
	if _, err := c.LoadModule("not ptx"); err == nil || !strings.Contains(err.Error(), "not PTX") {
		t.Errorf("bad PTX: %v, want the JIT log in the error", err)
	}
}
