// cuFile, NVIDIA's GPUDirect Storage library, as the storage probe reaches
// it: libcufile.so.0 opened at run time and every entry point looked up by
// name, as probes/cuda does libcuda, so the binary needs no CUDA toolkit to
// build and runs where GDS is not installed. Only what the probe uses is
// declared, with the layouts of cufile.h (CUDA 11.4 and later keep them).
#ifndef GPULINK_CUFILE_SHIM_H
#define GPULINK_CUFILE_SHIM_H

#include <stddef.h>
#include <sys/types.h>

// CUfileError_t: the cuFile status and, for CU_FILE_CUDA_DRIVER_ERROR, the
// CUDA driver's.
typedef struct gf_status {
	int err;
	int cu_err;
} gf_status;

// CUfileDrvProps_t.
typedef struct gf_props {
	struct {
		unsigned int major_version;
		unsigned int minor_version;
		size_t poll_thresh_size;
		size_t max_direct_io_size;
		unsigned int dstatusflags;
		unsigned int dcontrolflags;
	} nvfs;
	unsigned int fflags;
	unsigned int max_device_cache_size;
	unsigned int per_buffer_cache_size;
	unsigned int max_device_pinned_mem_size;
	unsigned int max_batch_io_size;
	unsigned int max_batch_io_timeout_msecs;
} gf_props;

// CUfileDescr_t for a Linux file descriptor.
typedef struct gf_descr {
	int type; // CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
} gf_descr;

typedef struct gf_api {
	void *lib;
	gf_status (*cuFileDriverOpen)(void);
	gf_status (*cuFileDriverClose)(void);
	gf_status (*cuFileDriverGetProperties)(gf_props *);
	gf_status (*cuFileHandleRegister)(void **, gf_descr *);
	void (*cuFileHandleDeregister)(void *);
	gf_status (*cuFileBufRegister)(const void *, size_t, int);
	gf_status (*cuFileBufDeregister)(const void *);
	ssize_t (*cuFileRead)(void *, void *, size_t, off_t, off_t);
	ssize_t (*cuFileWrite)(void *, const void *, size_t, off_t, off_t);
} gf_api;

// gf_open loads path and resolves every symbol; on failure it returns -1
// and writes why to err, and nothing in the library is called.
int gf_open(const char *path, gf_api *api, char *err, size_t errlen);
void gf_close(gf_api *api);

// Calls through the table (cgo cannot call C function pointers itself).
// Each status call returns the cuFile status and writes the CUDA one.
int gf_driver_open(gf_api *a, int *cu_err);
int gf_driver_close(gf_api *a, int *cu_err);
int gf_driver_properties(gf_api *a, gf_props *p, int *cu_err);
int gf_handle_register(gf_api *a, void **fh, int fd, int *cu_err);
void gf_handle_deregister(gf_api *a, void *fh);
int gf_buf_register(gf_api *a, unsigned long long dev, size_t n, int *cu_err);
int gf_buf_deregister(gf_api *a, unsigned long long dev, int *cu_err);
ssize_t gf_read(gf_api *a, void *fh, unsigned long long dev, size_t n, off_t file_off, off_t dev_off);
ssize_t gf_write(gf_api *a, void *fh, unsigned long long dev, size_t n, off_t file_off, off_t dev_off);

#endif
