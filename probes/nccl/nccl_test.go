package nccl

import (
	"strings"
	"testing"

	"github.com/gpulink/gpulink_exporter/probes/nccl/nccltest"
)

func TestOpenMissingLibrary(t *testing.T) {
	_, err := Open("/nonexistent/libnccl.so.2")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") {
		t.Fatalf("Open of a missing library: %v, want an error naming the path", err)
	}
}

func TestOpenMissingSymbolIsAnError(t *testing.T) {
	_, err := Open(nccltest.Build(t, "OMIT_ncclReduceScatter"))
	if err == nil || !strings.Contains(err.Error(), "symbol ncclReduceScatter not found") {
		t.Fatalf("Open of a library without ncclReduceScatter: %v", err)
	}
}

func TestOpenRefusesNCCLWithoutInitRankConfig(t *testing.T) {
	_, err := Open(nccltest.Build(t, "OMIT_ncclCommInitRankConfig"))
	if err == nil || !strings.Contains(err.Error(), "symbol ncclCommInitRankConfig not found") || !strings.Contains(err.Error(), "NCCL 2.14 or later") {
		t.Fatalf("Open of a library older than 2.14: %v, want the symbol and the version named", err)
	}
}

func TestOpenWithoutOptionalSymbols(t *testing.T) {
	lib, err := Open(nccltest.Build(t, "OMIT_ncclCommFinalize", "OMIT_ncclGetLastError"))
	if err != nil {
		t.Fatalf("Open without ncclCommFinalize and ncclGetLastError: %v", err)
	}
	lib.Close()
}

func TestVersion(t *testing.T) {
	t.Setenv("FAKE_NCCL_VERSION", "21903")
	lib, err := Open(nccltest.Build(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if v, err := lib.Version(); err != nil || v != 21903 {
		t.Fatalf("Version() = %d, %v; want 21903", v, err)
	}
}

func TestVersionString(t *testing.T) {
	for code, want := range map[int]string{
		22703: "2.27.3",
		21400: "2.14.0",
		20901: "2.9.1",
		2804:  "2.8.4", // before 2.9: major*1000 + minor*100 + patch
		2708:  "2.7.8",
		0:     "unknown",
		-1:    "unknown",
	} {
		if got := VersionString(code); got != want {
			t.Errorf("VersionString(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Call: "ncclAllReduce", Code: 2, Name: "ncclSystemError", Text: "unhandled system error", Last: "socketProgress: Connection closed"}
	want := "ncclAllReduce: ncclSystemError (2): unhandled system error; last NCCL error: socketProgress: Connection closed"
	if e.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", e.Error(), want)
	}
	e = &Error{Call: "ncclSend", Code: 42}
	if e.Error() != "ncclSend: NCCL error (42)" {
		t.Errorf("Error() without names = %q", e.Error())
	}
}
