#include "shim.h"

#include <stdint.h>
#include <string.h>

#include "dltable.h"

#define SYM(name) { #name, offsetof(gf_api, name), "" }
static const struct dl_sym syms[] = {
	SYM(cuFileDriverOpen), SYM(cuFileDriverClose), SYM(cuFileDriverGetProperties),
	SYM(cuFileHandleRegister), SYM(cuFileHandleDeregister), SYM(cuFileBufRegister),
	SYM(cuFileBufDeregister), SYM(cuFileRead), SYM(cuFileWrite),
};

int gf_open(const char *path, gf_api *api, char *err, size_t errlen) {
	api->lib = dl_open_table(path, syms, sizeof syms / sizeof syms[0], api, sizeof *api, err, errlen);
	return api->lib == NULL ? -1 : 0;
}

void gf_close(gf_api *api) {
	if (api->lib != NULL) {
		dlclose(api->lib);
	}
	memset(api, 0, sizeof *api);
}

static int gf_split(gf_status s, int *cu_err) {
	*cu_err = s.cu_err;
	return s.err;
}

int gf_driver_open(gf_api *a, int *cu_err) { return gf_split(a->cuFileDriverOpen(), cu_err); }
int gf_driver_close(gf_api *a, int *cu_err) { return gf_split(a->cuFileDriverClose(), cu_err); }

int gf_driver_properties(gf_api *a, gf_props *p, int *cu_err) {
	memset(p, 0, sizeof *p);
	return gf_split(a->cuFileDriverGetProperties(p), cu_err);
}

int gf_handle_register(gf_api *a, void **fh, int fd, int *cu_err) {
	gf_descr d;
	memset(&d, 0, sizeof d);
	d.type = 1; // CU_FILE_HANDLE_TYPE_OPAQUE_FD
	d.handle.fd = fd;
	return gf_split(a->cuFileHandleRegister(fh, &d), cu_err);
}

void gf_handle_deregister(gf_api *a, void *fh) { a->cuFileHandleDeregister(fh); }

int gf_buf_register(gf_api *a, unsigned long long dev, size_t n, int *cu_err) {
	return gf_split(a->cuFileBufRegister((const void *)(uintptr_t)dev, n, 0), cu_err);
}

int gf_buf_deregister(gf_api *a, unsigned long long dev, int *cu_err) {
	return gf_split(a->cuFileBufDeregister((const void *)(uintptr_t)dev), cu_err);
}

ssize_t gf_read(gf_api *a, void *fh, unsigned long long dev, size_t n, off_t file_off, off_t dev_off) {
	return a->cuFileRead(fh, (void *)(uintptr_t)dev, n, file_off, dev_off);
}

ssize_t gf_write(gf_api *a, void *fh, unsigned long long dev, size_t n, off_t file_off, off_t dev_off) {
	return a->cuFileWrite(fh, (const void *)(uintptr_t)dev, n, file_off, dev_off);
}
