// Package cuda reaches the CUDA driver API at run time: libcuda.so.1 is
// opened with dlopen and called through looked-up function pointers, so the
// exporter builds without a CUDA toolkit and runs where there is no driver.
// It wraps only what the probes use. A CUDA context is current per OS
// thread: callers lock their goroutine to its thread (runtime.LockOSThread)
// before SetCurrent and keep all calls for that context on it.
package cuda

/*
#cgo CFLAGS: -I${SRCDIR}/../internal/dltable
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/gpulink/gpulink_exporter/internal/pciaddr"
)

// Kernels is the PTX of the probe kernels, JIT-compiled by the driver.
//
//go:embed kernels.ptx
var Kernels string

// DefaultLibrary is the driver library's soname.
const DefaultLibrary = "libcuda.so.1"

// Result codes from cuda.h that callers act on.
const (
	successCode           = 0
	errNotReady           = 600
	errPeerAlreadyEnabled = 704
)

// Error is a failed driver call.
type Error struct {
	Call string // the entry point, as looked up
	Code int
	Name string // CUDA_ERROR_OUT_OF_MEMORY
	Text string // out of memory
}

func (e *Error) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("%s: CUDA error %d", e.Call, e.Code)
	}
	return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Text)
}

// Driver is a loaded and initialised libcuda.
type Driver struct {
	api  *C.gl_api
	path string
}

// Open loads the library at path (a soname or a file) and calls cuInit. A
// library that lacks any entry point the probes use is refused with the
// symbol's name; nothing in it is called.
func Open(path string) (*Driver, error) {
	api := (*C.gl_api)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gl_api{}))))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	if C.gl_open(cpath, api, &msg[0], C.size_t(len(msg))) != 0 {
		C.free(unsafe.Pointer(api))
		return nil, fmt.Errorf("loading CUDA driver: %s", C.GoString(&msg[0]))
	}
	d := &Driver{api: api, path: path}
	if err := d.check("cuInit", C.gl_cuInit(api, 0)); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Close unloads the library. Nothing may be called on d afterwards.
func (d *Driver) Close() {
	if d.api != nil {
		C.gl_close(d.api)
		C.free(unsafe.Pointer(d.api))
		d.api = nil
	}
}

func (d *Driver) check(call string, r C.gl_result) error {
	if r == successCode {
		return nil
	}
	return &Error{Call: call, Code: int(r),
		Name: C.GoString(C.gl_error_name(d.api, r)),
		Text: C.GoString(C.gl_error_string(d.api, r))}
}

// Version is the driver's CUDA version: 13000 for 13.0.
func (d *Driver) Version() (int, error) {
	var v C.int
	err := d.check("cuDriverGetVersion", C.gl_cuDriverGetVersion(d.api, &v))
	return int(v), err
}

// DeviceCount is how many GPUs CUDA sees (after CUDA_VISIBLE_DEVICES).
func (d *Driver) DeviceCount() (int, error) {
	var n C.int
	err := d.check("cuDeviceGetCount", C.gl_cuDeviceGetCount(d.api, &n))
	return int(n), err
}

// Device is one GPU by CUDA ordinal. CUDA's order need not be NVML's:
// match GPUs by PCI address.
type Device struct {
	d       *Driver
	h       C.gl_device
	Ordinal int
}

// Device returns the GPU with the given CUDA ordinal.
func (d *Driver) Device(ordinal int) (Device, error) {
	var h C.gl_device
	err := d.check("cuDeviceGet", C.gl_cuDeviceGet(d.api, &h, C.int(ordinal)))
	return Device{d: d, h: h, Ordinal: ordinal}, err
}

// DeviceByPCIBusID finds the GPU at a PCI address in any of the usual forms
// (NVML's 8-digit domain or sysfs's 4-digit one, any case).
func (d *Driver) DeviceByPCIBusID(addr string) (Device, error) {
	want := pciaddr.Normalize(addr)
	n, err := d.DeviceCount()
	if err != nil {
		return Device{}, err
	}
	for i := 0; i < n; i++ {
		dev, err := d.Device(i)
		if err != nil {
			return Device{}, err
		}
		id, err := dev.PCIBusID()
		if err != nil {
			return Device{}, err
		}
		if id == want {
			return dev, nil
		}
	}
	return Device{}, fmt.Errorf("no CUDA device at PCI address %s among %d (is it hidden by CUDA_VISIBLE_DEVICES?)", want, n)
}

// Driver is the library the device was found through.
func (dev Device) Driver() *Driver { return dev.d }

// PCIBusID is the GPU's PCI address in sysfs form.
func (dev Device) PCIBusID() (string, error) {
	var buf [64]C.char
	if err := dev.d.check("cuDeviceGetPCIBusId", C.gl_cuDeviceGetPCIBusId(dev.d.api, &buf[0], C.int(len(buf)), dev.h)); err != nil {
		return "", err
	}
	return pciaddr.Normalize(C.GoString(&buf[0])), nil
}

// Name is the product name.
func (dev Device) Name() (string, error) {
	var buf [256]C.char
	if err := dev.d.check("cuDeviceGetName", C.gl_cuDeviceGetName(dev.d.api, &buf[0], C.int(len(buf)), dev.h)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Attribute numbers from cuda.h's CUdevice_attribute.
type Attribute int

const (
	AttrClockRate         Attribute = 13 // kHz
	AttrMultiprocessors   Attribute = 16
	AttrCanMapHostMemory  Attribute = 19
	AttrAsyncEngineCount  Attribute = 40
	AttrUnifiedAddressing Attribute = 41
	AttrComputeCapMajor   Attribute = 75
	AttrComputeCapMinor   Attribute = 76
)

// Attribute reads one device attribute.
func (dev Device) Attribute(a Attribute) (int, error) {
	var v C.int
	err := dev.d.check("cuDeviceGetAttribute", C.gl_cuDeviceGetAttribute(dev.d.api, &v, C.int(a), dev.h))
	return int(v), err
}

// CanAccessPeer reports whether dev can map peer's memory.
func (dev Device) CanAccessPeer(peer Device) (bool, error) {
	var v C.int
	err := dev.d.check("cuDeviceCanAccessPeer", C.gl_cuDeviceCanAccessPeer(dev.d.api, &v, dev.h, peer.h))
	return v != 0, err
}

// Context is a device's primary context, the one the runtime API and every
// framework share: retaining it instead of creating a new one costs no
// second context's memory when the probe is the only user.
type Context struct {
	d   *Driver
	Dev Device
	h   C.gl_context
}

// RetainPrimaryContext retains (creating if need be) dev's primary context.
func (dev Device) RetainPrimaryContext() (*Context, error) {
	var h C.gl_context
	if err := dev.d.check("cuDevicePrimaryCtxRetain", C.gl_cuDevicePrimaryCtxRetain(dev.d.api, &h, dev.h)); err != nil {
		return nil, err
	}
	return &Context{d: dev.d, Dev: dev, h: h}, nil
}

// Release drops the retain; the driver destroys the context, and frees
// everything in it, when no one else holds it.
func (c *Context) Release() error {
	return c.d.check("cuDevicePrimaryCtxRelease_v2", C.gl_cuDevicePrimaryCtxRelease(c.d.api, c.Dev.h))
}

// SetCurrent binds c to the calling OS thread.
func (c *Context) SetCurrent() error {
	return c.d.check("cuCtxSetCurrent", C.gl_cuCtxSetCurrent(c.d.api, c.h))
}

// Synchronize waits for all work in the current context.
func (c *Context) Synchronize() error {
	return c.d.check("cuCtxSynchronize", C.gl_cuCtxSynchronize(c.d.api))
}

// EnablePeerAccess lets the current context (c) reach peer's memory.
// Access already enabled is not an error.
func (c *Context) EnablePeerAccess(peer *Context) error {
	r := C.gl_cuCtxEnablePeerAccess(c.d.api, peer.h)
	if r == errPeerAlreadyEnabled {
		return nil
	}
	return c.d.check("cuCtxEnablePeerAccess", r)
}

// MemInfo is the device's free and total memory as the current context
// sees it.
func (c *Context) MemInfo() (free, total uint64, err error) {
	var f, t C.size_t
	err = c.d.check("cuMemGetInfo_v2", C.gl_cuMemGetInfo(c.d.api, &f, &t))
	return uint64(f), uint64(t), err
}

// DevicePtr is an address in the unified address space.
type DevicePtr uint64

// Alloc allocates n bytes of device memory in the current context.
func (c *Context) Alloc(n int64) (DevicePtr, error) {
	var p C.gl_deviceptr
	err := c.d.check("cuMemAlloc_v2", C.gl_cuMemAlloc(c.d.api, &p, C.size_t(n)))
	return DevicePtr(p), err
}

// Free releases device memory from Alloc.
func (c *Context) Free(p DevicePtr) error {
	return c.d.check("cuMemFree_v2", C.gl_cuMemFree(c.d.api, C.gl_deviceptr(p)))
}

// Host memory registration flags from cuda.h.
const (
	hostRegisterPortable  = 0x01
	hostRegisterDeviceMap = 0x02
)

// RegisterHost page-locks memory the caller mapped itself (so it chose the
// NUMA node its pages sit on) and maps it for every context. mem must not
// be Go heap memory (use an mmap'd region): the driver keeps its address.
func (c *Context) RegisterHost(mem []byte) (DevicePtr, error) {
	if len(mem) == 0 {
		return 0, errors.New("RegisterHost: empty buffer")
	}
	p := unsafe.Pointer(unsafe.SliceData(mem))
	if err := c.d.check("cuMemHostRegister_v2", C.gl_cuMemHostRegister(c.d.api, p, C.size_t(len(mem)), hostRegisterPortable|hostRegisterDeviceMap)); err != nil {
		return 0, err
	}
	var dp C.gl_deviceptr
	if err := c.d.check("cuMemHostGetDevicePointer_v2", C.gl_cuMemHostGetDevicePointer(c.d.api, &dp, p)); err != nil {
		C.gl_cuMemHostUnregister(c.d.api, p)
		return 0, err
	}
	return DevicePtr(dp), nil
}

// UnregisterHost undoes RegisterHost.
func (c *Context) UnregisterHost(mem []byte) error {
	return c.d.check("cuMemHostUnregister", C.gl_cuMemHostUnregister(c.d.api, unsafe.Pointer(unsafe.SliceData(mem))))
}

// CopyHtoD copies src (any host memory) to device memory and waits.
func (c *Context) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.d.check("cuMemcpyHtoD_v2", C.gl_cuMemcpyHtoD(c.d.api, C.gl_deviceptr(dst), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src))))
}

// Memset fills n bytes of device memory with v.
func (c *Context) Memset(p DevicePtr, v byte, n int64) error {
	return c.d.check("cuMemsetD8_v2", C.gl_cuMemsetD8(c.d.api, C.gl_deviceptr(p), C.uchar(v), C.size_t(n)))
}

// Module is loaded PTX.
type Module struct {
	d *Driver
	h C.gl_module
}

// LoadModule JIT-compiles PTX for the current context's GPU. A compile
// error carries the driver's log.
func (c *Context) LoadModule(ptx string) (*Module, error) {
	cptx := C.CString(ptx)
	defer C.free(unsafe.Pointer(cptx))
	var log [4096]C.char
	var h C.gl_module
	if err := c.d.check("cuModuleLoadDataEx", C.gl_load_module(c.d.api, &h, cptx, &log[0], C.size_t(len(log)))); err != nil {
		if msg := strings.TrimSpace(C.GoString(&log[0])); msg != "" {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return &Module{d: c.d, h: h}, nil
}

// Unload frees the module.
func (m *Module) Unload() error {
	return m.d.check("cuModuleUnload", C.gl_cuModuleUnload(m.d.api, m.h))
}

// Function is a kernel in a module.
type Function struct {
	d    *Driver
	h    C.gl_function
	Name string
}

// Function looks up a kernel by its (extern "C") name.
func (m *Module) Function(name string) (*Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var h C.gl_function
	if err := m.d.check("cuModuleGetFunction", C.gl_cuModuleGetFunction(m.d.api, &h, m.h, cname)); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	return &Function{d: m.d, h: h, Name: name}, nil
}

// Arg is one kernel argument.
type Arg struct {
	v    uint64
	is32 bool
}

// U64 is a 64-bit argument (a pointer or a u64).
func U64(v uint64) Arg { return Arg{v: v} }

// U32 is a 32-bit argument.
func U32(v uint32) Arg { return Arg{v: uint64(v), is32: true} }

// Stream is a queue of GPU work.
type Stream struct {
	d *Driver
	h C.gl_stream
}

// streamNonBlocking keeps the probe's streams from synchronising with the
// legacy default stream.
const streamNonBlocking = 0x1

// NewStream creates a stream in the current context.
func (c *Context) NewStream() (*Stream, error) {
	var h C.gl_stream
	if err := c.d.check("cuStreamCreate", C.gl_cuStreamCreate(c.d.api, &h, streamNonBlocking)); err != nil {
		return nil, err
	}
	return &Stream{d: c.d, h: h}, nil
}

// Handle is the driver's CUstream, for another library that queues work on
// the stream (NCCL takes it as its cudaStream_t).
func (s *Stream) Handle() unsafe.Pointer { return unsafe.Pointer(s.h) }

// Destroy frees the stream once its work is done.
func (s *Stream) Destroy() error {
	return s.d.check("cuStreamDestroy_v2", C.gl_cuStreamDestroy(s.d.api, s.h))
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return s.d.check("cuStreamSynchronize", C.gl_cuStreamSynchronize(s.d.api, s.h))
}

// Wait makes later work on s wait for e.
func (s *Stream) Wait(e *Event) error {
	return s.d.check("cuStreamWaitEvent", C.gl_cuStreamWaitEvent(s.d.api, s.h, e.h))
}

// Copy queues a copy of n bytes; with unified addressing the driver knows
// from the addresses whether it is host to device, device to host, local
// or peer to peer.
func (s *Stream) Copy(dst, src DevicePtr, n int64) error {
	return s.d.check("cuMemcpyAsync", C.gl_cuMemcpyAsync(s.d.api, C.gl_deviceptr(dst), C.gl_deviceptr(src), C.size_t(n), s.h))
}

// Launch queues f on one thread of one block.
func (s *Stream) Launch(f *Function, args ...Arg) error {
	if len(args) > 8 {
		return fmt.Errorf("kernel %s: %d arguments, at most 8", f.Name, len(args))
	}
	var vals [8]C.ulonglong
	var is32 [8]C.int
	for i, a := range args {
		vals[i] = C.ulonglong(a.v)
		if a.is32 {
			is32[i] = 1
		}
	}
	if err := s.d.check("cuLaunchKernel", C.gl_launch(s.d.api, f.h, s.h, C.int(len(args)), &vals[0], &is32[0])); err != nil {
		return fmt.Errorf("kernel %s: %w", f.Name, err)
	}
	return nil
}

// TimeLaunches launches f, which takes no arguments, on s, each time
// waiting for it to finish, and returns each launch-to-completion time as
// the host saw it: n launches, or fewer (at least one) where they take
// longer than budget in all.
func (s *Stream) TimeLaunches(f *Function, n int, budget time.Duration) ([]time.Duration, error) {
	if n <= 0 {
		return nil, nil
	}
	ns := make([]float64, n)
	var done C.int
	if err := s.d.check("cuLaunchKernel/cuStreamSynchronize", C.gl_time_launches(s.d.api, f.h, s.h, C.int(n), C.double(budget.Nanoseconds()), (*C.double)(unsafe.Pointer(&ns[0])), &done)); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", f.Name, err)
	}
	out := make([]time.Duration, int(done))
	for i := range out {
		out[i] = time.Duration(ns[i])
	}
	return out, nil
}

// Event marks a point in a stream; two of them time the work between.
type Event struct {
	d *Driver
	h C.gl_event
}

// NewEvent creates a timing event in the current context.
func (c *Context) NewEvent() (*Event, error) {
	var h C.gl_event
	if err := c.d.check("cuEventCreate", C.gl_cuEventCreate(c.d.api, &h, 0)); err != nil {
		return nil, err
	}
	return &Event{d: c.d, h: h}, nil
}

// Destroy frees the event.
func (e *Event) Destroy() error {
	return e.d.check("cuEventDestroy_v2", C.gl_cuEventDestroy(e.d.api, e.h))
}

// Record marks the event at the current end of s.
func (e *Event) Record(s *Stream) error {
	return e.d.check("cuEventRecord", C.gl_cuEventRecord(e.d.api, e.h, s.h))
}

// Done reports whether the work before the event has finished.
func (e *Event) Done() (bool, error) {
	r := C.gl_cuEventQuery(e.d.api, e.h)
	if r == errNotReady {
		return false, nil
	}
	return r == successCode, e.d.check("cuEventQuery", r)
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error {
	return e.d.check("cuEventSynchronize", C.gl_cuEventSynchronize(e.d.api, e.h))
}

// Since is the GPU time between start and e, both recorded and complete;
// the driver resolves it to about half a microsecond.
func (e *Event) Since(start *Event) (time.Duration, error) {
	var ms C.float
	if err := e.d.check("cuEventElapsedTime", C.gl_cuEventElapsedTime(e.d.api, &ms, start.h, e.h)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
