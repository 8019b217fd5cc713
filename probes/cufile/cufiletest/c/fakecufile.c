// A fake libcufile.so.0 for tests without GPUDirect Storage. It implements
// the entry points the storage probe looks up. Reads and writes really move
// bytes between the file and the "device pointer", which under the fake
// libcuda (probes/cuda/cudatest) is host memory, so a read into the wrong
// place or of the wrong length shows.
//
// Environment (read at each call):
//   FAKE_CUFILE_OPEN=5033          cuFileDriverOpen's status (default 0)
//   FAKE_CUFILE_NVFS=2.17          nvidia-fs version in the properties; 0: not loaded
//   FAKE_CUFILE_STATUS=16          dstatusflags (16: NVMe supported)
//   FAKE_CUFILE_CONTROL=2          dcontrolflags (2: compatibility mode allowed)
//   FAKE_CUFILE_FAIL=name:code     make every call of name fail with code
//                                  (status calls) or -code (reads, writes)
//   FAKE_CUFILE_STDOUT=text        printed on standard output at cuFileDriverOpen,
//                                  as the real library echoes its errors there
//   FAKE_CUFILE_LOG=path           each call appends its name (and, for I/O,
//                                  its size and offset) to path
// Build with -DOMIT_cuFileRead (any symbol) to leave one out.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct { int err; int cu_err; } CUfileError_t;

typedef struct {
	struct {
		unsigned int major_version, minor_version;
		size_t poll_thresh_size, max_direct_io_size;
		unsigned int dstatusflags, dcontrolflags;
	} nvfs;
	unsigned int fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size;
	unsigned int max_batch_io_size, max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

typedef struct {
	int type;
	union { int fd; void *handle; } handle;
	const void *fs_ops;
} CUfileDescr_t;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void note(const char *fmt, ...) {
	const char *path = getenv("FAKE_CUFILE_LOG");
	if (path == NULL || *path == 0) {
		return;
	}
	FILE *f = fopen(path, "a");
	if (f == NULL) {
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

// failing returns the code FAKE_CUFILE_FAIL sets for name, else 0.
static int failing(const char *name) {
	const char *spec = getenv("FAKE_CUFILE_FAIL");
	if (spec == NULL) {
		return 0;
	}
	size_t n = strlen(name);
	for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
		if (strncmp(p, name, n) == 0 && p[n] == ':') {
			return atoi(p + n + 1);
		}
	}
	return 0;
}

static CUfileError_t status(const char *name) {
	CUfileError_t e = { failing(name), 0 };
	if (e.err == 5011) {
		e.cu_err = 2; // CUDA_ERROR_OUT_OF_MEMORY
	}
	return e;
}

static int opened;

#ifndef OMIT_cuFileDriverOpen
CUfileError_t cuFileDriverOpen(void) {
	note("cuFileDriverOpen");
	const char *msg = getenv("FAKE_CUFILE_STDOUT");
	if (msg != NULL) {
		printf("%s\n", msg);
		fflush(stdout);
	}
	CUfileError_t e = status("cuFileDriverOpen");
	const char *code = getenv("FAKE_CUFILE_OPEN");
	if (e.err == 0 && code != NULL) {
		e.err = atoi(code);
	}
	opened = e.err == 0;
	return e;
}
#endif

CUfileError_t cuFileDriverClose(void) {
	note("cuFileDriverClose");
	if (!opened) {
		CUfileError_t e = { 5001, 0 };
		return e;
	}
	opened = 0;
	return status("cuFileDriverClose");
}

CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *p) {
	note("cuFileDriverGetProperties");
	memset(p, 0, sizeof *p);
	const char *v = getenv("FAKE_CUFILE_NVFS");
	unsigned int major = 2, minor = 17;
	if (v != NULL) {
		major = minor = 0;
		sscanf(v, "%u.%u", &major, &minor);
	}
	p->nvfs.major_version = major;
	p->nvfs.minor_version = minor;
	const char *s = getenv("FAKE_CUFILE_STATUS");
	p->nvfs.dstatusflags = s ? (unsigned int)strtoul(s, NULL, 0) : 16;
	const char *c = getenv("FAKE_CUFILE_CONTROL");
	p->nvfs.dcontrolflags = c ? (unsigned int)strtoul(c, NULL, 0) : 2;
	p->nvfs.max_direct_io_size = 16384;
	p->max_device_pinned_mem_size = 33554432;
	return status("cuFileDriverGetProperties");
}

// The real library opens the file a second time by its path (from
// /proc/self/fd), without O_DIRECT, for unaligned I/O, and fails with
// CU_FILE_GETNEWFD_FAILED when it cannot: a file unlinked before it is
// registered ("... (deleted)") is one it never serves (seen on an H100
// with libcufile of CUDA 13, 2026-12-07). The fake does the same.
CUfileError_t cuFileHandleRegister(void **fh, CUfileDescr_t *d) {
	note("cuFileHandleRegister fd=%d type=%d", d->handle.fd, d->type);
	CUfileError_t e = status("cuFileHandleRegister");
	if (e.err != 0) {
		return e;
	}
	char link[64], path[4096];
	snprintf(link, sizeof link, "/proc/self/fd/%d", d->handle.fd);
	ssize_t n = readlink(link, path, sizeof path - 1);
	int again = -1;
	if (n > 0) {
		path[n] = 0;
		again = open(path, O_RDWR | O_CLOEXEC);
	}
	if (again < 0) {
		note("cuFileHandleRegister: open call failed for file %s", n > 0 ? path : link);
		e.err = 5031; /* CU_FILE_GETNEWFD_FAILED */
		return e;
	}
	int *h = malloc(2 * sizeof *h);
	h[0] = d->handle.fd;
	h[1] = again;
	*fh = h;
	return e;
}

void cuFileHandleDeregister(void *fh) {
	note("cuFileHandleDeregister");
	close(((int *)fh)[1]);
	free(fh);
}

CUfileError_t cuFileBufRegister(const void *p, size_t n, int flags) {
	note("cuFileBufRegister %zu", n);
	return status("cuFileBufRegister");
}

CUfileError_t cuFileBufDeregister(const void *p) {
	note("cuFileBufDeregister");
	return status("cuFileBufDeregister");
}

#ifndef OMIT_cuFileRead
ssize_t cuFileRead(void *fh, void *dev, size_t n, off_t off, off_t dev_off) {
	note("cuFileRead %zu %lld", n, (long long)off);
	int code = failing("cuFileRead");
	if (code) {
		return -code;
	}
	return pread(*(int *)fh, (char *)dev + dev_off, n, off);
}
#endif

ssize_t cuFileWrite(void *fh, const void *dev, size_t n, off_t off, off_t dev_off) {
	note("cuFileWrite %zu %lld", n, (long long)off);
	int code = failing("cuFileWrite");
	if (code) {
		return -code;
	}
	return pwrite(*(int *)fh, (const char *)dev + dev_off, n, off);
}
