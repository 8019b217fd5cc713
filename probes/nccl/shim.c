#include "shim.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dltable.h"

// Symbol names, where each one goes in the table, and what a library
// without it lacks (NULL: optional, the field stays NULL).
#define SYM(name, why) { #name, offsetof(gn_api, name), why }
static const struct dl_sym syms[] = {
	SYM(ncclGetVersion, ""), SYM(ncclGetUniqueId, ""),
	SYM(ncclCommInitRankConfig, " (NCCL 2.14 or later is needed: communicators are made with a config, which says they block)"),
	SYM(ncclCommGetAsyncError, ""), SYM(ncclCommAbort, ""), SYM(ncclCommDestroy, ""),
	SYM(ncclCommFinalize, NULL), SYM(ncclGetErrorString, ""), SYM(ncclGetLastError, NULL),
	SYM(ncclGroupStart, ""), SYM(ncclGroupEnd, ""), SYM(ncclAllReduce, ""), SYM(ncclAllGather, ""),
	SYM(ncclReduceScatter, ""), SYM(ncclSend, ""), SYM(ncclRecv, ""),
};

int gn_open(const char *path, gn_api *api, char *err, size_t errlen) {
	api->lib = dl_open_table(path, syms, sizeof syms / sizeof syms[0], api, sizeof *api, err, errlen);
	return api->lib == NULL ? -1 : 0;
}

void gn_error_text(gn_api *a, gn_result r, char *text, size_t textlen, char *last, size_t lastlen) {
	const char *t = a->ncclGetErrorString(r);
	snprintf(text, textlen, "%s", t ? t : "");
	const char *l = a->ncclGetLastError ? a->ncclGetLastError(NULL) : NULL;
	snprintf(last, lastlen, "%s", l ? l : "");
}

// ncclDataType_t ncclFloat32 and ncclRedOp_t ncclSum from nccl.h.
enum { FLOAT32 = 7, SUM = 0 };

gn_result gn_get_version(gn_api *a, int *v) { return a->ncclGetVersion(v); }
gn_result gn_get_unique_id(gn_api *a, gn_unique_id *id) { return a->ncclGetUniqueId(id); }

gn_result gn_init_rank(gn_api *a, gn_comm *c, int nranks, const gn_unique_id *id, int rank) {
	gn_config cfg = { sizeof cfg, GN_API_MAGIC, GN_CONFIG_VERSION, 1, GN_CONFIG_UNDEF_INT };
	return a->ncclCommInitRankConfig(c, nranks, *id, rank, &cfg);
}

gn_result gn_async_error(gn_api *a, gn_comm c, gn_result *err) { return a->ncclCommGetAsyncError(c, err); }
gn_result gn_abort(gn_api *a, gn_comm c) { return a->ncclCommAbort(c); }
gn_result gn_destroy(gn_api *a, gn_comm c) { return a->ncclCommDestroy(c); }
int gn_has_finalize(gn_api *a) { return a->ncclCommFinalize != NULL; }
gn_result gn_finalize(gn_api *a, gn_comm c) { return a->ncclCommFinalize(c); }
gn_result gn_group_start(gn_api *a) { return a->ncclGroupStart(); }
gn_result gn_group_end(gn_api *a) { return a->ncclGroupEnd(); }

gn_result gn_all_reduce(gn_api *a, unsigned long long send, unsigned long long recv, size_t count, gn_comm c, gn_stream s) {
	return a->ncclAllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, FLOAT32, SUM, c, s);
}
gn_result gn_all_gather(gn_api *a, unsigned long long send, unsigned long long recv, size_t count, gn_comm c, gn_stream s) {
	return a->ncclAllGather((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, FLOAT32, c, s);
}
gn_result gn_reduce_scatter(gn_api *a, unsigned long long send, unsigned long long recv, size_t count, gn_comm c, gn_stream s) {
	return a->ncclReduceScatter((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, FLOAT32, SUM, c, s);
}
gn_result gn_send(gn_api *a, unsigned long long buf, size_t count, int peer, gn_comm c, gn_stream s) {
	return a->ncclSend((const void *)(uintptr_t)buf, count, FLOAT32, peer, c, s);
}
gn_result gn_recv(gn_api *a, unsigned long long buf, size_t count, int peer, gn_comm c, gn_stream s) {
	return a->ncclRecv((void *)(uintptr_t)buf, count, FLOAT32, peer, c, s);
}
