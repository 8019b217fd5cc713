// Package cufile reaches cuFile, NVIDIA's GPUDirect Storage library, at run
// time: libcufile.so.0 is opened with dlopen and called through looked-up
// function pointers, as package cuda reaches libcuda, so the exporter
// builds without a CUDA toolkit and runs where GDS is not installed. It
// wraps only what the storage probe uses: opening the driver, its
// properties (is nvidia-fs there, is compatibility mode allowed, which
// filesystems it serves natively), registering a file and a GPU buffer,
// and reads and writes between them.
//
// cuFile needs a CUDA context current on the calling thread for buffer
// registration and I/O: callers make those calls on the thread that holds
// it (probes/cuda/probe's worker).
//
// cuFile writes its log to cufile.log in the working directory unless
// CUFILE_LOGFILE_PATH names another file, and echoes its errors on
// standard output (file descriptor 1) whatever that is: a process that
// prints something of its own there must move it first (the probe child
// does).
package cufile

/*
#cgo CFLAGS: -I${SRCDIR}/../internal/dltable
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// DefaultLibrary is cuFile's soname.
const DefaultLibrary = "libcufile.so.0"

// LibraryEnv names the library to load instead of DefaultLibrary.
const LibraryEnv = "GPULINK_CUFILE_LIBRARY"

// LibraryPath is the library to load: $GPULINK_CUFILE_LIBRARY, else the
// soname.
func LibraryPath(getenv func(string) string) string {
	if p := getenv(LibraryEnv); p != "" {
		return p
	}
	return DefaultLibrary
}

// Status codes from cufile.h (CUfileOpError) that callers act on.
const (
	Success              = 0
	DriverNotInitialized = 5001
	CUDADriverError      = 5011
	NVFSSetupError       = 5033
)

// errorNames are cufile.h's CUfileOpError names, by code.
var errorNames = map[int]string{
	5001: "CU_FILE_DRIVER_NOT_INITIALIZED", 5002: "CU_FILE_DRIVER_INVALID_PROPS",
	5003: "CU_FILE_DRIVER_UNSUPPORTED_LIMIT", 5004: "CU_FILE_DRIVER_VERSION_MISMATCH",
	5005: "CU_FILE_DRIVER_VERSION_READ_ERROR", 5006: "CU_FILE_DRIVER_CLOSING",
	5007: "CU_FILE_PLATFORM_NOT_SUPPORTED", 5008: "CU_FILE_IO_NOT_SUPPORTED",
	5009: "CU_FILE_DEVICE_NOT_SUPPORTED", 5010: "CU_FILE_NVFS_DRIVER_ERROR",
	5011: "CU_FILE_CUDA_DRIVER_ERROR", 5012: "CU_FILE_CUDA_POINTER_INVALID",
	5013: "CU_FILE_CUDA_MEMORY_TYPE_INVALID", 5014: "CU_FILE_CUDA_POINTER_RANGE_ERROR",
	5015: "CU_FILE_CUDA_CONTEXT_MISMATCH", 5016: "CU_FILE_INVALID_MAPPING_SIZE",
	5017: "CU_FILE_INVALID_MAPPING_RANGE", 5018: "CU_FILE_INVALID_FILE_TYPE",
	5019: "CU_FILE_INVALID_FILE_OPEN_FLAG", 5020: "CU_FILE_DIO_NOT_SET",
	5022: "CU_FILE_INVALID_VALUE", 5023: "CU_FILE_MEMORY_ALREADY_REGISTERED",
	5024: "CU_FILE_MEMORY_NOT_REGISTERED", 5025: "CU_FILE_PERMISSION_DENIED",
	5026: "CU_FILE_DRIVER_ALREADY_OPEN", 5027: "CU_FILE_HANDLE_NOT_REGISTERED",
	5028: "CU_FILE_HANDLE_ALREADY_REGISTERED", 5029: "CU_FILE_DEVICE_NOT_FOUND",
	5030: "CU_FILE_INTERNAL_ERROR", 5031: "CU_FILE_GETNEWFD_FAILED",
	5033: "CU_FILE_NVFS_SETUP_ERROR", 5034: "CU_FILE_IO_DISABLED",
	5035: "CU_FILE_BATCH_SUBMIT_FAILED", 5036: "CU_FILE_GPU_MEMORY_PINNING_FAILED",
}

// Error is a failed cuFile call.
type Error struct {
	Call string // the entry point
	Code int    // CUfileOpError, or for I/O the negative return
	// CUDACode is the CUDA driver's result where Code is
	// CU_FILE_CUDA_DRIVER_ERROR.
	CUDACode int
}

// Name is the code's name in cufile.h, "" for one it does not list.
func (e *Error) Name() string { return errorNames[e.Code] }

func (e *Error) Error() string {
	name := e.Name()
	if name == "" {
		name = "cuFile error"
	}
	if e.Code == CUDADriverError {
		return fmt.Sprintf("%s: %s (%d): CUDA error %d", e.Call, name, e.Code, e.CUDACode)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, name, e.Code)
}

// Library is a loaded libcufile. Its driver is opened apart (DriverOpen),
// since that is the call that fails on a machine without GDS and says why.
type Library struct {
	api  *C.gf_api
	path string
}

// Open loads the library at path (a soname or a file). A library that
// lacks any entry point the probe uses is refused with the symbol's name;
// nothing in it is called.
func Open(path string) (*Library, error) {
	api := (*C.gf_api)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gf_api{}))))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	if C.gf_open(cpath, api, &msg[0], C.size_t(len(msg))) != 0 {
		C.free(unsafe.Pointer(api))
		return nil, fmt.Errorf("loading cuFile: %s", C.GoString(&msg[0]))
	}
	return &Library{api: api, path: path}, nil
}

// Close unloads the library. Nothing may be called on l afterwards.
func (l *Library) Close() {
	if l.api != nil {
		C.gf_close(l.api)
		C.free(unsafe.Pointer(l.api))
		l.api = nil
	}
}

// Path is the library as it was named to Open.
func (l *Library) Path() string { return l.path }

func check(call string, code C.int, cu C.int) error {
	if code == Success {
		return nil
	}
	return &Error{Call: call, Code: int(code), CUDACode: int(cu)}
}

// DriverOpen opens cuFile's driver: it loads libcuda, reads the cuFile
// configuration and, where nvidia-fs is loaded, opens it. With nvidia-fs
// absent it succeeds only where the configuration allows compatibility
// mode.
func (l *Library) DriverOpen() error {
	var cu C.int
	return check("cuFileDriverOpen", C.gf_driver_open(l.api, &cu), cu)
}

// DriverClose closes what DriverOpen opened.
func (l *Library) DriverClose() error {
	var cu C.int
	return check("cuFileDriverClose", C.gf_driver_close(l.api, &cu), cu)
}

// Properties is what cuFile says of its driver (CUfileDrvProps_t).
type Properties struct {
	// NVFSMajor and NVFSMinor are nvidia-fs's version; both 0 when
	// nvidia-fs is not loaded and every I/O goes through compatibility
	// mode.
	NVFSMajor, NVFSMinor int
	// StatusFlags says which storage cuFile serves natively, bits by
	// CUfileDriverStatusFlags (Lustre, NFS, NVMe...).
	StatusFlags uint32
	// ControlFlags: bit 0 poll mode, bit 1 compatibility mode allowed.
	ControlFlags      uint32
	MaxDirectIOBytes  int64
	MaxPinnedMemBytes int64
}

// CUfileDriverStatusFlags bits: which storage nvidia-fs serves directly.
const (
	SupportsLustre  = 1 << 0
	SupportsWekaFS  = 1 << 1
	SupportsNFS     = 1 << 2
	SupportsGPFS    = 1 << 3
	SupportsNVMe    = 1 << 4
	SupportsNVMeOF  = 1 << 5
	SupportsSCSI    = 1 << 6
	SupportsBeeGFS  = 1 << 9
	controlPollMode = 1 << 0
	controlCompat   = 1 << 1
)

// NVFS reports whether nvidia-fs is loaded and cuFile talks to it.
func (p Properties) NVFS() bool { return p.NVFSMajor > 0 || p.NVFSMinor > 0 }

// CompatAllowed reports whether cuFile falls back to compatibility mode
// (POSIX reads through a host bounce buffer) where it cannot go direct.
func (p Properties) CompatAllowed() bool { return p.ControlFlags&controlCompat != 0 }

// Serves reports whether nvidia-fs serves a filesystem type directly, by
// the storage its status flags name: local filesystems on NVMe (or
// NVMe-oF, SCSI), and the distributed ones by their own flags.
func (p Properties) Serves(fstype string) bool {
	var want uint32
	switch fstype {
	case "ext4", "xfs":
		want = SupportsNVMe | SupportsNVMeOF | SupportsSCSI
	case "nfs", "nfs4":
		want = SupportsNFS
	case "lustre":
		want = SupportsLustre
	case "wekafs":
		want = SupportsWekaFS
	case "gpfs":
		want = SupportsGPFS
	case "beegfs":
		want = SupportsBeeGFS
	}
	return p.StatusFlags&want != 0
}

// Properties reads the driver's properties; the driver must be open.
func (l *Library) Properties() (Properties, error) {
	var p C.gf_props
	var cu C.int
	if err := check("cuFileDriverGetProperties", C.gf_driver_properties(l.api, &p, &cu), cu); err != nil {
		return Properties{}, err
	}
	return Properties{
		NVFSMajor: int(p.nvfs.major_version), NVFSMinor: int(p.nvfs.minor_version),
		StatusFlags: uint32(p.nvfs.dstatusflags), ControlFlags: uint32(p.nvfs.dcontrolflags),
		MaxDirectIOBytes:  int64(p.nvfs.max_direct_io_size) << 10,
		MaxPinnedMemBytes: int64(p.max_device_pinned_mem_size) << 10,
	}, nil
}

// Handle is a file registered with cuFile.
type Handle struct {
	l *Library
	h unsafe.Pointer
}

// Register registers an open file (opened with O_DIRECT for native I/O).
func (l *Library) Register(fd int) (*Handle, error) {
	var h unsafe.Pointer
	var cu C.int
	if err := check("cuFileHandleRegister", C.gf_handle_register(l.api, &h, C.int(fd), &cu), cu); err != nil {
		return nil, err
	}
	return &Handle{l: l, h: h}, nil
}

// Deregister undoes Register; the file stays open.
func (h *Handle) Deregister() { C.gf_handle_deregister(h.l.api, h.h) }

// RegisterBuffer registers n bytes of device memory at dev for direct I/O
// (cuFile pins it in the GPU's BAR once rather than on every call).
func (l *Library) RegisterBuffer(dev uint64, n int64) error {
	var cu C.int
	return check("cuFileBufRegister", C.gf_buf_register(l.api, C.ulonglong(dev), C.size_t(n), &cu), cu)
}

// DeregisterBuffer undoes RegisterBuffer.
func (l *Library) DeregisterBuffer(dev uint64) error {
	var cu C.int
	return check("cuFileBufDeregister", C.gf_buf_deregister(l.api, C.ulonglong(dev), &cu), cu)
}

// Read reads n bytes at offset off of the file into device memory at dev.
// A short read is an error: the probe's file is its own and whole.
func (h *Handle) Read(dev uint64, n, off int64) error {
	return ioResult("cuFileRead", C.gf_read(h.l.api, h.h, C.ulonglong(dev), C.size_t(n), C.off_t(off), 0), n)
}

// Write writes n bytes of device memory at dev to the file at offset off.
func (h *Handle) Write(dev uint64, n, off int64) error {
	return ioResult("cuFileWrite", C.gf_write(h.l.api, h.h, C.ulonglong(dev), C.size_t(n), C.off_t(off), 0), n)
}

// ioResult is an I/O call's return: the bytes moved, -1 with errno set
// (which cuFile does not leave us), or minus a CUfileOpError.
func ioResult(call string, got C.ssize_t, want int64) error {
	switch {
	case int64(got) == want:
		return nil
	case got < 0:
		return &Error{Call: call, Code: int(-got)}
	}
	return fmt.Errorf("%s: %d of %d bytes", call, int64(got), want)
}
