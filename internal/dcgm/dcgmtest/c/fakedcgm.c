// A fake libdcgm.so.4 for tests without DCGM. It implements the entry points
// go-dcgm calls for the exporter's DCGM source, and nothing else, compiled
// against go-dcgm's own copies of dcgm_agent.h and dcgm_structs.h: a
// signature or struct that differs from what go-dcgm was built with does
// not compile. Versioned structs are checked as the real library checks
// them (DCGM_ST_VER_MISMATCH).
//
// The host engine is modelled by a control file, named by FAKE_DCGM_CONTROL
// and read again on every call, so a test changes the engine while the
// library stays loaded (key=value lines, '#' comments):
//
//   engine=up                up | down (connect and every call on a handle
//                            fail with DCGM_ST_CONNECTION_NOT_VALID) | hang
//                            (calls block until the file says otherwise)
//   generation=1             an engine restart: handles made under another
//                            generation are invalid, as a restarted
//                            nv-hostengine knows none of its old connections
//   listen=localhost:5555    the only address the engine answers at (unset: any);
//                            a path starting with '/' is a unix socket
//   gpus=2                   GPUs 0..n-1
//   uuid.N=GPU-..., busid.N=00000000:18:00.0   GPU N's identity fields
//   profiling=1              0: watching a profiling field (1001-1012) fails
//                            with DCGM_ST_PROFILING_NOT_SUPPORTED
//   value.F.N=0.5            latest value of field F on GPU N; "blank" is
//                            DCGM's blank value, "status:-3" a blank value
//                            with that status; absent: DCGM_ST_NO_DATA
//   health.N.S=R[:message]   an incident on GPU N, health system S (bit
//                            value, e.g. 1 PCIe), result R (10 warn, 20 fail);
//                            reported only while S is watched on the group
//   version=4.2.3, library_version=4.2.3
//   fail.NAME=CODE           every call of NAME returns CODE
//
// FAKE_DCGM_LOG, when set, names a file each call appends one line to:
// "name result [detail]", so a test sees exactly which calls were made.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dcgm_agent.h"
#include "dcgm_structs.h"

#define MAXGPU 32
#define MAXVALS 512
#define MAXHEALTH 64
#define MAXFAILS 16
#define MAXCONN 64
#define MAXGROUPS 256
#define MAXFIELDS 2048
#define MAXFIELDSPERGROUP 128

struct value { int field, gpu; char text[128]; };
struct incident { int gpu; unsigned system; int result; char msg[256]; };
struct failure { char name[64]; int code; };

struct control {
	char engine[16];
	int generation;
	char listen[256];
	int ngpus;
	char uuid[MAXGPU][96];
	char busid[MAXGPU][64];
	int profiling;
	char version[64], library_version[64];
	struct value values[MAXVALS];
	int nvalues;
	struct incident incidents[MAXHEALTH];
	int nincidents;
	struct failure fails[MAXFAILS];
	int nfails;
};

struct conn {
	int live, embedded, generation;
	unsigned char watched[MAXGPU][MAXFIELDS];
};

struct group {
	int live;
	dcgmHandle_t owner;
	int gpus[MAXGPU];
	int ngpus;
	unsigned health;
};

struct fieldgroup {
	int live;
	dcgmHandle_t owner;
	unsigned short fields[MAXFIELDSPERGROUP];
	int nfields;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inited;
static struct control ctl;
static struct conn conns[MAXCONN + 1]; // handle h is conns[h]; 0 is never a handle
static struct group groups[MAXGROUPS + 1];
static struct fieldgroup fieldgroups[MAXGROUPS + 1];

static void logcall(const char *name, int result, const char *fmt, ...) {
	const char *path = getenv("FAKE_DCGM_LOG");
	if (path == NULL || *path == 0)
		return;
	char detail[512] = "";
	if (fmt != NULL) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(detail, sizeof detail, fmt, ap);
		va_end(ap);
	}
	char line[700];
	int n = snprintf(line, sizeof line, "%s %d%s%s\n", name, result, *detail ? " " : "", detail);
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) < 0) {
		// nothing to do: the log is a test aid
	}
	close(fd);
}

static void defaults(struct control *c) {
	memset(c, 0, sizeof *c);
	strcpy(c->engine, "up");
	c->generation = 1;
	c->ngpus = 2;
	c->profiling = 1;
	strcpy(c->version, "4.2.3");
	for (int i = 0; i < MAXGPU; i++) {
		snprintf(c->uuid[i], sizeof c->uuid[i], "GPU-00000000-0000-0000-0000-0000000000%02d", i);
		snprintf(c->busid[i], sizeof c->busid[i], "00000000:%02X:00.0", 0x18 + i);
	}
}

static void set(struct control *c, char *key, char *val) {
	int a, b;
	char *msg;
	if (strcmp(key, "engine") == 0) {
		snprintf(c->engine, sizeof c->engine, "%s", val);
	} else if (strcmp(key, "generation") == 0) {
		c->generation = atoi(val);
	} else if (strcmp(key, "listen") == 0) {
		snprintf(c->listen, sizeof c->listen, "%s", val);
	} else if (strcmp(key, "gpus") == 0) {
		c->ngpus = atoi(val);
		if (c->ngpus < 0 || c->ngpus > MAXGPU)
			c->ngpus = 0;
	} else if (sscanf(key, "uuid.%d", &a) == 1 && a >= 0 && a < MAXGPU) {
		snprintf(c->uuid[a], sizeof c->uuid[a], "%s", val);
	} else if (sscanf(key, "busid.%d", &a) == 1 && a >= 0 && a < MAXGPU) {
		snprintf(c->busid[a], sizeof c->busid[a], "%s", val);
	} else if (strcmp(key, "profiling") == 0) {
		c->profiling = atoi(val);
	} else if (strcmp(key, "version") == 0) {
		snprintf(c->version, sizeof c->version, "%s", val);
	} else if (strcmp(key, "library_version") == 0) {
		snprintf(c->library_version, sizeof c->library_version, "%s", val);
	} else if (sscanf(key, "value.%d.%d", &a, &b) == 2 && c->nvalues < MAXVALS) {
		struct value *v = &c->values[c->nvalues++];
		v->field = a;
		v->gpu = b;
		snprintf(v->text, sizeof v->text, "%s", val);
	} else if (sscanf(key, "health.%d.%d", &a, &b) == 2 && c->nincidents < MAXHEALTH) {
		struct incident *in = &c->incidents[c->nincidents++];
		in->gpu = a;
		in->system = (unsigned)b;
		in->result = atoi(val);
		msg = strchr(val, ':');
		snprintf(in->msg, sizeof in->msg, "%s", msg ? msg + 1 : "");
	} else if (strncmp(key, "fail.", 5) == 0 && c->nfails < MAXFAILS) {
		struct failure *f = &c->fails[c->nfails++];
		snprintf(f->name, sizeof f->name, "%s", key + 5);
		f->code = atoi(val);
	}
}

// load reads the control file into ctl; mu is held.
static void load(void) {
	defaults(&ctl);
	const char *path = getenv("FAKE_DCGM_CONTROL");
	if (path == NULL || *path == 0)
		return;
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return;
	char line[1024];
	while (fgets(line, sizeof line, f) != NULL) {
		line[strcspn(line, "\r\n")] = 0;
		if (line[0] == '#' || line[0] == 0)
			continue;
		char *eq = strchr(line, '=');
		if (eq == NULL)
			continue;
		*eq = 0;
		set(&ctl, line, eq + 1);
	}
	fclose(f);
	if (ctl.library_version[0] == 0)
		snprintf(ctl.library_version, sizeof ctl.library_version, "%s", ctl.version);
}

// enter takes the lock with a fresh control file, waiting (unlocked) while
// the engine hangs. It returns the injected failure for name, or 0.
static int enter(const char *name) {
	for (;;) {
		pthread_mutex_lock(&mu);
		load();
		if (strcmp(ctl.engine, "hang") != 0)
			break;
		pthread_mutex_unlock(&mu);
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < ctl.nfails; i++)
		if (strcmp(ctl.fails[i].name, name) == 0)
			return ctl.fails[i].code;
	return 0;
}

static dcgmReturn_t leave(const char *name, dcgmReturn_t r) {
	pthread_mutex_unlock(&mu);
	logcall(name, r, NULL);
	return r;
}

// usable says whether a call may use handle h; mu is held.
static dcgmReturn_t usable(dcgmHandle_t h) {
	if (!inited)
		return DCGM_ST_UNINITIALIZED;
	if (h == 0 || h > MAXCONN || !conns[h].live)
		return DCGM_ST_BADPARAM;
	if (conns[h].embedded)
		return DCGM_ST_OK;
	if (strcmp(ctl.engine, "up") != 0 || conns[h].generation != ctl.generation)
		return DCGM_ST_CONNECTION_NOT_VALID;
	return DCGM_ST_OK;
}

static dcgmHandle_t newconn(int embedded) {
	for (dcgmHandle_t h = 1; h <= MAXCONN; h++) {
		if (!conns[h].live) {
			memset(&conns[h], 0, sizeof conns[h]);
			conns[h].live = 1;
			conns[h].embedded = embedded;
			conns[h].generation = ctl.generation;
			return h;
		}
	}
	return 0;
}

// dropconn forgets a connection and everything it made, as the host engine
// does when a connection that did not ask to persist goes away.
static void dropconn(dcgmHandle_t h) {
	conns[h].live = 0;
	for (int i = 1; i <= MAXGROUPS; i++) {
		if (groups[i].owner == h)
			groups[i].live = 0;
		if (fieldgroups[i].owner == h)
			fieldgroups[i].live = 0;
	}
}

static int isprofiling(int field) { return field >= 1001 && field <= 1012; }

static char fieldtype(int field) {
	if (field == DCGM_FI_DEV_UUID || field == DCGM_FI_DEV_PCI_BUSID)
		return DCGM_FT_STRING;
	if (field >= 1001 && field <= 1008)
		return DCGM_FT_DOUBLE;
	return DCGM_FT_INT64;
}

const char *errorString(dcgmReturn_t result) {
	switch (result) {
	case DCGM_ST_OK: return "Success";
	case DCGM_ST_BADPARAM: return "Bad parameter passed to function";
	case DCGM_ST_GENERIC_ERROR: return "Generic unspecified error";
	case DCGM_ST_NOT_SUPPORTED: return "This request is not supported by DCGM";
	case DCGM_ST_UNINITIALIZED: return "Object is in undefined state";
	case DCGM_ST_VER_MISMATCH: return "Version mismatch between received and understood API";
	case DCGM_ST_NO_DATA: return "No data is available";
	case DCGM_ST_NOT_WATCHED: return "Field is not being updated";
	case DCGM_ST_CONNECTION_NOT_VALID: return "The connection to the host engine is not valid any longer";
	case DCGM_ST_PROFILING_NOT_SUPPORTED: return "Profiling is not supported for this group of GPUs or GPU";
	case DCGM_ST_MAX_LIMIT: return "Max limit reached for the object";
	default: return "Unknown error";
	}
}

dcgmReturn_t dcgmInit(void) {
	int f = enter("dcgmInit");
	if (f)
		return leave("dcgmInit", f);
	// A second dcgmInit without dcgmShutdown is not an error (go-dcgm
	// calls it again after a failed connect).
	inited = 1;
	return leave("dcgmInit", DCGM_ST_OK);
}

dcgmReturn_t dcgmShutdown(void) {
	int f = enter("dcgmShutdown");
	if (f)
		return leave("dcgmShutdown", f);
	if (!inited)
		return leave("dcgmShutdown", DCGM_ST_OK); // as DCGM: nothing to do
	for (dcgmHandle_t h = 1; h <= MAXCONN; h++)
		if (conns[h].live)
			dropconn(h);
	inited = 0;
	return leave("dcgmShutdown", DCGM_ST_OK);
}

// sameaddress says whether a connect to addr (unix socket or not) reaches
// the engine's listen address.
static int sameaddress(const char *addr, unsigned unixsock) {
	if (ctl.listen[0] == 0)
		return 1;
	if ((ctl.listen[0] == '/') != (unixsock != 0))
		return 0;
	return strcmp(addr, ctl.listen) == 0;
}

dcgmReturn_t dcgmConnect_v2(const char *ipAddress, dcgmConnectV2Params_t *params, dcgmHandle_t *out) {
	dcgmReturn_t r = enter("dcgmConnect_v2");
	char detail[400];
	snprintf(detail, sizeof detail, "address=%s unix=%u", ipAddress ? ipAddress : "(null)",
		params ? params->addressIsUnixSocket : 0);
	if (r == 0) {
		if (!inited)
			r = DCGM_ST_UNINITIALIZED;
		else if (ipAddress == NULL || params == NULL || out == NULL)
			r = DCGM_ST_BADPARAM;
		else if (params->version != dcgmConnectV2Params_version2)
			r = DCGM_ST_VER_MISMATCH;
		else if (strcmp(ctl.engine, "up") != 0 || !sameaddress(ipAddress, params->addressIsUnixSocket))
			r = DCGM_ST_CONNECTION_NOT_VALID;
		else if ((*out = newconn(0)) == 0)
			r = DCGM_ST_MAX_LIMIT;
	}
	pthread_mutex_unlock(&mu);
	logcall("dcgmConnect_v2", r, "%s", detail);
	return r;
}

dcgmReturn_t dcgmDisconnect(dcgmHandle_t h) {
	dcgmReturn_t r = enter("dcgmDisconnect");
	// DCGM's dcgmDisconnect says OK whatever the handle, initialised or
	// not; a lost connection is dropped all the same.
	if (r == 0 && inited && h > 0 && h <= MAXCONN && conns[h].live && !conns[h].embedded)
		dropconn(h);
	return leave("dcgmDisconnect", r);
}

dcgmReturn_t dcgmStartEmbedded(dcgmOperationMode_t mode, dcgmHandle_t *out) {
	dcgmReturn_t r = enter("dcgmStartEmbedded");
	if (r == 0) {
		if (!inited)
			r = DCGM_ST_UNINITIALIZED;
		else if (out == NULL || (mode != DCGM_OPERATION_MODE_AUTO && mode != DCGM_OPERATION_MODE_MANUAL))
			r = DCGM_ST_BADPARAM;
		else if ((*out = newconn(1)) == 0)
			r = DCGM_ST_MAX_LIMIT;
	}
	return leave("dcgmStartEmbedded", r);
}

dcgmReturn_t dcgmStopEmbedded(dcgmHandle_t h) {
	dcgmReturn_t r = enter("dcgmStopEmbedded");
	if (r == 0) {
		if (!inited)
			r = DCGM_ST_UNINITIALIZED;
		else if (h == 0 || h > MAXCONN || !conns[h].live || !conns[h].embedded)
			r = DCGM_ST_BADPARAM;
		else
			dropconn(h);
	}
	return leave("dcgmStopEmbedded", r);
}

dcgmReturn_t dcgmGetAllSupportedDevices(dcgmHandle_t h, unsigned int ids[DCGM_MAX_NUM_DEVICES], int *count) {
	dcgmReturn_t r = enter("dcgmGetAllSupportedDevices");
	if (r == 0)
		r = usable(h);
	if (r == 0 && (ids == NULL || count == NULL))
		r = DCGM_ST_BADPARAM;
	if (r == 0) {
		*count = ctl.ngpus;
		for (int i = 0; i < ctl.ngpus && i < DCGM_MAX_NUM_DEVICES; i++)
			ids[i] = (unsigned)i;
	}
	return leave("dcgmGetAllSupportedDevices", r);
}

dcgmReturn_t dcgmFieldGroupCreate(dcgmHandle_t h, int n, const unsigned short *fields, const char *name,
	dcgmFieldGrp_t *out) {
	dcgmReturn_t r = enter("dcgmFieldGroupCreate");
	if (r == 0)
		r = usable(h);
	if (r == 0 && (n <= 0 || n > MAXFIELDSPERGROUP || fields == NULL || name == NULL || out == NULL))
		r = DCGM_ST_BADPARAM;
	for (int i = 0; r == 0 && i < n; i++)
		if (fields[i] >= MAXFIELDS)
			r = DCGM_ST_BADPARAM;
	if (r == 0) {
		r = DCGM_ST_MAX_LIMIT;
		for (int i = 1; i <= MAXGROUPS; i++) {
			if (!fieldgroups[i].live) {
				fieldgroups[i].live = 1;
				fieldgroups[i].owner = h;
				fieldgroups[i].nfields = n;
				memcpy(fieldgroups[i].fields, fields, (size_t)n * sizeof *fields);
				*out = (dcgmFieldGrp_t)i;
				r = DCGM_ST_OK;
				break;
			}
		}
	}
	return leave("dcgmFieldGroupCreate", r);
}

dcgmReturn_t dcgmGroupCreate(dcgmHandle_t h, dcgmGroupType_t type, const char *name, dcgmGpuGrp_t *out) {
	dcgmReturn_t r = enter("dcgmGroupCreate");
	if (r == 0)
		r = usable(h);
	if (r == 0 && (name == NULL || out == NULL || (type != DCGM_GROUP_EMPTY && type != DCGM_GROUP_DEFAULT)))
		r = DCGM_ST_BADPARAM;
	if (r == 0) {
		r = DCGM_ST_MAX_LIMIT;
		for (int i = 1; i <= MAXGROUPS; i++) {
			if (!groups[i].live) {
				memset(&groups[i], 0, sizeof groups[i]);
				groups[i].live = 1;
				groups[i].owner = h;
				if (type == DCGM_GROUP_DEFAULT)
					for (int g = 0; g < ctl.ngpus; g++)
						groups[i].gpus[groups[i].ngpus++] = g;
				*out = (dcgmGpuGrp_t)i;
				r = DCGM_ST_OK;
				break;
			}
		}
	}
	return leave("dcgmGroupCreate", r);
}

static struct group *findgroup(dcgmHandle_t h, dcgmGpuGrp_t id) {
	if (id == 0 || id > MAXGROUPS || !groups[id].live || groups[id].owner != h)
		return NULL;
	return &groups[id];
}

dcgmReturn_t dcgmGroupAddDevice(dcgmHandle_t h, dcgmGpuGrp_t id, unsigned int gpu) {
	dcgmReturn_t r = enter("dcgmGroupAddDevice");
	if (r == 0)
		r = usable(h);
	struct group *g = r == 0 ? findgroup(h, id) : NULL;
	if (r == 0 && (g == NULL || gpu >= (unsigned)ctl.ngpus || g->ngpus >= MAXGPU))
		r = DCGM_ST_BADPARAM;
	if (r == 0)
		g->gpus[g->ngpus++] = (int)gpu;
	return leave("dcgmGroupAddDevice", r);
}

dcgmReturn_t dcgmWatchFields(dcgmHandle_t h, dcgmGpuGrp_t id, dcgmFieldGrp_t fid, long long freq, double age,
	int samples) {
	dcgmReturn_t r = enter("dcgmWatchFields");
	if (r == 0)
		r = usable(h);
	struct group *g = r == 0 ? findgroup(h, id) : NULL;
	struct fieldgroup *fg = NULL;
	if (r == 0 && fid > 0 && fid <= MAXGROUPS && fieldgroups[fid].live && fieldgroups[fid].owner == h)
		fg = &fieldgroups[fid];
	if (r == 0 && (g == NULL || fg == NULL || freq <= 0 || age < 0 || samples < 0))
		r = DCGM_ST_BADPARAM;
	for (int i = 0; r == 0 && i < fg->nfields; i++)
		if (isprofiling(fg->fields[i]) && !ctl.profiling)
			r = DCGM_ST_PROFILING_NOT_SUPPORTED;
	if (r == 0)
		for (int i = 0; i < g->ngpus; i++)
			for (int f = 0; f < fg->nfields; f++)
				conns[h].watched[g->gpus[i]][fg->fields[f]] = 1;
	pthread_mutex_unlock(&mu);
	logcall("dcgmWatchFields", r, "freq_us=%lld fields=%d gpus=%d", freq, fg ? fg->nfields : 0, g ? g->ngpus : 0);
	return r;
}

dcgmReturn_t dcgmUpdateAllFields(dcgmHandle_t h, int wait) {
	dcgmReturn_t r = enter("dcgmUpdateAllFields");
	if (r == 0)
		r = usable(h);
	return leave("dcgmUpdateAllFields", r);
}

static const char *valuetext(int field, int gpu) {
	const char *t = NULL;
	for (int i = 0; i < ctl.nvalues; i++)
		if (ctl.values[i].field == field && ctl.values[i].gpu == gpu)
			t = ctl.values[i].text; // the last line wins
	if (t == NULL && gpu >= 0 && gpu < ctl.ngpus) {
		if (field == DCGM_FI_DEV_UUID)
			t = ctl.uuid[gpu];
		else if (field == DCGM_FI_DEV_PCI_BUSID)
			t = ctl.busid[gpu];
	}
	return t;
}

static void fill(dcgmFieldValue_v2 *v, dcgm_field_entity_group_t eg, unsigned gpu, unsigned short field, int watched) {
	memset(v, 0, sizeof *v);
	v->version = dcgmFieldValue_version2;
	v->entityGroupId = eg;
	v->entityId = gpu;
	v->fieldId = field;
	v->fieldType = (unsigned short)fieldtype(field);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	v->ts = (int64_t)now.tv_sec * 1000000 + now.tv_nsec / 1000;
	const char *t = NULL;
	if (eg != DCGM_FE_GPU || gpu >= (unsigned)ctl.ngpus) {
		v->status = DCGM_ST_BADPARAM;
	} else if (!watched) {
		v->status = DCGM_ST_NOT_WATCHED;
	} else if ((t = valuetext(field, (int)gpu)) == NULL) {
		v->status = DCGM_ST_NO_DATA;
	} else if (strncmp(t, "status:", 7) == 0) {
		v->status = atoi(t + 7);
	}
	int blank = t == NULL || strcmp(t, "blank") == 0 || v->status != DCGM_ST_OK;
	switch (v->fieldType) {
	case DCGM_FT_STRING:
		snprintf(v->value.str, sizeof v->value.str, "%s", blank ? DCGM_STR_BLANK : t);
		break;
	case DCGM_FT_DOUBLE:
		v->value.dbl = blank ? DCGM_FP64_BLANK : strtod(t, NULL);
		break;
	default:
		v->value.i64 = blank ? DCGM_INT64_BLANK : strtoll(t, NULL, 10);
	}
}

dcgmReturn_t dcgmEntitiesGetLatestValues(dcgmHandle_t h, dcgmGroupEntityPair_t entities[], unsigned int nent,
	unsigned short fields[], unsigned int nfields, unsigned int flags, dcgmFieldValue_v2 values[]) {
	dcgmReturn_t r = enter("dcgmEntitiesGetLatestValues");
	if (r == 0)
		r = usable(h);
	if (r == 0 && (entities == NULL || fields == NULL || values == NULL || nent == 0 || nfields == 0))
		r = DCGM_ST_BADPARAM;
	if (r == 0) {
		// Entity-major, as DCGM fills it: all fields of the first entity,
		// then of the next.
		for (unsigned e = 0; e < nent; e++) {
			unsigned gpu = entities[e].entityId;
			for (unsigned f = 0; f < nfields; f++) {
				int watched = gpu < MAXGPU && fields[f] < MAXFIELDS && conns[h].watched[gpu][fields[f]];
				fill(&values[e * nfields + f], entities[e].entityGroupId, gpu, fields[f], watched);
			}
		}
	}
	pthread_mutex_unlock(&mu);
	logcall("dcgmEntitiesGetLatestValues", r, "entities=%u fields=%u", nent, nfields);
	return r;
}

dcgmReturn_t dcgmHealthSet(dcgmHandle_t h, dcgmGpuGrp_t id, dcgmHealthSystems_t systems) {
	dcgmReturn_t r = enter("dcgmHealthSet");
	if (r == 0)
		r = usable(h);
	struct group *g = r == 0 ? findgroup(h, id) : NULL;
	if (r == 0 && g == NULL)
		r = DCGM_ST_BADPARAM;
	if (r == 0)
		g->health = (unsigned)systems;
	pthread_mutex_unlock(&mu);
	logcall("dcgmHealthSet", r, "systems=0x%x", (unsigned)systems);
	return r;
}

dcgmReturn_t dcgmHealthCheck(dcgmHandle_t h, dcgmGpuGrp_t id, dcgmHealthResponse_t *resp) {
	dcgmReturn_t r = enter("dcgmHealthCheck");
	if (r == 0)
		r = usable(h);
	struct group *g = r == 0 ? findgroup(h, id) : NULL;
	if (r == 0 && (g == NULL || resp == NULL))
		r = DCGM_ST_BADPARAM;
	if (r == 0 && resp->version != dcgmHealthResponse_version5)
		r = DCGM_ST_VER_MISMATCH;
	if (r == 0) {
		unsigned version = resp->version;
		memset(resp, 0, sizeof *resp);
		resp->version = version;
		resp->overallHealth = DCGM_HEALTH_RESULT_PASS;
		for (int i = 0; i < ctl.nincidents; i++) {
			struct incident *in = &ctl.incidents[i];
			int member = 0;
			for (int k = 0; k < g->ngpus; k++)
				member |= g->gpus[k] == in->gpu;
			if (!member || (in->system & g->health) == 0 || resp->incidentCount >= DCGM_HEALTH_WATCH_MAX_INCIDENTS_V2)
				continue;
			dcgmIncidentInfo_t *out = &resp->incidents[resp->incidentCount++];
			out->system = (dcgmHealthSystems_t)in->system;
			out->health = (dcgmHealthWatchResults_t)in->result;
			out->error.code = 1;
			snprintf(out->error.msg, sizeof out->error.msg, "%s", in->msg);
			out->entityInfo.entityGroupId = DCGM_FE_GPU;
			out->entityInfo.entityId = (dcgm_field_eid_t)in->gpu;
			if (in->result > (int)resp->overallHealth)
				resp->overallHealth = (dcgmHealthWatchResults_t)in->result;
		}
	}
	return leave("dcgmHealthCheck", r);
}

static dcgmReturn_t version(dcgmVersionInfo_t *v, const char *which) {
	if (v == NULL)
		return DCGM_ST_BADPARAM;
	if (v->version != dcgmVersionInfo_version2)
		return DCGM_ST_VER_MISMATCH;
	snprintf(v->rawBuildInfoString, sizeof v->rawBuildInfoString,
		"version:%s;arch:x86_64;buildtype:Release;buildid:1;commit:fake;branch:fake", which);
	return DCGM_ST_OK;
}

dcgmReturn_t dcgmVersionInfo(dcgmVersionInfo_t *v) {
	dcgmReturn_t r = enter("dcgmVersionInfo");
	if (r == 0)
		r = version(v, ctl.library_version);
	return leave("dcgmVersionInfo", r);
}

dcgmReturn_t dcgmHostengineVersionInfo(dcgmHandle_t h, dcgmVersionInfo_t *v) {
	dcgmReturn_t r = enter("dcgmHostengineVersionInfo");
	if (r == 0)
		r = usable(h);
	if (r == 0)
		r = version(v, ctl.version);
	return leave("dcgmHostengineVersionInfo", r);
}
