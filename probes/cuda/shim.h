// The CUDA driver API as the probes reach it: libcuda.so.1 opened at run
// time and every entry point looked up by its real (_v2 where there is one)
// symbol name, so the binary needs no CUDA toolkit to build and runs on a
// machine without a driver. Only the types the probes use are declared.
#ifndef GPULINK_CUDA_SHIM_H
#define GPULINK_CUDA_SHIM_H

#include <stddef.h>

typedef int gl_result;
typedef int gl_device;
typedef unsigned long long gl_deviceptr;
typedef void *gl_context;
typedef void *gl_module;
typedef void *gl_function;
typedef void *gl_stream;
typedef void *gl_event;

// gl_api is one loaded library. The field names are the symbols looked up.
typedef struct gl_api {
	void *lib;
	gl_result (*cuInit)(unsigned int);
	gl_result (*cuDriverGetVersion)(int *);
	gl_result (*cuGetErrorName)(gl_result, const char **);
	gl_result (*cuGetErrorString)(gl_result, const char **);
	gl_result (*cuDeviceGetCount)(int *);
	gl_result (*cuDeviceGet)(gl_device *, int);
	gl_result (*cuDeviceGetName)(char *, int, gl_device);
	gl_result (*cuDeviceGetPCIBusId)(char *, int, gl_device);
	gl_result (*cuDeviceGetAttribute)(int *, int, gl_device);
	gl_result (*cuDeviceCanAccessPeer)(int *, gl_device, gl_device);
	gl_result (*cuDevicePrimaryCtxRetain)(gl_context *, gl_device);
	gl_result (*cuDevicePrimaryCtxRelease_v2)(gl_device);
	gl_result (*cuCtxSetCurrent)(gl_context);
	gl_result (*cuCtxSynchronize)(void);
	gl_result (*cuCtxEnablePeerAccess)(gl_context, unsigned int);
	gl_result (*cuMemGetInfo_v2)(size_t *, size_t *);
	gl_result (*cuMemAlloc_v2)(gl_deviceptr *, size_t);
	gl_result (*cuMemFree_v2)(gl_deviceptr);
	gl_result (*cuMemHostRegister_v2)(void *, size_t, unsigned int);
	gl_result (*cuMemHostUnregister)(void *);
	gl_result (*cuMemHostGetDevicePointer_v2)(gl_deviceptr *, void *, unsigned int);
	gl_result (*cuMemcpyAsync)(gl_deviceptr, gl_deviceptr, size_t, gl_stream);
	gl_result (*cuMemcpyHtoD_v2)(gl_deviceptr, const void *, size_t);
	gl_result (*cuMemsetD8_v2)(gl_deviceptr, unsigned char, size_t);
	gl_result (*cuModuleLoadDataEx)(gl_module *, const void *, unsigned int, int *, void **);
	gl_result (*cuModuleUnload)(gl_module);
	gl_result (*cuModuleGetFunction)(gl_function *, gl_module, const char *);
	gl_result (*cuLaunchKernel)(gl_function, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, gl_stream, void **, void **);
	gl_result (*cuStreamCreate)(gl_stream *, unsigned int);
	gl_result (*cuStreamDestroy_v2)(gl_stream);
	gl_result (*cuStreamSynchronize)(gl_stream);
	gl_result (*cuStreamWaitEvent)(gl_stream, gl_event, unsigned int);
	gl_result (*cuEventCreate)(gl_event *, unsigned int);
	gl_result (*cuEventDestroy_v2)(gl_event);
	gl_result (*cuEventRecord)(gl_event, gl_stream);
	gl_result (*cuEventQuery)(gl_event);
	gl_result (*cuEventSynchronize)(gl_event);
	gl_result (*cuEventElapsedTime)(float *, gl_event, gl_event);
} gl_api;

// gl_open loads path and resolves every symbol. On failure it returns -1
// and writes why (the dlerror text, or the first missing symbol) to err;
// nothing is called in a library that lacks a symbol.
int gl_open(const char *path, gl_api *api, char *err, size_t errlen);
void gl_close(gl_api *api);

// Calls through the table, one per entry point (cgo cannot call C function
// pointers itself).
gl_result gl_cuInit(gl_api *a, unsigned int flags);
gl_result gl_cuDriverGetVersion(gl_api *a, int *v);
const char *gl_error_name(gl_api *a, gl_result r);
const char *gl_error_string(gl_api *a, gl_result r);
gl_result gl_cuDeviceGetCount(gl_api *a, int *n);
gl_result gl_cuDeviceGet(gl_api *a, gl_device *d, int ordinal);
gl_result gl_cuDeviceGetName(gl_api *a, char *name, int len, gl_device d);
gl_result gl_cuDeviceGetPCIBusId(gl_api *a, char *id, int len, gl_device d);
gl_result gl_cuDeviceGetAttribute(gl_api *a, int *v, int attr, gl_device d);
gl_result gl_cuDeviceCanAccessPeer(gl_api *a, int *can, gl_device d, gl_device peer);
gl_result gl_cuDevicePrimaryCtxRetain(gl_api *a, gl_context *c, gl_device d);
gl_result gl_cuDevicePrimaryCtxRelease(gl_api *a, gl_device d);
gl_result gl_cuCtxSetCurrent(gl_api *a, gl_context c);
gl_result gl_cuCtxSynchronize(gl_api *a);
gl_result gl_cuCtxEnablePeerAccess(gl_api *a, gl_context peer);
gl_result gl_cuMemGetInfo(gl_api *a, size_t *free_bytes, size_t *total);
gl_result gl_cuMemAlloc(gl_api *a, gl_deviceptr *p, size_t n);
gl_result gl_cuMemFree(gl_api *a, gl_deviceptr p);
gl_result gl_cuMemHostRegister(gl_api *a, void *p, size_t n, unsigned int flags);
gl_result gl_cuMemHostUnregister(gl_api *a, void *p);
gl_result gl_cuMemHostGetDevicePointer(gl_api *a, gl_deviceptr *d, void *p);
gl_result gl_cuMemcpyAsync(gl_api *a, gl_deviceptr dst, gl_deviceptr src, size_t n, gl_stream s);
gl_result gl_cuMemcpyHtoD(gl_api *a, gl_deviceptr dst, const void *src, size_t n);
gl_result gl_cuMemsetD8(gl_api *a, gl_deviceptr p, unsigned char v, size_t n);
// gl_load_module JIT-compiles PTX; on failure the driver's error log is
// copied to log.
gl_result gl_load_module(gl_api *a, gl_module *m, const char *ptx, char *log, size_t loglen);
gl_result gl_cuModuleUnload(gl_api *a, gl_module m);
gl_result gl_cuModuleGetFunction(gl_api *a, gl_function *f, gl_module m, const char *name);
// gl_launch launches f on one block of one thread. vals holds the
// kernel's arguments in order, is32[i] saying whether argument i is 32 bits
// wide (else 64); at most 8.
gl_result gl_launch(gl_api *a, gl_function f, gl_stream s, int nargs,
	const unsigned long long *vals, const int *is32);
// gl_time_launches launches f (no arguments) on s and waits for it, up to n
// times and no longer than budget_ns once begun, writing each
// launch-to-completion wall time in nanoseconds to out and the number done
// (at least one) to *done. The loop is in C so the timing holds nothing of
// the caller's runtime.
gl_result gl_time_launches(gl_api *a, gl_function f, gl_stream s, int n, double budget_ns, double *out, int *done);
gl_result gl_cuStreamCreate(gl_api *a, gl_stream *s, unsigned int flags);
gl_result gl_cuStreamDestroy(gl_api *a, gl_stream s);
gl_result gl_cuStreamSynchronize(gl_api *a, gl_stream s);
gl_result gl_cuStreamWaitEvent(gl_api *a, gl_stream s, gl_event e);
gl_result gl_cuEventCreate(gl_api *a, gl_event *e, unsigned int flags);
gl_result gl_cuEventDestroy(gl_api *a, gl_event e);
gl_result gl_cuEventRecord(gl_api *a, gl_event e, gl_stream s);
gl_result gl_cuEventQuery(gl_api *a, gl_event e);
gl_result gl_cuEventSynchronize(gl_api *a, gl_event e);
gl_result gl_cuEventElapsedTime(gl_api *a, float *ms, gl_event start, gl_event end);

#endif
