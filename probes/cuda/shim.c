#include "shim.h"

#include <string.h>
#include <time.h>

#include "dltable.h"

// Symbol names and where each one goes in the table; every one is needed.
#define SYM(name) { #name, offsetof(gl_api, name), "" }
static const struct dl_sym syms[] = {
	SYM(cuInit), SYM(cuDriverGetVersion), SYM(cuGetErrorName), SYM(cuGetErrorString),
	SYM(cuDeviceGetCount), SYM(cuDeviceGet), SYM(cuDeviceGetName), SYM(cuDeviceGetPCIBusId),
	SYM(cuDeviceGetAttribute), SYM(cuDeviceCanAccessPeer), SYM(cuDevicePrimaryCtxRetain),
	SYM(cuDevicePrimaryCtxRelease_v2), SYM(cuCtxSetCurrent), SYM(cuCtxSynchronize),
	SYM(cuCtxEnablePeerAccess), SYM(cuMemGetInfo_v2), SYM(cuMemAlloc_v2), SYM(cuMemFree_v2),
	SYM(cuMemHostRegister_v2), SYM(cuMemHostUnregister), SYM(cuMemHostGetDevicePointer_v2),
	SYM(cuMemcpyAsync), SYM(cuMemcpyHtoD_v2), SYM(cuMemsetD8_v2), SYM(cuModuleLoadDataEx),
	SYM(cuModuleUnload), SYM(cuModuleGetFunction), SYM(cuLaunchKernel), SYM(cuStreamCreate),
	SYM(cuStreamDestroy_v2), SYM(cuStreamSynchronize), SYM(cuStreamWaitEvent), SYM(cuEventCreate),
	SYM(cuEventDestroy_v2), SYM(cuEventRecord), SYM(cuEventQuery), SYM(cuEventSynchronize),
	SYM(cuEventElapsedTime),
};

int gl_open(const char *path, gl_api *api, char *err, size_t errlen) {
	api->lib = dl_open_table(path, syms, sizeof syms / sizeof syms[0], api, sizeof *api, err, errlen);
	return api->lib == NULL ? -1 : 0;
}

void gl_close(gl_api *api) {
	if (api->lib != NULL) {
		dlclose(api->lib);
	}
	memset(api, 0, sizeof *api);
}

gl_result gl_cuInit(gl_api *a, unsigned int flags) { return a->cuInit(flags); }
gl_result gl_cuDriverGetVersion(gl_api *a, int *v) { return a->cuDriverGetVersion(v); }

const char *gl_error_name(gl_api *a, gl_result r) {
	const char *s = NULL;
	if (a->cuGetErrorName(r, &s) != 0 || s == NULL) {
		return "";
	}
	return s;
}

const char *gl_error_string(gl_api *a, gl_result r) {
	const char *s = NULL;
	if (a->cuGetErrorString(r, &s) != 0 || s == NULL) {
		return "";
	}
	return s;
}

gl_result gl_cuDeviceGetCount(gl_api *a, int *n) { return a->cuDeviceGetCount(n); }
gl_result gl_cuDeviceGet(gl_api *a, gl_device *d, int ordinal) { return a->cuDeviceGet(d, ordinal); }
gl_result gl_cuDeviceGetName(gl_api *a, char *name, int len, gl_device d) { return a->cuDeviceGetName(name, len, d); }
gl_result gl_cuDeviceGetPCIBusId(gl_api *a, char *id, int len, gl_device d) { return a->cuDeviceGetPCIBusId(id, len, d); }
gl_result gl_cuDeviceGetAttribute(gl_api *a, int *v, int attr, gl_device d) { return a->cuDeviceGetAttribute(v, attr, d); }
gl_result gl_cuDeviceCanAccessPeer(gl_api *a, int *can, gl_device d, gl_device peer) { return a->cuDeviceCanAccessPeer(can, d, peer); }
gl_result gl_cuDevicePrimaryCtxRetain(gl_api *a, gl_context *c, gl_device d) { return a->cuDevicePrimaryCtxRetain(c, d); }
gl_result gl_cuDevicePrimaryCtxRelease(gl_api *a, gl_device d) { return a->cuDevicePrimaryCtxRelease_v2(d); }
gl_result gl_cuCtxSetCurrent(gl_api *a, gl_context c) { return a->cuCtxSetCurrent(c); }
gl_result gl_cuCtxSynchronize(gl_api *a) { return a->cuCtxSynchronize(); }
gl_result gl_cuCtxEnablePeerAccess(gl_api *a, gl_context peer) { return a->cuCtxEnablePeerAccess(peer, 0); }
gl_result gl_cuMemGetInfo(gl_api *a, size_t *free_bytes, size_t *total) { return a->cuMemGetInfo_v2(free_bytes, total); }
gl_result gl_cuMemAlloc(gl_api *a, gl_deviceptr *p, size_t n) { return a->cuMemAlloc_v2(p, n); }
gl_result gl_cuMemFree(gl_api *a, gl_deviceptr p) { return a->cuMemFree_v2(p); }
gl_result gl_cuMemHostRegister(gl_api *a, void *p, size_t n, unsigned int flags) { return a->cuMemHostRegister_v2(p, n, flags); }
gl_result gl_cuMemHostUnregister(gl_api *a, void *p) { return a->cuMemHostUnregister(p); }
gl_result gl_cuMemHostGetDevicePointer(gl_api *a, gl_deviceptr *d, void *p) { return a->cuMemHostGetDevicePointer_v2(d, p, 0); }
gl_result gl_cuMemcpyAsync(gl_api *a, gl_deviceptr dst, gl_deviceptr src, size_t n, gl_stream s) { return a->cuMemcpyAsync(dst, src, n, s); }
gl_result gl_cuMemcpyHtoD(gl_api *a, gl_deviceptr dst, const void *src, size_t n) { return a->cuMemcpyHtoD_v2(dst, src, n); }
gl_result gl_cuMemsetD8(gl_api *a, gl_deviceptr p, unsigned char v, size_t n) { return a->cuMemsetD8_v2(p, v, n); }

// JIT option numbers from cuda.h's CUjit_option.
enum { JIT_ERROR_LOG_BUFFER = 5, JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

gl_result gl_load_module(gl_api *a, gl_module *m, const char *ptx, char *log, size_t loglen) {
	int opts[2] = { JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
	void *vals[2] = { log, (void *)loglen };
	if (loglen > 0) {
		log[0] = 0;
	}
	return a->cuModuleLoadDataEx(m, ptx, 2, opts, vals);
}

gl_result gl_cuModuleUnload(gl_api *a, gl_module m) { return a->cuModuleUnload(m); }
gl_result gl_cuModuleGetFunction(gl_api *a, gl_function *f, gl_module m, const char *name) { return a->cuModuleGetFunction(f, m, name); }

gl_result gl_launch(gl_api *a, gl_function f, gl_stream s, int nargs,
		const unsigned long long *vals, const int *is32) {
	unsigned long long v64[8];
	unsigned int v32[8];
	void *params[8];
	if (nargs < 0 || nargs > 8) {
		return 1; // CUDA_ERROR_INVALID_VALUE
	}
	for (int i = 0; i < nargs; i++) {
		if (is32[i]) {
			v32[i] = (unsigned int)vals[i];
			params[i] = &v32[i];
		} else {
			v64[i] = vals[i];
			params[i] = &v64[i];
		}
	}
	return a->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nargs > 0 ? params : NULL, NULL);
}

static double gl_ns_between(const struct timespec *t0, const struct timespec *t1) {
	return (double)(t1->tv_sec - t0->tv_sec) * 1e9 + (double)(t1->tv_nsec - t0->tv_nsec);
}

gl_result gl_time_launches(gl_api *a, gl_function f, gl_stream s, int n, double budget_ns, double *out, int *done) {
	struct timespec begin, t0, t1;
	*done = 0;
	clock_gettime(CLOCK_MONOTONIC, &begin);
	for (int i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		gl_result r = a->cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
		if (r == 0) {
			r = a->cuStreamSynchronize(s);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (r != 0) {
			return r;
		}
		out[i] = gl_ns_between(&t0, &t1);
		*done = i + 1;
		if (gl_ns_between(&begin, &t1) >= budget_ns) {
			break;
		}
	}
	return 0;
}

gl_result gl_cuStreamCreate(gl_api *a, gl_stream *s, unsigned int flags) { return a->cuStreamCreate(s, flags); }
gl_result gl_cuStreamDestroy(gl_api *a, gl_stream s) { return a->cuStreamDestroy_v2(s); }
gl_result gl_cuStreamSynchronize(gl_api *a, gl_stream s) { return a->cuStreamSynchronize(s); }
gl_result gl_cuStreamWaitEvent(gl_api *a, gl_stream s, gl_event e) { return a->cuStreamWaitEvent(s, e, 0); }
gl_result gl_cuEventCreate(gl_api *a, gl_event *e, unsigned int flags) { return a->cuEventCreate(e, flags); }
gl_result gl_cuEventDestroy(gl_api *a, gl_event e) { return a->cuEventDestroy_v2(e); }
gl_result gl_cuEventRecord(gl_api *a, gl_event e, gl_stream s) { return a->cuEventRecord(e, s); }
gl_result gl_cuEventQuery(gl_api *a, gl_event e) { return a->cuEventQuery(e); }
gl_result gl_cuEventSynchronize(gl_api *a, gl_event e) { return a->cuEventSynchronize(e); }
gl_result gl_cuEventElapsedTime(gl_api *a, float *ms, gl_event start, gl_event end) { return a->cuEventElapsedTime(ms, start, end); }
