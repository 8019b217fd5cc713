// How the bindings load their library at run time (probes/cuda,
// probes/nccl, probes/cufile): dlopen it and fill a table of function
// pointers by symbol name, refusing a library that lacks a symbol it
// needs, so that nothing in such a library is ever called. Header only:
// each binding's shim includes it (#cgo CFLAGS: -I this directory).
#ifndef GPULINK_DLTABLE_H
#define GPULINK_DLTABLE_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

// dl_sym is one entry point: its name, where its pointer goes in the
// table, and what a library without it lacks, said after "symbol ... not
// found" ("" for nothing more; NULL: optional, the pointer stays NULL).
struct dl_sym {
	const char *name;
	size_t off;
	const char *why;
};

// dl_open_table loads path and fills table (size bytes, zeroed first) from
// syms. It returns the library, or NULL with why written to err: the
// dlerror text, or the first missing symbol (the library is closed again
// and the table left zeroed). RTLD_LOCAL keeps the library's symbols out of
// the global namespace; RTLD_NOW surfaces unresolved dependencies here, not
// at the first call.
static inline void *dl_open_table(const char *path, const struct dl_sym *syms, size_t nsyms,
		void *table, size_t size, char *err, size_t errlen) {
	memset(table, 0, size);
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	for (size_t i = 0; i < nsyms; i++) {
		dlerror();
		void *fn = dlsym(lib, syms[i].name);
		if (fn == NULL && syms[i].why != NULL) {
			snprintf(err, errlen, "%s: symbol %s not found%s", path, syms[i].name, syms[i].why);
			dlclose(lib);
			memset(table, 0, size);
			return NULL;
		}
		memcpy((char *)table + syms[i].off, &fn, sizeof fn);
	}
	return lib;
}

#endif
