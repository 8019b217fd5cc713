// NCCL as the collective probes reach it: libnccl.so.2 opened at run time
// and every entry point looked up by name, so the binary needs neither
// NCCL's headers nor its library to build. Only the types the probes use
// are declared, with NCCL's own layouts (src/nccl.h.in).
#ifndef GPULINK_NCCL_SHIM_H
#define GPULINK_NCCL_SHIM_H

#include <stddef.h>

typedef int gn_result;   // ncclResult_t
typedef void *gn_comm;   // ncclComm_t
typedef void *gn_stream; // cudaStream_t, the driver's CUstream

// ncclUniqueId: NCCL_UNIQUE_ID_BYTES (128) opaque bytes, passed by value.
typedef struct { char internal[128]; } gn_unique_id;

// gn_config is ncclConfig_t as NCCL 2.14 declared it (ncclConfig_v21400):
// the three header fields every version keeps first, and blocking, the
// one attribute the probes set. Later versions only append attributes
// (cgaClusterSize, minCTAs, maxCTAs, netName in 2.17, splitShare in 2.18,
// ... nvlsHostMode in 2.31), so this prefix is valid for every NCCL from
// 2.14 on. Handing a newer library this shorter struct is safe: its
// parseCommConfig reads size first, copies only min(size, its own
// sizeof) bytes over a copy of its own NCCL_CONFIG_INITIALIZER (so every
// attribute past ours stays "undefined", meaning NCCL's default), refuses
// a struct whose magic is not NCCL_API_MAGIC, and resets the attributes
// introduced after the version we claim (cgaClusterSize for < 2.17, ...)
// to their defaults. It never reads past size.
typedef struct gn_config {
	size_t size;          // sizeof(gn_config): 24 bytes on LP64
	unsigned int magic;   // NCCL_API_MAGIC
	unsigned int version; // the NCCL_VERSION_CODE this layout is from
	int blocking;         // 1: calls wait; 0: they return ncclInProgress instead
	// cgaClusterSize fills what would be padding: size is 24 either way,
	// and a library that copies all 24 bytes and does not reset what
	// came after 2.14 reads NCCL_CONFIG_UNDEF_INT here (its default), not
	// a stray 0, which would turn CGA clusters off.
	int cgaClusterSize;
} gn_config;

#define GN_CONFIG_UNDEF_INT (-2147483647 - 1) // NCCL_CONFIG_UNDEF_INT, INT_MIN

#define GN_API_MAGIC 0xcafebeefu
#define GN_CONFIG_VERSION 21400 // NCCL_VERSION(2, 14, 0)

// Result codes from nccl.h that callers act on.
enum { GN_SUCCESS = 0, GN_IN_PROGRESS = 7 };

// gn_api is one loaded library. The field names are the symbols looked up;
// ncclCommFinalize and ncclGetLastError may be NULL.
typedef struct gn_api {
	void *lib;
	gn_result (*ncclGetVersion)(int *);
	gn_result (*ncclGetUniqueId)(gn_unique_id *);
	gn_result (*ncclCommInitRankConfig)(gn_comm *, int, gn_unique_id, int, gn_config *);
	gn_result (*ncclCommGetAsyncError)(gn_comm, gn_result *);
	gn_result (*ncclCommAbort)(gn_comm);
	gn_result (*ncclCommDestroy)(gn_comm);
	gn_result (*ncclCommFinalize)(gn_comm);
	const char *(*ncclGetErrorString)(gn_result);
	const char *(*ncclGetLastError)(gn_comm);
	gn_result (*ncclGroupStart)(void);
	gn_result (*ncclGroupEnd)(void);
	gn_result (*ncclAllReduce)(const void *, void *, size_t, int, int, gn_comm, gn_stream);
	gn_result (*ncclAllGather)(const void *, void *, size_t, int, gn_comm, gn_stream);
	gn_result (*ncclReduceScatter)(const void *, void *, size_t, int, int, gn_comm, gn_stream);
	gn_result (*ncclSend)(const void *, size_t, int, int, gn_comm, gn_stream);
	gn_result (*ncclRecv)(void *, size_t, int, int, gn_comm, gn_stream);
} gn_api;

// gn_open loads path and resolves every symbol. On failure it returns -1
// and writes why (the dlerror text, or the first missing symbol and what
// needs it) to err; nothing is called in a library that lacks a symbol.
int gn_open(const char *path, gn_api *api, char *err, size_t errlen);

// gn_error_text copies ncclGetErrorString(r) and ncclGetLastError(NULL)
// in one call, so the last error is read on the thread that failed.
void gn_error_text(gn_api *a, gn_result r, char *text, size_t textlen, char *last, size_t lastlen);

// Calls through the table (cgo cannot call C function pointers itself).
gn_result gn_get_version(gn_api *a, int *v);
gn_result gn_get_unique_id(gn_api *a, gn_unique_id *id);
// gn_init_rank makes a blocking communicator (config.blocking = 1), which
// NCCL_COMM_BLOCKING=0 in the environment overrides.
gn_result gn_init_rank(gn_api *a, gn_comm *c, int nranks, const gn_unique_id *id, int rank);
gn_result gn_async_error(gn_api *a, gn_comm c, gn_result *err);
gn_result gn_abort(gn_api *a, gn_comm c);
gn_result gn_destroy(gn_api *a, gn_comm c);
int gn_has_finalize(gn_api *a);
gn_result gn_finalize(gn_api *a, gn_comm c);
gn_result gn_group_start(gn_api *a);
gn_result gn_group_end(gn_api *a);
// The operations, on float32 data (ncclFloat32) with sum (ncclSum).
gn_result gn_all_reduce(gn_api *a, unsigned long long send, unsigned long long recv, size_t count, gn_comm c, gn_stream s);
gn_result gn_all_gather(gn_api *a, unsigned long long send, unsigned long long recv, size_t count, gn_comm c, gn_stream s);
gn_result gn_reduce_scatter(gn_api *a, unsigned long long send, unsigned long long recv, size_t count, gn_comm c, gn_stream s);
gn_result gn_send(gn_api *a, unsigned long long buf, size_t count, int peer, gn_comm c, gn_stream s);
gn_result gn_recv(gn_api *a, unsigned long long buf, size_t count, int peer, gn_comm c, gn_stream s);

#endif
