// A fake libnccl.so.2 for tests without a GPU. It implements the entry
// points probes/nccl looks up, over the fake libcuda of
// probes/cuda/cudatest: ranks in any processes meet through the unique id,
// communicators block or not as their config and NCCL_COMM_BLOCKING say, as
// NCCL's do, every operation queues
// modelled busy time on the caller's CUDA stream (so CUDA events time it),
// and NCCL_DEBUG=INFO writes connection lines in real NCCL's format.
//
// Environment (read at the first call):
//   FAKE_NCCL_VERSION=22703          ncclGetVersion's code
//   FAKE_NCCL_HOSTNAME=name          this process's host name (default: the real one); ranks on
//                                    different hosts connect through the network
//   FAKE_NCCL_TRANSPORT=p2p|shm|net  what connects two ranks on one host; NCCL_P2P_DISABLE=1
//                                    turns p2p into shm and NCCL_SHM_DISABLE=1 shm into net, as
//                                    NCCL falls back
//   FAKE_NCCL_P2P_GBPS=370 SHM_GBPS=20 NET_GBPS=45  bus bandwidth of each transport
//   FAKE_NCCL_LAT_US=10              fixed time of every operation (a group's send/recvs count once)
//   FAKE_NCCL_CHANNELS=2             ring channels; FAKE_NCCL_P2P_CHANNELS=2 channels per send/recv peer
//   FAKE_NCCL_P2P_READ=0             1: P2P connections in read mode ("P2P/CUMEM/read"), as NCCL
//                                    picks on A100 NVLink; H100s log plain "P2P/CUMEM"
//   FAKE_NCCL_NET_NAME=Socket        the network plugin, as in "NET/Socket/0"
//   FAKE_NCCL_CONNECT_POLLS=1        a group that had to connect ranks returns ncclInProgress and its
//                                    communicators answer inProgress to that many
//                                    ncclCommGetAsyncError calls (a finalize, the same)
//   FAKE_NCCL_FAIL=name:code[:nth],...  the nth call (0: every call) of name returns code; for
//                                    ncclCommGetAsyncError the code becomes the communicator's
//                                    async error, for good, as a peer that went away leaves it
//   FAKE_NCCL_HANG=name              ncclCommInitRankConfig: the communicator never becomes ready;
//                                    an operation (ncclAllReduce, ncclSend...): it never completes,
//                                    its stream never drains and its communicator stays in progress
//                                    until ncclCommAbort; ncclCommFinalize: it never finishes; any
//                                    other entry point blocks for ever
//   FAKE_NCCL_REQUIRE_BLOCKING=1     every operation on a non-blocking communicator fails with
//                                    ncclInvalidUsage: a test's proof that the operations it timed
//                                    ran on blocking ones
//   FAKE_NCCL_NVLS_MARK=path         a line "pid rank dev" is appended for each communicator made
//                                    with NVLS on (NCCL_NVLS_ENABLE unset or not 0, NCCL's default
//                                    on an NVSwitch machine)
// and NCCL's own NCCL_COMM_BLOCKING, NCCL_RUNTIME_CONNECT (from 2.22 rings connect at the first
// collective, not at init; 0 connects at init), NCCL_DEBUG (VERSION, WARN, INFO, TRACE),
// NCCL_DEBUG_SUBSYS (INIT, P2P, SHM, NET, ENV, ALL; a leading ^ inverts) and NCCL_DEBUG_FILE
// (%h: host, %p: pid; stdout when unset).
// Build with -DOMIT_ncclCommInitRankConfig (any entry point) to leave one out.
//
// The unique id holds the path of a new directory under $TMPDIR. Each rank
// writes a file there saying where it runs (pid, host, CUDA device); a
// communicator is ready once all nranks files are there. The fake libcuda
// is found among the libraries the process has loaded (dl_iterate_phdr,
// then dlopen with RTLD_NOLOAD, so no second copy is ever loaded): no path
// to configure or get wrong, and where a test process holds several
// copies, each operation goes to the copy that owns its stream.
//
// The timing model: a collective over n ranks of S bytes (nccl-tests'
// size: the whole buffer of an all-reduce, the gathered one of an
// all-gather) takes LAT + S x busfactor / rate of the ring's slowest
// connection, busfactor being 2(n-1)/n for all-reduce and (n-1)/n for
// all-gather and reduce-scatter, so nccl-tests' bus bandwidth comes out
// as the rate. A group's sends and receives on one stream take LAT + the
// larger of the bytes sent and the bytes received, each over its peer's
// rate. Bytes / (GB/s) = ns.
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int ncclResult_t;
enum {
	ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
	ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7,
};
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
// ncclConfig_t's header and first attribute, the same in every version.
typedef struct { size_t size; unsigned int magic; unsigned int version; int blocking; } config_head;

#define MAXCOMMS 256
#define MAXRANKS 64
#define MAXQ 4096
#define ID_MAGIC "FAKENCCL"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

// Settings.
static int version = 22703;
static char hostname[64];
enum { T_P2P, T_SHM, T_NET };
static int transport_kind = T_P2P;
static double rate[3] = {370, 20, 45}; // GB/s by transport
static double lat_ns = 10000;
static int channels = 2, p2p_channels = 2, p2p_read = 0, connect_polls = 1, runtime_connect = 1, require_blocking = 0;
static char net_name[32] = "Socket";
static char hang[64], nvls_mark[512];
struct fail { char name[64]; int code, nth, calls; };
static struct fail fails[16];
static int nfails;
enum { L_NONE, L_VERSION, L_WARN, L_INFO, L_TRACE };
static int debug_level;
enum { S_INIT = 1, S_COLL = 2, S_P2P = 4, S_SHM = 8, S_NET = 16, S_ENV = 128, S_BOOTSTRAP = 4096 };
static unsigned long subsys = S_INIT | S_BOOTSTRAP | S_ENV;
static FILE *debug_file;

static char last_error[1024];

struct peer { int pid; char host[64]; int dev; };
enum { WAITING, READY, FAILED, FINALIZING, GONE };
struct ncclComm {
	int state, err;
	int rank, nranks, dev, blocking, hung_init, hung_finalize;
	char dir[128];
	struct peer peers[MAXRANKS];
	int polls;          // inProgress answers still owed
	volatile int hold;  // a hung operation waits on the stream while this is non-zero
	int op_hung, rings, touched, newconn;
	unsigned char sendc[MAXRANKS], recvc[MAXRANKS];
};
// Communicators are never reused: a held operation keeps a pointer to its
// hold word after the communicator is gone.
static struct ncclComm comms[MAXCOMMS];
static int ncomms;

enum { Q_COLL, Q_SEND, Q_RECV };
struct qop { struct ncclComm *c; void *stream; int kind; double bytes, factor; int peer, hang; };
struct group { int depth, nq, ninit, err; struct qop q[MAXQ]; struct ncclComm *inits[MAXCOMMS]; };
static __thread struct group *grp_; // large: allocated, not in static TLS

static struct group *grp(void) {
	if (!grp_) grp_ = calloc(1, sizeof *grp_);
	return grp_;
}

static void group_error(ncclResult_t r) {
	if (grp_ && grp_->depth > 0 && !grp_->err) grp_->err = r;
}

static double envf(const char *k, double d) { const char *v = getenv(k); return v && *v ? atof(v) : d; }
static int env_on(const char *k) { const char *v = getenv(k); return v && *v && atoi(v) != 0; }

static void read_env(void) {
	version = (int)envf("FAKE_NCCL_VERSION", version);
	const char *h = getenv("FAKE_NCCL_HOSTNAME");
	if (h && *h) {
		snprintf(hostname, sizeof hostname, "%s", h);
	} else {
		gethostname(hostname, sizeof hostname - 1);
		hostname[strcspn(hostname, ".")] = 0; // NCCL logs the short name
	}
	const char *t = getenv("FAKE_NCCL_TRANSPORT");
	if (t && strcmp(t, "shm") == 0) transport_kind = T_SHM;
	if (t && strcmp(t, "net") == 0) transport_kind = T_NET;
	rate[T_P2P] = envf("FAKE_NCCL_P2P_GBPS", rate[T_P2P]);
	rate[T_SHM] = envf("FAKE_NCCL_SHM_GBPS", rate[T_SHM]);
	rate[T_NET] = envf("FAKE_NCCL_NET_GBPS", rate[T_NET]);
	lat_ns = envf("FAKE_NCCL_LAT_US", lat_ns / 1000) * 1000;
	channels = (int)envf("FAKE_NCCL_CHANNELS", channels);
	p2p_channels = (int)envf("FAKE_NCCL_P2P_CHANNELS", p2p_channels);
	p2p_read = (int)envf("FAKE_NCCL_P2P_READ", p2p_read);
	connect_polls = (int)envf("FAKE_NCCL_CONNECT_POLLS", connect_polls);
	require_blocking = env_on("FAKE_NCCL_REQUIRE_BLOCKING");
	runtime_connect = version >= 22200 && (int)envf("NCCL_RUNTIME_CONNECT", 1) != 0;
	const char *n = getenv("FAKE_NCCL_NET_NAME");
	if (n && *n) snprintf(net_name, sizeof net_name, "%s", n);
	h = getenv("FAKE_NCCL_HANG");
	snprintf(hang, sizeof hang, "%s", h ? h : "");
	h = getenv("FAKE_NCCL_NVLS_MARK");
	snprintf(nvls_mark, sizeof nvls_mark, "%s", h ? h : "");
	const char *f = getenv("FAKE_NCCL_FAIL");
	if (f && *f) {
		char buf[1024];
		snprintf(buf, sizeof buf, "%s", f);
		char *save;
		for (char *tok = strtok_r(buf, ",", &save); tok && nfails < 16; tok = strtok_r(NULL, ",", &save)) {
			struct fail *x = &fails[nfails++];
			memset(x, 0, sizeof *x);
			x->code = ncclInternalError;
			char *c1 = strchr(tok, ':');
			if (c1) {
				*c1 = 0;
				x->code = atoi(c1 + 1);
				char *c2 = strchr(c1 + 1, ':');
				if (c2) x->nth = atoi(c2 + 1);
			}
			snprintf(x->name, sizeof x->name, "%s", tok);
		}
	}
	const char *d = getenv("NCCL_DEBUG");
	if (d) {
		if (strcasecmp(d, "VERSION") == 0) debug_level = L_VERSION;
		if (strcasecmp(d, "WARN") == 0) debug_level = L_WARN;
		if (strcasecmp(d, "INFO") == 0) debug_level = L_INFO;
		if (strcasecmp(d, "TRACE") == 0) debug_level = L_TRACE;
	}
	const char *s = getenv("NCCL_DEBUG_SUBSYS");
	if (s && *s) {
		static const struct { const char *name; unsigned long bit; } names[] = {
			{"INIT", S_INIT}, {"COLL", S_COLL}, {"P2P", S_P2P}, {"SHM", S_SHM}, {"NET", S_NET},
			{"ENV", S_ENV}, {"BOOTSTRAP", S_BOOTSTRAP}, {"ALL", ~0UL},
		};
		int invert = s[0] == '^';
		unsigned long mask = 0;
		char buf[256];
		snprintf(buf, sizeof buf, "%s", s + invert);
		char *save;
		for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
				if (strcasecmp(tok, names[i].name) == 0) mask |= names[i].bit;
		subsys = invert ? ~mask : mask;
	}
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

// --- logging, in NCCL's format: "host:pid:tid [dev] NCCL INFO ..." ---

static void open_debug_file(void) {
	debug_file = stdout;
	const char *p = getenv("NCCL_DEBUG_FILE");
	if (!p || !*p) return;
	char name[1024];
	size_t j = 0;
	for (size_t i = 0; p[i] && j < sizeof name - 32; i++) {
		if (p[i] == '%' && p[i + 1] == 'h') { j += snprintf(name + j, sizeof name - j, "%s", hostname); i++; }
		else if (p[i] == '%' && p[i + 1] == 'p') { j += snprintf(name + j, sizeof name - j, "%d", (int)getpid()); i++; }
		else if (p[i] == '%' && p[i + 1] == '%') { name[j++] = '%'; i++; }
		else name[j++] = p[i];
	}
	name[j] = 0;
	FILE *f = fopen(name, "w");
	if (f) debug_file = f;
}

static void vlog(const char *kind, const char *where, int dev, const char *fmt, va_list ap) {
	if (!debug_file) open_debug_file();
	char line[2048];
	int n;
	if (where)
		n = snprintf(line, sizeof line, "\n%s:%d:%d [%d] %s NCCL %s ", hostname, (int)getpid(), (int)syscall(SYS_gettid), dev, where, kind);
	else
		n = snprintf(line, sizeof line, "%s:%d:%d [%d] NCCL %s ", hostname, (int)getpid(), (int)syscall(SYS_gettid), dev, kind);
	vsnprintf(line + n, sizeof line - n, fmt, ap);
	fprintf(debug_file, "%s\n", line);
	fflush(debug_file);
}

static void logline(int dev, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vlog("INFO", NULL, dev, fmt, ap);
	va_end(ap);
}

static void info(int dev, unsigned long flags, const char *fmt, ...) {
	if (debug_level < L_INFO || !(flags & subsys)) return;
	va_list ap;
	va_start(ap, fmt);
	vlog("INFO", NULL, dev, fmt, ap);
	va_end(ap);
}

// fail_with records why a call fails, for ncclGetLastError and as a WARN
// line, and returns code.
static ncclResult_t fail_with(ncclResult_t code, int dev, int line, const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof last_error, fmt, ap);
	va_end(ap);
	if (debug_level >= L_WARN) {
		char where[64];
		snprintf(where, sizeof where, "fakenccl.c:%d", line);
		va_start(ap, fmt);
		vlog("WARN", where, dev, fmt, ap);
		va_end(ap);
	}
	return code;
}
#define FAIL(code, dev, ...) fail_with(code, dev, __LINE__, __VA_ARGS__)

// --- the fake libcuda, found among the loaded libraries ---

struct loaded { int n; char names[128][512]; };

static int collect(struct dl_phdr_info *info, size_t size, void *data) {
	struct loaded *l = data;
	if (info->dlpi_name && info->dlpi_name[0] && l->n < 128) snprintf(l->names[l->n++], sizeof l->names[0], "%s", info->dlpi_name);
	return 0;
}

// each_fakecuda calls f on every loaded library that has the fake
// libcuda's hooks, the latest loaded first, until f returns non-zero, and
// returns that; -1 when there is none. The names are collected first and
// opened after: dlopen inside dl_iterate_phdr's callback is not safe.
static int each_fakecuda(int (*f)(void *lib, void *arg), void *arg) {
	struct loaded *l = calloc(1, sizeof *l);
	dl_iterate_phdr(collect, l);
	int found = 0, res = 0;
	for (int i = l->n - 1; i >= 0 && !res; i--) {
		void *lib = dlopen(l->names[i], RTLD_LAZY | RTLD_NOLOAD);
		if (!lib) continue;
		if (dlsym(lib, "fakecuda_enqueue_busy")) {
			found = 1;
			res = f(lib, arg);
		}
		dlclose(lib);
	}
	free(l);
	return found ? res : -1;
}

struct enqueue_arg { void *stream; double ns; volatile int *hold; int result; };
static int try_enqueue(void *lib, void *arg) {
	struct enqueue_arg *a = arg;
	int (*fn)(void *, double, volatile int *) = (int (*)(void *, double, volatile int *))dlsym(lib, "fakecuda_enqueue_busy");
	a->result = fn(a->stream, a->ns, a->hold);
	return a->result != 400; // CUDA_ERROR_INVALID_HANDLE: another copy's stream
}

static int current_device(void);
// enqueue queues ns of busy time on stream; 0 or why not in last_error.
static ncclResult_t enqueue(void *stream, double ns, volatile int *hold) {
	struct enqueue_arg a = {stream, ns, hold, 0};
	int r = each_fakecuda(try_enqueue, &a);
	if (r < 0) return FAIL(ncclUnhandledCudaError, current_device(), "fake NCCL: no fake libcuda (with fakecuda_enqueue_busy) is loaded");
	if (a.result) return FAIL(ncclUnhandledCudaError, current_device(), "Cuda failure %d on stream %p", a.result, stream);
	return ncclSuccess;
}

static int try_device(void *lib, void *arg) {
	int (*fn)(void) = (int (*)(void))dlsym(lib, "fakecuda_current_device");
	*(int *)arg = fn ? fn() : -1;
	return *(int *)arg >= 0;
}
static int current_device(void) {
	int d = -1;
	each_fakecuda(try_device, &d);
	return d < 0 ? 0 : d;
}

struct mem_arg { unsigned long long p; size_t n; };
static int try_mem(void *lib, void *arg) {
	struct mem_arg *m = arg;
	int (*fn)(unsigned long long, size_t) = (int (*)(unsigned long long, size_t))dlsym(lib, "fakecuda_is_device_memory");
	return fn && fn(m->p, m->n);
}
static int device_memory(const void *p, size_t n) {
	struct mem_arg m = {(uintptr_t)p, n};
	return n == 0 || each_fakecuda(try_mem, &m) > 0;
}

// --- entry, injected failures and hangs ---

// async_hang names the entry points whose hang is modelled as work that
// never finishes, not as a call that never returns.
static int async_hang(const char *name) {
	static const char *names[] = {"ncclCommInitRankConfig", "ncclCommFinalize", "ncclAllReduce", "ncclAllGather",
		"ncclReduceScatter", "ncclSend", "ncclRecv"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) if (strcmp(names[i], name) == 0) return 1;
	return 0;
}

// enter is the first thing every entry point does, holding mu: the
// injected hang (a blocking one never returns) and failure.
static ncclResult_t enter(const char *name) {
	pthread_once(&env_once, read_env);
	if (hang[0] && strcmp(hang, name) == 0 && !async_hang(name)) {
		pthread_mutex_unlock(&mu);
		for (;;) pause();
	}
	for (int i = 0; i < nfails; i++) {
		struct fail *f = &fails[i];
		if (strcmp(f->name, name) != 0) continue;
		f->calls++;
		if (f->nth == 0 || f->nth == f->calls) {
			if (strcmp(name, "ncclCommGetAsyncError") == 0) return f->code; // the caller makes it the async error
			return FAIL(f->code, current_device(), "FAKE_NCCL_FAIL: %s call %d fails with %d", name, f->calls, f->code);
		}
	}
	return ncclSuccess;
}

// group_error records the first error of a call inside a group, as NCCL
// does (ncclGroupErrCheck): the group's end then launches nothing, fails
// the inits it holds and returns it.
static void group_error(ncclResult_t r);
#define ENTER(name) pthread_mutex_lock(&mu); { ncclResult_t r_ = enter(name); if (r_) { group_error(r_); pthread_mutex_unlock(&mu); return r_; } }
#define RETURN(v) do { ncclResult_t rv_ = (v); if (rv_ != ncclSuccess && rv_ != ncclInProgress) group_error(rv_); pthread_mutex_unlock(&mu); return rv_; } while (0)

static int hanging(const char *name) { return hang[0] && strcmp(hang, name) == 0; }

static struct ncclComm *valid(ncclComm_t c) {
	if (c < comms || c >= comms + ncomms || c->state == GONE) return NULL;
	return c;
}

// sleep_unlocked waits a millisecond with mu released, so other threads
// (another rank's, an abort) can go on.
static void sleep_unlocked(void) { pthread_mutex_unlock(&mu); usleep(1000); pthread_mutex_lock(&mu); }

// --- version, errors ---

#ifndef OMIT_ncclGetVersion
ncclResult_t ncclGetVersion(int *v) {
	ENTER("ncclGetVersion");
	if (!v) RETURN(FAIL(ncclInvalidArgument, 0, "ncclGetVersion : version argument is NULL"));
	*v = version;
	RETURN(ncclSuccess);
}
#endif

#ifndef OMIT_ncclGetErrorString
const char *ncclGetErrorString(ncclResult_t code) {
	switch (code) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}
#endif

#ifndef OMIT_ncclGetLastError
const char *ncclGetLastError(ncclComm_t comm) { return last_error; }
#endif

// --- unique id and rendezvous ---

#ifndef OMIT_ncclGetUniqueId
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	ENTER("ncclGetUniqueId");
	if (!id) RETURN(FAIL(ncclInvalidArgument, 0, "ncclGetUniqueId : uniqueId argument is NULL"));
	const char *tmp = getenv("TMPDIR");
	char dir[256];
	snprintf(dir, sizeof dir, "%s/fakenccl-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (strlen(dir) + 1 > sizeof id->internal - strlen(ID_MAGIC))
		RETURN(FAIL(ncclSystemError, 0, "fake NCCL: TMPDIR %s is too long for a unique id", tmp));
	if (!mkdtemp(dir)) RETURN(FAIL(ncclSystemError, 0, "fake NCCL: mkdtemp %s: %s", dir, strerror(errno)));
	memset(id, 0, sizeof *id);
	memcpy(id->internal, ID_MAGIC, strlen(ID_MAGIC));
	strcpy(id->internal + strlen(ID_MAGIC), dir);
	RETURN(ncclSuccess);
}
#endif

// arrived fills c->peers and says whether every rank has joined.
static int arrived(struct ncclComm *c) {
	for (int r = 0; r < c->nranks; r++) {
		char path[256];
		snprintf(path, sizeof path, "%s/rank.%d", c->dir, r);
		FILE *f = fopen(path, "r");
		if (!f) return 0;
		struct peer *p = &c->peers[r];
		int n = fscanf(f, "%d %63s %d", &p->pid, p->host, &p->dev);
		fclose(f);
		if (n != 3) return 0;
	}
	return 1;
}

static int transport(struct ncclComm *c, int a, int b) {
	if (strcmp(c->peers[a].host, c->peers[b].host) != 0) return T_NET;
	int t = transport_kind;
	if (t == T_P2P && env_on("NCCL_P2P_DISABLE")) t = T_SHM;
	if (t == T_SHM && env_on("NCCL_SHM_DISABLE")) t = T_NET;
	return t;
}

// log_conn logs one connection from rank from to rank to, as the rank that
// sets it up logs it: NET on both sides, P2P and SHM on the sending side.
static void log_conn(struct ncclComm *c, int ch, int conn, int from, int to) {
	int fd = c->peers[from].dev, td = c->peers[to].dev;
	switch (transport(c, from, to)) {
	case T_P2P:
		if (c->rank != from) return;
		info(c->dev, S_INIT | S_P2P, "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s", ch, conn, from, fd, to, td,
			c->peers[from].pid == c->peers[to].pid ? "direct pointer" : "CUMEM", p2p_read ? "/read" : "");
		break;
	case T_SHM:
		if (c->rank != from) return;
		info(c->dev, S_INIT | S_SHM, "Channel %02d : %d[%d] -> %d[%d] via SHM/direct/direct", ch, from, fd, to, td);
		break;
	case T_NET:
		// Send/recv connections share their buffers: "/Shared".
		info(c->dev, S_INIT | S_NET, "Channel %02d/%d : %d[%d] -> %d[%d] [%s] via NET/%s/0%s", ch, conn, from, fd, to, td,
			c->rank == from ? "send" : "receive", net_name, conn == 1 ? "/Shared" : "");
		break;
	}
}

// connect_rings makes the ring connections: to the next rank and from the
// previous, on every channel.
static void connect_rings(struct ncclComm *c) {
	c->rings = 1;
	if (c->nranks < 2) return;
	int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
	for (int ch = 0; ch < channels; ch++) {
		log_conn(c, ch, 0, prev, c->rank);
		log_conn(c, ch, 0, c->rank, next);
	}
	info(c->dev, S_INIT, "Connected all rings, use ring PXN 0 GDR 0");
	c->newconn = 1;
}

// connect_peer makes the send/recv connection to (send) or from peer the
// first time it is needed, on connection index 1 as NCCL's p2p operations.
static void connect_peer(struct ncclComm *c, int peer, int send) {
	unsigned char *done = send ? &c->sendc[peer] : &c->recvc[peer];
	if (peer == c->rank || *done) return;
	*done = 1;
	for (int ch = 0; ch < p2p_channels; ch++) {
		if (send) log_conn(c, ch, 1, c->rank, peer);
		else log_conn(c, ch, 1, peer, c->rank);
	}
	c->newconn = 1;
}

static void became_ready(struct ncclComm *c) {
	int nnodes = 0, local = 0, local_rank = 0;
	for (int r = 0; r < c->nranks; r++) {
		int first = 1;
		for (int q = 0; q < r; q++) if (strcmp(c->peers[q].host, c->peers[r].host) == 0) first = 0;
		nnodes += first;
		if (strcmp(c->peers[r].host, c->peers[c->rank].host) == 0) {
			if (r < c->rank) local_rank++;
			local++;
		}
	}
	if (c->rank == 0 && debug_level >= L_VERSION)
		logline(c->dev, "NCCL version %d.%d.%d+cuda13.0", version / 10000, version % 10000 / 100, version % 100);
	info(c->dev, S_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0", (void *)c, c->rank,
		c->nranks, nnodes, local, local_rank);
	const char *nvls = getenv("NCCL_NVLS_ENABLE");
	if (!nvls || strcmp(nvls, "0") != 0) {
		info(c->dev, S_INIT, "NVLS multicast support is available on dev %d (NVLS_NCHANNELS 16)", c->dev);
		if (nvls_mark[0]) {
			FILE *f = fopen(nvls_mark, "a");
			if (f) {
				fprintf(f, "%d %d %d\n", (int)getpid(), c->rank, c->dev);
				fclose(f);
			}
		}
	} else {
		info(c->dev, S_INIT, "NVLS multicast support is not available on dev %d (NVLS_NCHANNELS 0)", c->dev);
	}
	if (c->rank == 0) {
		for (int ch = 0; ch < channels; ch++) {
			char ring[4 * MAXRANKS + 1] = "";
			for (int r = 0; r < c->nranks; r++) snprintf(ring + strlen(ring), sizeof ring - strlen(ring), "%4d", r);
			info(c->dev, S_INIT, "Channel %02d/%02d : %s", ch, channels, ring);
		}
	}
	if (!runtime_connect) connect_rings(c);
	c->newconn = 0; // init's own connections are waited for by the init
	c->state = READY;
}

// progress moves a waiting communicator on once every rank has joined.
static void progress(struct ncclComm *c) {
	if (c->state != WAITING || c->hung_init || !arrived(c)) return;
	for (int a = 0; a < c->nranks; a++)
		for (int b = a + 1; b < c->nranks; b++)
			if (strcmp(c->peers[a].host, c->peers[b].host) == 0 && c->peers[a].dev == c->peers[b].dev) {
				c->state = FAILED;
				c->err = FAIL(ncclInvalidUsage, c->dev, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", a, b, c->peers[a].dev);
				return;
			}
	became_ready(c);
}

// status is the communicator's async error, spending an owed inProgress.
static ncclResult_t status(struct ncclComm *c) {
	switch (c->state) {
	case WAITING:
		return ncclInProgress;
	case FAILED:
		return c->err;
	case READY:
	case FINALIZING:
		if (c->op_hung || (c->state == FINALIZING && c->hung_finalize)) return ncclInProgress;
		if (c->polls > 0) {
			c->polls--;
			return ncclInProgress;
		}
		return ncclSuccess;
	}
	return ncclInvalidUsage;
}

// leave marks c's rank as gone; the last rank to leave removes the
// rendezvous directory.
static void leave(struct ncclComm *c) {
	c->hold = 0;
	c->op_hung = 0;
	c->state = GONE;
	char path[256];
	snprintf(path, sizeof path, "%s/left.%d", c->dir, c->rank);
	int fd = open(path, O_CREAT | O_WRONLY, 0644);
	if (fd >= 0) close(fd);
	for (int r = 0; r < c->nranks; r++) {
		snprintf(path, sizeof path, "%s/left.%d", c->dir, r);
		if (access(path, F_OK) != 0) return;
	}
	for (int r = 0; r < c->nranks; r++) {
		snprintf(path, sizeof path, "%s/left.%d", c->dir, r);
		unlink(path);
		snprintf(path, sizeof path, "%s/rank.%d", c->dir, r);
		unlink(path);
	}
	rmdir(c->dir);
}

// --- communicators ---

#ifndef OMIT_ncclCommInitRankConfig
ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank, void *config) {
	ENTER("ncclCommInitRankConfig");
	int dev = current_device();
	if (!out) RETURN(FAIL(ncclInvalidArgument, dev, "CommInitRank : comm argument is NULL"));
	*out = NULL;
	if (nranks < 1 || nranks > MAXRANKS || rank < 0 || rank >= nranks)
		RETURN(FAIL(ncclInvalidArgument, dev, "Invalid rank requested : %d/%d (the fake takes up to %d ranks)", rank, nranks, MAXRANKS));
	int blocking = 1;
	if (config) {
		config_head *h = config;
		if (h->magic != 0xcafebeef) RETURN(FAIL(ncclInvalidArgument, dev, "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER"));
		if (h->size >= sizeof *h && h->version >= 21400 && h->blocking != INT_MIN) blocking = h->blocking;
	}
	if (getenv("NCCL_COMM_BLOCKING")) blocking = env_on("NCCL_COMM_BLOCKING");
	if (memcmp(id.internal, ID_MAGIC, strlen(ID_MAGIC)) != 0 || !memchr(id.internal, 0, sizeof id.internal))
		RETURN(FAIL(ncclInvalidArgument, dev, "fake NCCL: unique id was not made by ncclGetUniqueId of this fake"));
	if (ncomms == MAXCOMMS) RETURN(FAIL(ncclSystemError, dev, "fake NCCL: more than %d communicators", MAXCOMMS));
	struct ncclComm *c = &comms[ncomms];
	memset(c, 0, sizeof *c);
	snprintf(c->dir, sizeof c->dir, "%s", id.internal + strlen(ID_MAGIC));
	c->rank = rank;
	c->nranks = nranks;
	c->dev = dev;
	c->blocking = blocking;
	c->hung_init = hanging("ncclCommInitRankConfig");
	// The rank's file is written aside and linked into place: a reader never
	// sees half of it, and a second rank of the same number fails.
	char tmp[256], path[256];
	snprintf(tmp, sizeof tmp, "%s/.rank.%d.%d", c->dir, rank, (int)getpid());
	snprintf(path, sizeof path, "%s/rank.%d", c->dir, rank);
	FILE *f = fopen(tmp, "w");
	if (!f) RETURN(FAIL(ncclSystemError, dev, "fake NCCL: joining %s: %s", c->dir, strerror(errno)));
	fprintf(f, "%d %s %d\n", (int)getpid(), hostname, dev);
	fclose(f);
	int linked = link(tmp, path);
	int link_errno = errno;
	unlink(tmp);
	if (linked != 0) {
		if (link_errno == EEXIST) RETURN(FAIL(ncclInvalidUsage, dev, "fake NCCL: rank %d of %s joined twice", rank, c->dir));
		RETURN(FAIL(ncclSystemError, dev, "fake NCCL: joining %s: %s", c->dir, strerror(link_errno)));
	}
	ncomms++;
	*out = c;
	struct group *g = grp();
	if (g->depth > 0) {
		g->inits[g->ninit++] = c;
		RETURN(ncclSuccess);
	}
	if (!blocking) RETURN(ncclInProgress);
	while (progress(c), c->state == WAITING) sleep_unlocked();
	RETURN(c->state == FAILED ? c->err : ncclSuccess);
}
#endif

#ifndef OMIT_ncclCommGetAsyncError
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
	pthread_mutex_lock(&mu);
	ncclResult_t injected = enter("ncclCommGetAsyncError");
	struct ncclComm *c = valid(comm);
	if (!c || !err) RETURN(FAIL(ncclInvalidArgument, 0, "ncclGetAsyncError : invalid comm or asyncError argument"));
	if (injected && c->state != FAILED) {
		c->state = FAILED;
		c->err = FAIL(injected, c->dev, "FAKE_NCCL_FAIL: communicator of rank %d broke with %d", c->rank, injected);
	}
	progress(c);
	*err = status(c);
	RETURN(ncclSuccess);
}
#endif

#ifndef OMIT_ncclCommAbort
ncclResult_t ncclCommAbort(ncclComm_t comm) {
	ENTER("ncclCommAbort");
	struct ncclComm *c = valid(comm);
	if (!c) RETURN(comm ? FAIL(ncclInvalidArgument, 0, "ncclCommAbort : invalid comm") : ncclSuccess);
	leave(c); // lets a hung operation's stream go
	RETURN(ncclSuccess);
}
#endif

#ifndef OMIT_ncclCommFinalize
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
	ENTER("ncclCommFinalize");
	struct ncclComm *c = valid(comm);
	if (!c) RETURN(FAIL(ncclInvalidArgument, 0, "ncclCommFinalize : invalid comm"));
	if (c->state != READY) RETURN(FAIL(ncclInvalidUsage, c->dev, "ncclCommFinalize : communicator of rank %d is not ready", c->rank));
	c->state = FINALIZING;
	c->hung_finalize = hanging("ncclCommFinalize");
	if (c->blocking) {
		while (c->op_hung || c->hung_finalize) sleep_unlocked();
		RETURN(ncclSuccess);
	}
	c->polls = connect_polls;
	RETURN(c->polls > 0 || c->op_hung || c->hung_finalize ? ncclInProgress : ncclSuccess);
}
#endif

#ifndef OMIT_ncclCommDestroy
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
	ENTER("ncclCommDestroy");
	struct ncclComm *c = valid(comm);
	if (!c) RETURN(comm ? FAIL(ncclInvalidArgument, 0, "ncclCommDestroy : invalid comm") : ncclSuccess);
	// Without a finalize NCCL waits for what the communicator has in flight.
	while (c->op_hung) sleep_unlocked();
	if (c->state != GONE) leave(c);
	RETURN(ncclSuccess);
}
#endif

// --- groups and operations ---

#ifndef OMIT_ncclGroupStart
ncclResult_t ncclGroupStart(void) {
	ENTER("ncclGroupStart");
	grp()->depth++;
	RETURN(ncclSuccess);
}
#endif

static double ring_rate(struct ncclComm *c) {
	double r = 0;
	for (int a = 0; a < c->nranks; a++) {
		double x = rate[transport(c, a, (a + 1) % c->nranks)];
		if (r == 0 || x < r) r = x;
	}
	return r;
}

// launch does what a group (or an operation outside one) holds: waits for
// blocking inits, makes connections and queues each operation's time on
// its stream. ncclInProgress when a non-blocking communicator is not done.
static ncclResult_t launch(struct group *g) {
	ncclResult_t r = ncclSuccess;
	int in_progress = 0;
	for (int i = 0; i < g->ninit; i++) {
		struct ncclComm *c = g->inits[i];
		if (c->blocking) {
			while (progress(c), c->state == WAITING) sleep_unlocked();
			if (c->state == FAILED && !r) r = c->err;
		} else {
			progress(c);
			in_progress |= c->state == WAITING;
		}
	}
	g->ninit = 0;
	for (int i = 0; i < g->nq; i++) {
		struct qop *o = &g->q[i];
		o->c->touched = 1;
		if (o->kind == Q_COLL && !o->c->rings) connect_rings(o->c);
		if (o->kind != Q_COLL) connect_peer(o->c, o->peer, o->kind == Q_SEND);
		if (o->hang) {
			o->c->op_hung = 1;
			o->c->hold = 1;
		}
	}
	for (int i = 0; i < g->nq && !r; i++) {
		struct qop *o = &g->q[i];
		if (o->kind == Q_COLL) {
			r = enqueue(o->stream, lat_ns + o->bytes * o->factor / ring_rate(o->c), o->hang ? &o->c->hold : NULL);
			continue;
		}
		// Sends and receives on one stream run at once: the first of
		// them stands for all, the rest are folded into it.
		int first = 1;
		for (int j = 0; j < i && first; j++)
			if (g->q[j].kind != Q_COLL && g->q[j].c == o->c && g->q[j].stream == o->stream) first = 0;
		if (!first) continue;
		double send = 0, recv = 0;
		int held = 0;
		for (int j = i; j < g->nq; j++) {
			struct qop *p = &g->q[j];
			if (p->kind == Q_COLL || p->c != o->c || p->stream != o->stream) continue;
			held |= p->hang;
			if (p->peer == p->c->rank) continue; // to itself: a local copy, free in the model
			double t = p->bytes / rate[transport(p->c, p->c->rank, p->peer)];
			if (p->kind == Q_SEND) send += t;
			else recv += t;
		}
		r = enqueue(o->stream, lat_ns + (send > recv ? send : recv), held ? &o->c->hold : NULL);
	}
	for (int i = 0; i < g->nq; i++) {
		struct ncclComm *c = g->q[i].c;
		if (!c->touched) continue;
		c->touched = 0;
		if (c->blocking) {
			while (c->op_hung) sleep_unlocked();
		} else if (c->op_hung) {
			in_progress = 1;
		} else if (c->newconn && connect_polls > 0) {
			c->polls = connect_polls;
			in_progress = 1;
		}
		c->newconn = 0;
	}
	g->nq = 0;
	return r ? r : in_progress ? ncclInProgress : ncclSuccess;
}

#ifndef OMIT_ncclGroupEnd
ncclResult_t ncclGroupEnd(void) {
	ENTER("ncclGroupEnd");
	struct group *g = grp();
	if (g->depth == 0) RETURN(FAIL(ncclInvalidUsage, current_device(), "ncclGroupEnd: not in a group call."));
	if (--g->depth > 0) RETURN(ncclSuccess);
	if (g->err) {
		ncclResult_t r = g->err;
		for (int i = 0; i < g->ninit; i++) {
			g->inits[i]->state = FAILED;
			g->inits[i]->err = r;
		}
		g->ninit = g->nq = g->err = 0;
		RETURN(r);
	}
	RETURN(launch(g));
}
#endif

static size_t type_size(int t) {
	static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
	return t >= 0 && t < (int)(sizeof sizes / sizeof sizes[0]) ? sizes[t] : 0;
}

// op checks and records one operation; outside a group it is launched at
// once. in and out are the bytes the send and receive buffers must hold.
static ncclResult_t op(const char *name, int kind, ncclComm_t comm, void *stream, int dtype, int redop, int peer,
		const void *sbuf, const void *rbuf, size_t count, size_t in_elems, size_t out_elems, double bytes, double factor) {
	struct ncclComm *c = valid(comm);
	if (!c) return FAIL(ncclInvalidArgument, current_device(), "%s : invalid communicator", name);
	if (c->state == FAILED) return c->err;
	if (c->state != READY || c->polls > 0 || c->op_hung)
		return FAIL(ncclInvalidUsage, c->dev, "%s : communicator of rank %d is still in progress (poll ncclCommGetAsyncError until it is not)", name, c->rank);
	if (require_blocking && !c->blocking)
		return FAIL(ncclInvalidUsage, c->dev, "%s : FAKE_NCCL_REQUIRE_BLOCKING: rank %d's communicator is non-blocking", name, c->rank);
	size_t es = type_size(dtype);
	if (!es) return FAIL(ncclInvalidArgument, c->dev, "%s : invalid type %d", name, dtype);
	if (redop > 4) return FAIL(ncclInvalidArgument, c->dev, "%s : invalid reduction operation %d", name, redop);
	if (!stream) return FAIL(ncclInvalidArgument, c->dev, "%s : the fake needs a stream of the fake libcuda", name);
	if (kind != Q_COLL && (peer < 0 || peer >= c->nranks)) return FAIL(ncclInvalidArgument, c->dev, "%s : invalid peer %d of %d ranks", name, peer, c->nranks);
	if (in_elems && !device_memory(sbuf, in_elems * es))
		return FAIL(ncclInvalidArgument, c->dev, "%s : send buffer %p of %zu bytes is not device memory of this process", name, sbuf, in_elems * es);
	if (out_elems && !device_memory(rbuf, out_elems * es))
		return FAIL(ncclInvalidArgument, c->dev, "%s : receive buffer %p of %zu bytes is not device memory of this process", name, rbuf, out_elems * es);
	struct group *g = grp();
	if (g->nq == MAXQ) return FAIL(ncclInvalidUsage, c->dev, "%s : more than %d operations in one group", name, MAXQ);
	g->q[g->nq++] = (struct qop){c, stream, kind, bytes * es, factor, peer, hanging(name)};
	return g->depth > 0 ? ncclSuccess : launch(g);
}

#ifndef OMIT_ncclAllReduce
ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, int dtype, int redop, ncclComm_t comm, void *stream) {
	ENTER("ncclAllReduce");
	struct ncclComm *c = valid(comm);
	int n = c ? c->nranks : 1;
	RETURN(op("ncclAllReduce", Q_COLL, comm, stream, dtype, redop, 0, s, r, count, count, count, (double)count, 2.0 * (n - 1) / n));
}
#endif

#ifndef OMIT_ncclAllGather
ncclResult_t ncclAllGather(const void *s, void *r, size_t count, int dtype, ncclComm_t comm, void *stream) {
	ENTER("ncclAllGather");
	struct ncclComm *c = valid(comm);
	int n = c ? c->nranks : 1;
	RETURN(op("ncclAllGather", Q_COLL, comm, stream, dtype, 0, 0, s, r, count, count, count * n, (double)count * n, (double)(n - 1) / n));
}
#endif

#ifndef OMIT_ncclReduceScatter
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, int dtype, int redop, ncclComm_t comm, void *stream) {
	ENTER("ncclReduceScatter");
	struct ncclComm *c = valid(comm);
	int n = c ? c->nranks : 1;
	RETURN(op("ncclReduceScatter", Q_COLL, comm, stream, dtype, redop, 0, s, r, count, count * n, count, (double)count * n, (double)(n - 1) / n));
}
#endif

#ifndef OMIT_ncclSend
ncclResult_t ncclSend(const void *s, size_t count, int dtype, int peer, ncclComm_t comm, void *stream) {
	ENTER("ncclSend");
	RETURN(op("ncclSend", Q_SEND, comm, stream, dtype, 0, peer, s, NULL, count, count, 0, (double)count, 1));
}
#endif

#ifndef OMIT_ncclRecv
ncclResult_t ncclRecv(void *r, size_t count, int dtype, int peer, ncclComm_t comm, void *stream) {
	ENTER("ncclRecv");
	RETURN(op("ncclRecv", Q_RECV, comm, stream, dtype, 0, peer, NULL, r, count, 0, count, (double)count, 1));
}
#endif
