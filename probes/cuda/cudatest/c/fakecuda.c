// A fake libcuda.so.1 for tests without a GPU. It implements the driver
// entry points the probes look up, over plain host memory, with a model of
// streams, events, the spin gate and copy rates, so probe logic (what is
// queued behind the gate, what is timed, the arithmetic) is tested through
// the real cgo path. Copies really copy and the chase kernel really follows
// pointers, so a broken chain or a copy into the wrong buffer shows.
//
// Environment (read at cuInit):
//   FAKE_CUDA_DEVICES=2            number of GPUs
//   FAKE_CUDA_BUSIDS=a,b           PCI addresses, reported as CUDA does (upper case, 8-digit domain)
//   FAKE_CUDA_PEER=1               whether GPUs can access each other
//   FAKE_CUDA_H2D_GBPS=50 D2H_GBPS=48 LOCAL_GBPS=1500 (bytes copied) PEER_GBPS=380
//   FAKE_CUDA_HOST_LAT_NS=1200 PEER_LAT_NS=800 LAUNCH_NS=5000
//   FAKE_CUDA_LAUNCH_SLEEP_US=0    real sleep in a sync after an empty kernel (launch latency)
//   FAKE_CUDA_FAIL=name:code[:nth],...  make the nth call (0: every call) of name fail
//   FAKE_CUDA_HANG=name            block for ever inside name
//   FAKE_CUDA_MEM_TOTAL=85899345920, FAKE_CUDA_CTX_BYTES=536870912
// Build with -DOMIT_cuMemHostRegister_v2 (any symbol) to leave one out.
//
// The model: each stream runs its queued work in order on a virtual clock.
// Work behind a spin kernel waits until the gate word in host memory is
// non-zero; it is looked at only when the host synchronises, so an event
// query after opening the gate still says "not ready" (the copies are still
// running, as on a GPU). A copy takes bytes / rate of its kind; a chase
// takes hops x latency of the memory it reads.
//
// Hooks for the fake libnccl (probes/nccl/nccltest), which finds this
// library among those loaded and calls them: fakecuda_enqueue_busy queues
// a stretch of busy time on a stream (an NCCL operation's), optionally held
// until a word in the caller's memory is zero (a hung operation, released
// by ncclCommAbort); fakecuda_current_device and fakecuda_is_device_memory
// answer what NCCL asks CUDA. A synchronisation waits, as on a GPU, while
// a held operation stands between it and its work.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
	OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201,
	INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600, ILLEGAL_ADDRESS = 700,
	PEER_ACCESS_UNSUPPORTED = 217, PEER_ACCESS_ALREADY_ENABLED = 704, PEER_NOT_ENABLED = 705,
	INVALID_PTX = 218, UNKNOWN = 999,
};

#define MAXDEV 16
#define MAXALLOC 4096
#define MAXOPS 4096

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inited;
static int ndev = 2;
static char busids[MAXDEV][64];
static int peer_ok = 1;
static double h2d = 50, d2h = 48, local = 1500, peer = 380; // GB/s
static double host_lat = 1200, peer_lat = 800, launch_ns = 5000;
static long launch_sleep_us;
static unsigned long long mem_total = 85899345920ULL, ctx_bytes = 536870912ULL;
static char hang[128];
static int sticky; // a fault poisons every later call, as on a GPU

struct fail { char name[64]; int code; int nth; int calls; };
static struct fail fails[16];
static int nfails;

struct ctx { int dev; int retained; int peer[MAXDEV]; };
static struct ctx ctxs[MAXDEV];
static __thread struct ctx *cur;

enum { HOSTMEM = 1, DEVMEM = 2 };
struct alloc { uintptr_t base; size_t size; int kind; int dev; int live; };
static struct alloc allocs[MAXALLOC];
static int nallocs;
static unsigned long long dev_used[MAXDEV];

struct event { int recorded; int done; double t; };
enum { OP_COPY, OP_SPIN, OP_CHASE, OP_EMPTY, OP_RECORD, OP_WAIT, OP_BUSY };
struct op {
	int kind;
	CUdeviceptr dst, src; size_t n;             // copy
	volatile int *gate; int *timed_out;         // spin
	CUdeviceptr start; unsigned hops; CUdeviceptr out; // chase
	struct event *ev;                           // record, wait
	double ns; volatile int *hold;              // busy
};
struct stream { struct ctx *c; double t; struct op ops[MAXOPS]; int head, tail; int empty_ran; };

static double now_ns; // the host's clock in the model: every call costs 1 us

static double envf(const char *k, double d) { const char *v = getenv(k); return v && *v ? atof(v) : d; }

static void read_env(void) {
	ndev = (int)envf("FAKE_CUDA_DEVICES", 2);
	if (ndev > MAXDEV) ndev = MAXDEV;
	for (int i = 0; i < ndev; i++) snprintf(busids[i], sizeof busids[i], "00000000:%02X:00.0", 0x18 + 0x10 * i);
	const char *b = getenv("FAKE_CUDA_BUSIDS");
	if (b && *b) {
		char buf[1024]; snprintf(buf, sizeof buf, "%s", b);
		int i = 0;
		for (char *tok = strtok(buf, ","); tok && i < ndev; tok = strtok(NULL, ","), i++) {
			char up[48]; size_t j;
			for (j = 0; tok[j] && j < sizeof up - 1; j++) up[j] = (tok[j] >= 'a' && tok[j] <= 'f') ? tok[j] - 32 : tok[j];
			up[j] = 0;
			snprintf(busids[i], sizeof busids[i], "0000%s", up);
		}
	}
	peer_ok = (int)envf("FAKE_CUDA_PEER", 1);
	h2d = envf("FAKE_CUDA_H2D_GBPS", h2d); d2h = envf("FAKE_CUDA_D2H_GBPS", d2h);
	local = envf("FAKE_CUDA_LOCAL_GBPS", local); peer = envf("FAKE_CUDA_PEER_GBPS", peer);
	host_lat = envf("FAKE_CUDA_HOST_LAT_NS", host_lat); peer_lat = envf("FAKE_CUDA_PEER_LAT_NS", peer_lat);
	launch_ns = envf("FAKE_CUDA_LAUNCH_NS", launch_ns);
	launch_sleep_us = (long)envf("FAKE_CUDA_LAUNCH_SLEEP_US", 0);
	mem_total = (unsigned long long)envf("FAKE_CUDA_MEM_TOTAL", (double)mem_total);
	ctx_bytes = (unsigned long long)envf("FAKE_CUDA_CTX_BYTES", (double)ctx_bytes);
	const char *h = getenv("FAKE_CUDA_HANG");
	snprintf(hang, sizeof hang, "%s", h ? h : "");
	const char *f = getenv("FAKE_CUDA_FAIL");
	if (f && *f) {
		char buf[1024]; snprintf(buf, sizeof buf, "%s", f);
		char *save;
		for (char *tok = strtok_r(buf, ",", &save); tok && nfails < 16; tok = strtok_r(NULL, ",", &save)) {
			struct fail *x = &fails[nfails++];
			memset(x, 0, sizeof *x);
			char *c1 = strchr(tok, ':');
			x->code = UNKNOWN;
			if (c1) { *c1 = 0; x->code = atoi(c1 + 1); char *c2 = strchr(c1 + 1, ':'); if (c2) x->nth = atoi(c2 + 1); }
			snprintf(x->name, sizeof x->name, "%s", tok);
		}
	}
}

// enter is the first thing every entry point does: the model's clock, the
// injected hang and failure.
static CUresult enter(const char *name) {
	now_ns += 1000;
	if (hang[0] && strcmp(hang, name) == 0) {
		pthread_mutex_unlock(&mu);
		for (;;) pause();
	}
	for (int i = 0; i < nfails; i++) {
		if (strcmp(fails[i].name, name) == 0) {
			fails[i].calls++;
			if (fails[i].nth == 0 || fails[i].nth == fails[i].calls) return fails[i].code;
		}
	}
	if (!inited && strcmp(name, "cuInit") && strcmp(name, "cuDriverGetVersion") &&
	    strcmp(name, "cuGetErrorName") && strcmp(name, "cuGetErrorString")) return NOT_INITIALIZED;
	return sticky;
}

#define ENTER(name) pthread_mutex_lock(&mu); { CUresult r_ = enter(name); if (r_) { pthread_mutex_unlock(&mu); return r_; } }
#define RETURN(v) do { CUresult rv_ = (v); pthread_mutex_unlock(&mu); return rv_; } while (0)
#define NEED_CTX() do { if (!cur) RETURN(INVALID_CONTEXT); } while (0)

static struct alloc *find(uintptr_t p, size_t n) {
	for (int i = 0; i < nallocs; i++) {
		struct alloc *a = &allocs[i];
		if (a->live && p >= a->base && p + n <= a->base + a->size) return a;
	}
	return NULL;
}

CUresult cuInit(unsigned flags) {
	pthread_mutex_lock(&mu);
	static int env_read;
	if (!env_read) { read_env(); env_read = 1; }
	CUresult r = enter("cuInit");
	if (r == OK) inited = 1;
	RETURN(flags ? INVALID_VALUE : r);
}

CUresult cuDriverGetVersion(int *v) { ENTER("cuDriverGetVersion"); *v = 13000; RETURN(OK); }

static const char *names[][2] = {
	{"0", "CUDA_SUCCESS"}, {"1", "CUDA_ERROR_INVALID_VALUE"}, {"2", "CUDA_ERROR_OUT_OF_MEMORY"},
	{"3", "CUDA_ERROR_NOT_INITIALIZED"}, {"201", "CUDA_ERROR_INVALID_CONTEXT"}, {"218", "CUDA_ERROR_INVALID_PTX"},
	{"400", "CUDA_ERROR_INVALID_HANDLE"}, {"500", "CUDA_ERROR_NOT_FOUND"}, {"600", "CUDA_ERROR_NOT_READY"},
	{"700", "CUDA_ERROR_ILLEGAL_ADDRESS"}, {"217", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
	{"704", "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"}, {"705", "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"},
	{"999", "CUDA_ERROR_UNKNOWN"},
};

CUresult cuGetErrorName(CUresult e, const char **s) {
	char k[16]; snprintf(k, sizeof k, "%d", e);
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(names[i][0], k) == 0) { *s = names[i][1]; return OK; }
	*s = NULL;
	return INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **s) {
	const char *n;
	if (cuGetErrorName(e, &n) != OK) { *s = NULL; return INVALID_VALUE; }
	*s = "fake driver error";
	return OK;
}

CUresult cuDeviceGetCount(int *n) { ENTER("cuDeviceGetCount"); *n = ndev; RETURN(OK); }
CUresult cuDeviceGet(CUdevice *d, int o) { ENTER("cuDeviceGet"); if (o < 0 || o >= ndev) RETURN(INVALID_VALUE); *d = o; RETURN(OK); }
CUresult cuDeviceGetName(char *s, int len, CUdevice d) { ENTER("cuDeviceGetName"); snprintf(s, len, "Fake H200 %d", d); RETURN(OK); }
CUresult cuDeviceGetPCIBusId(char *s, int len, CUdevice d) {
	ENTER("cuDeviceGetPCIBusId");
	if (d < 0 || d >= ndev) RETURN(INVALID_VALUE);
	snprintf(s, len, "%s", busids[d]);
	RETURN(OK);
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	ENTER("cuDeviceGetAttribute");
	switch (attr) {
	case 13: *v = 1980000; break; case 16: *v = 132; break; case 19: case 41: *v = 1; break;
	case 40: *v = 3; break; case 75: *v = 9; break; case 76: *v = 0; break; default: *v = 0;
	}
	RETURN(d >= 0 && d < ndev ? OK : INVALID_VALUE);
}
CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice p) { ENTER("cuDeviceCanAccessPeer"); *can = peer_ok && d != p; RETURN(OK); }

CUresult cuDevicePrimaryCtxRetain(void **c, CUdevice d) {
	ENTER("cuDevicePrimaryCtxRetain");
	if (d < 0 || d >= ndev) RETURN(INVALID_VALUE);
	ctxs[d].dev = d;
	ctxs[d].retained++;
	*c = &ctxs[d];
	RETURN(OK);
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
	ENTER("cuDevicePrimaryCtxRelease_v2");
	if (d < 0 || d >= ndev || ctxs[d].retained == 0) RETURN(INVALID_CONTEXT);
	if (--ctxs[d].retained == 0) {
		// The context goes and takes its memory with it.
		for (int i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].kind == DEVMEM && allocs[i].dev == d) { free((void *)allocs[i].base); allocs[i].live = 0; }
		dev_used[d] = 0;
		memset(ctxs[d].peer, 0, sizeof ctxs[d].peer);
	}
	RETURN(OK);
}
CUresult cuCtxSetCurrent(void *c) { ENTER("cuCtxSetCurrent"); cur = c; RETURN(OK); }
CUresult cuCtxEnablePeerAccess(void *p, unsigned flags) {
	ENTER("cuCtxEnablePeerAccess"); NEED_CTX();
	struct ctx *pc = p;
	if (flags || !pc || pc == cur) RETURN(INVALID_VALUE);
	if (!peer_ok) RETURN(PEER_ACCESS_UNSUPPORTED);
	if (cur->peer[pc->dev]) RETURN(PEER_ACCESS_ALREADY_ENABLED);
	cur->peer[pc->dev] = 1;
	RETURN(OK);
}
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) {
	ENTER("cuMemGetInfo_v2"); NEED_CTX();
	*t = mem_total;
	*f = mem_total - ctx_bytes - dev_used[cur->dev];
	RETURN(OK);
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	ENTER("cuMemAlloc_v2"); NEED_CTX();
	if (n == 0) RETURN(INVALID_VALUE);
	if (nallocs == MAXALLOC || dev_used[cur->dev] + n + ctx_bytes > mem_total) RETURN(OUT_OF_MEMORY);
	void *m = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
	if (!m) RETURN(OUT_OF_MEMORY);
	allocs[nallocs++] = (struct alloc){(uintptr_t)m, n, DEVMEM, cur->dev, 1};
	dev_used[cur->dev] += n;
	*p = (uintptr_t)m;
	RETURN(OK);
}
CUresult cuMemFree_v2(CUdeviceptr p) {
	ENTER("cuMemFree_v2"); NEED_CTX();
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].live && allocs[i].kind == DEVMEM && allocs[i].base == p) {
			allocs[i].live = 0; dev_used[allocs[i].dev] -= allocs[i].size; free((void *)p); RETURN(OK);
		}
	RETURN(INVALID_VALUE);
}
#ifndef OMIT_cuMemHostRegister_v2
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
	ENTER("cuMemHostRegister_v2"); NEED_CTX();
	if (!p || !n || (flags & ~3u)) RETURN(INVALID_VALUE);
	if (find((uintptr_t)p, 1)) RETURN(712); // already registered
	if (nallocs == MAXALLOC) RETURN(OUT_OF_MEMORY);
	allocs[nallocs++] = (struct alloc){(uintptr_t)p, n, HOSTMEM, -1, 1};
	RETURN(OK);
}
#endif
CUresult cuMemHostUnregister(void *p) {
	ENTER("cuMemHostUnregister");
	for (int i = 0; i < nallocs; i++)
		if (allocs[i].live && allocs[i].kind == HOSTMEM && allocs[i].base == (uintptr_t)p) { allocs[i].live = 0; RETURN(OK); }
	RETURN(INVALID_VALUE);
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags) {
	ENTER("cuMemHostGetDevicePointer_v2");
	struct alloc *a = find((uintptr_t)p, 1);
	if (flags || !a || a->kind != HOSTMEM) RETURN(INVALID_VALUE);
	*d = (uintptr_t)p; // unified addressing: the same address
	RETURN(OK);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	ENTER("cuMemcpyHtoD_v2"); NEED_CTX();
	struct alloc *a = find(dst, n);
	if (!a || a->kind != DEVMEM) RETURN(INVALID_VALUE);
	memcpy((void *)dst, src, n);
	RETURN(OK);
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
	ENTER("cuMemsetD8_v2"); NEED_CTX();
	struct alloc *a = find(p, n);
	if (!a || a->kind != DEVMEM) RETURN(INVALID_VALUE);
	memset((void *)p, v, n);
	RETURN(OK);
}

CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *opts, void **vals) {
	ENTER("cuModuleLoadDataEx"); NEED_CTX();
	const char *ptx = img;
	if (!strstr(ptx, ".version") || !strstr(ptx, ".target")) {
		for (unsigned i = 0; i < n; i++)
			if (opts[i] == 5 && vals[i]) snprintf(vals[i], 64, "ptxas fatal: not PTX");
		RETURN(INVALID_PTX);
	}
	*m = strdup(ptx);
	RETURN(OK);
}
CUresult cuModuleUnload(void *m) { ENTER("cuModuleUnload"); free(m); RETURN(OK); }

// Kernels are known by name; the function handle is the name.
static const char *kernels[] = {"gpulink_spin", "gpulink_chase", "gpulink_empty"};
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	ENTER("cuModuleGetFunction");
	char entry[128]; snprintf(entry, sizeof entry, ".entry %s(", name);
	if (!strstr(m, entry)) RETURN(NOT_FOUND);
	for (size_t i = 0; i < 3; i++) if (strcmp(kernels[i], name) == 0) { *f = (void *)kernels[i]; RETURN(OK); }
	RETURN(NOT_FOUND);
}

static void push(struct stream *s, struct op o) {
	if (s->head == s->tail) s->head = s->tail = 0; // drained: start the queue over
	if (s->tail < MAXOPS) s->ops[s->tail++] = o;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shmem, void *st, void **params, void **extra) {
	ENTER("cuLaunchKernel"); NEED_CTX();
	struct stream *s = st;
	if (!s || s->c != cur || extra || shmem || gx * gy * gz * bx * by * bz != 1) RETURN(INVALID_VALUE);
	struct op o = {0};
	if (f == kernels[0]) {
		o.kind = OP_SPIN;
		o.gate = (volatile int *)(uintptr_t)*(unsigned long long *)params[0];
		o.timed_out = (int *)(uintptr_t)*(unsigned long long *)params[2];
		if (!find((uintptr_t)o.gate, 4) || find((uintptr_t)o.gate, 4)->kind != HOSTMEM) RETURN(INVALID_VALUE);
	} else if (f == kernels[1]) {
		o.kind = OP_CHASE;
		o.start = *(unsigned long long *)params[0];
		o.hops = *(unsigned *)params[1];
		o.out = *(unsigned long long *)params[2];
		if (!find(o.out, 16)) RETURN(INVALID_VALUE);
	} else if (f == kernels[2]) {
		if (params) RETURN(INVALID_VALUE);
		o.kind = OP_EMPTY;
	} else {
		RETURN(INVALID_HANDLE);
	}
	push(s, o);
	RETURN(OK);
}

// Every live stream, so a synchronisation runs them all (events cross
// streams).
static struct stream *streams[64];
static int nstreams;
static void track(struct stream *s) {
	for (int i = 0; i < nstreams; i++) if (streams[i] == s) return;
	if (nstreams < 64) streams[nstreams++] = s;
}
static void untrack(struct stream *s) {
	for (int i = 0; i < nstreams; i++) if (streams[i] == s) { streams[i] = streams[--nstreams]; return; }
}

CUresult cuStreamCreate(void **st, unsigned flags) {
	ENTER("cuStreamCreate"); NEED_CTX();
	struct stream *s = calloc(1, sizeof *s);
	s->c = cur;
	track(s);
	*st = s;
	RETURN(OK);
}
CUresult cuStreamDestroy_v2(void *st) { ENTER("cuStreamDestroy_v2"); untrack(st); free(st); RETURN(OK); }

CUresult cuEventCreate(void **e, unsigned flags) { ENTER("cuEventCreate"); NEED_CTX(); *e = calloc(1, sizeof(struct event)); RETURN(OK); }
CUresult cuEventDestroy_v2(void *e) { ENTER("cuEventDestroy_v2"); free(e); RETURN(OK); }
CUresult cuEventRecord(void *e, void *st) {
	ENTER("cuEventRecord"); NEED_CTX();
	struct event *ev = e;
	ev->recorded = 1; ev->done = 0;
	push(st, (struct op){.kind = OP_RECORD, .ev = ev});
	RETURN(OK);
}
CUresult cuStreamWaitEvent(void *st, void *e, unsigned flags) {
	ENTER("cuStreamWaitEvent"); NEED_CTX();
	push(st, (struct op){.kind = OP_WAIT, .ev = e});
	RETURN(OK);
}

static double rate_of(struct stream *s, struct alloc *src, struct alloc *dst) {
	if (src->kind == HOSTMEM && dst->kind == DEVMEM) return h2d;
	if (src->kind == DEVMEM && dst->kind == HOSTMEM) return d2h;
	if (src->kind == DEVMEM && dst->kind == DEVMEM) return src->dev == dst->dev ? local : peer;
	return 1; // host to host: not a probe
}

// run executes what it can of s; force makes a closed gate time out, as the
// spin kernel does when the host never opens it.
static CUresult run(struct stream *s, int force, int *progress) {
	while (s->head < s->tail) {
		struct op *o = &s->ops[s->head];
		switch (o->kind) {
		case OP_SPIN:
			if (!*o->gate) {
				if (!force) return OK;
				*o->timed_out = 1;
			}
			if (s->t < now_ns) s->t = now_ns;
			break;
		case OP_COPY: {
			struct alloc *a = find(o->src, o->n), *b = find(o->dst, o->n);
			if (!a || !b) { sticky = ILLEGAL_ADDRESS; return sticky; }
			if (a->kind == DEVMEM && b->kind == DEVMEM && a->dev != b->dev && !s->c->peer[a->dev == s->c->dev ? b->dev : a->dev]) return PEER_NOT_ENABLED;
			memmove((void *)o->dst, (void *)o->src, o->n);
			s->t += o->n / rate_of(s, a, b); // bytes / (GB/s) = ns
			break;
		}
		case OP_CHASE: {
			uintptr_t p = o->start;
			double lat = 0;
			for (unsigned i = 0; i < o->hops; i++) {
				struct alloc *a = find(p, 8);
				if (!a) { sticky = ILLEGAL_ADDRESS; return sticky; }
				if (a->kind == DEVMEM && a->dev != s->c->dev && !s->c->peer[a->dev]) { sticky = ILLEGAL_ADDRESS; return sticky; }
				lat += a->kind == HOSTMEM ? host_lat : (a->dev == s->c->dev ? 600 : peer_lat);
				p = *(uintptr_t *)p;
			}
			((unsigned long long *)(uintptr_t)o->out)[0] = p;
			((unsigned long long *)(uintptr_t)o->out)[1] = (unsigned long long)lat;
			s->t += launch_ns + lat;
			break;
		}
		case OP_EMPTY:
			s->t += launch_ns;
			s->empty_ran = 1;
			break;
		case OP_RECORD:
			o->ev->t = s->t;
			o->ev->done = 1;
			break;
		case OP_WAIT:
			if (!o->ev->done) return OK;
			if (s->t < o->ev->t) s->t = o->ev->t;
			break;
		case OP_BUSY:
			if (o->hold && *o->hold) return OK; // never forced: only its owner lets it go
			s->t += o->ns;
			break;
		}
		s->head++;
		*progress = 1;
	}
	return OK;
}

// settle runs every stream until none can move; then, if force, opens the
// gates that are still shut (their spin kernels time out) and goes on.
static CUresult settle(int force) {
	for (int pass = 0; pass < 2; pass++) {
		int progress = 1;
		while (progress) {
			progress = 0;
			for (int i = 0; i < nstreams; i++) {
				CUresult r = run(streams[i], pass == 1 && force, &progress);
				if (r) return r;
			}
		}
	}
	return OK;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void *st) {
	ENTER("cuMemcpyAsync"); NEED_CTX();
	struct alloc *a = find(src, n), *b = find(dst, n);
	// Pageable host memory would be copied through a bounce buffer at a
	// fraction of the rate: the probes must pin what they copy.
	if (!a || !b) RETURN(INVALID_VALUE);
	push(st, (struct op){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
	RETURN(OK);
}

static void sleep_after_empty(struct stream *s) {
	if (s->empty_ran && launch_sleep_us > 0) usleep(launch_sleep_us);
	s->empty_ran = 0;
}

// held says whether some stream is stopped at a held busy operation: a
// synchronisation that still has work left then waits for it to be let go,
// with the lock released so the owner can.
static int held(void) {
	for (int i = 0; i < nstreams; i++) {
		struct stream *s = streams[i];
		if (s->head < s->tail && s->ops[s->head].kind == OP_BUSY && s->ops[s->head].hold && *s->ops[s->head].hold) return 1;
	}
	return 0;
}
static void wait_held(void) { pthread_mutex_unlock(&mu); usleep(1000); pthread_mutex_lock(&mu); }

static int ctx_busy(struct ctx *c) {
	for (int i = 0; i < nstreams; i++) if (streams[i]->c == c && streams[i]->head < streams[i]->tail) return 1;
	return 0;
}

CUresult cuStreamSynchronize(void *st) {
	ENTER("cuStreamSynchronize");
	struct stream *s = st;
	CUresult r;
	while ((r = settle(1)) == OK && s->head < s->tail && held()) wait_held();
	sleep_after_empty(st);
	RETURN(r);
}
CUresult cuCtxSynchronize(void) {
	ENTER("cuCtxSynchronize"); NEED_CTX();
	CUresult r;
	while ((r = settle(1)) == OK && ctx_busy(cur) && held()) wait_held();
	RETURN(r);
}
CUresult cuEventSynchronize(void *e) {
	ENTER("cuEventSynchronize");
	CUresult r;
	while ((r = settle(1)) == OK && ((struct event *)e)->recorded && !((struct event *)e)->done && held()) wait_held();
	if (r == OK && !((struct event *)e)->recorded) r = INVALID_HANDLE;
	for (int i = 0; i < nstreams; i++) sleep_after_empty(streams[i]);
	RETURN(r);
}
CUresult cuEventQuery(void *e) {
	ENTER("cuEventQuery");
	RETURN(((struct event *)e)->done ? OK : NOT_READY);
}
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
	ENTER("cuEventElapsedTime");
	struct event *s = a, *e = b;
	if (!s->done || !e->done) RETURN(NOT_READY);
	*ms = (float)((e->t - s->t) / 1e6);
	RETURN(OK);
}

// The hooks for the fake libnccl (see the top of this file).

// fakecuda_enqueue_busy queues ns of work on stream st; with hold set it
// does not start while *hold is non-zero. INVALID_HANDLE: st is not a
// stream of this library (another copy of the fake may own it).
CUresult fakecuda_enqueue_busy(void *st, double ns, volatile int *hold) {
	pthread_mutex_lock(&mu);
	struct stream *s = NULL;
	for (int i = 0; i < nstreams; i++) if (streams[i] == st) s = st;
	if (!s) RETURN(INVALID_HANDLE);
	if (ns < 0) RETURN(INVALID_VALUE);
	push(s, (struct op){.kind = OP_BUSY, .ns = ns, .hold = hold});
	RETURN(OK);
}

// fakecuda_current_device is the device of the calling thread's current
// context, -1 with none.
int fakecuda_current_device(void) {
	pthread_mutex_lock(&mu);
	int d = cur ? cur->dev : -1;
	pthread_mutex_unlock(&mu);
	return d;
}

// fakecuda_is_device_memory says whether n bytes at p are device memory
// allocated through this library.
int fakecuda_is_device_memory(unsigned long long p, size_t n) {
	pthread_mutex_lock(&mu);
	struct alloc *a = find((uintptr_t)p, n);
	int ok = a && a->kind == DEVMEM;
	pthread_mutex_unlock(&mu);
	return ok;
}
