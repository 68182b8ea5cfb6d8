/*
 * libcufile.so.0 through dlopen, with the ABI of cufile_abi.h.
 *
 * The library is loaded on first need (a device request at or above
 * gds_threshold that compat_mode lets reach cuFile, gpufile_path_info, or
 * gpufile_buf_register), never for host memory and never with
 * compat_mode=on. Its driver is opened once per process, with the
 * request's CUDA context current (cuFileDriverOpen creates per-GPU state
 * and needs a context), and closed by an atexit handler: cuFile's own
 * destructors run later, from _dl_fini, and must find the driver closed.
 * A failure to load or to open is remembered, so a process without
 * cuFile pays for the attempt once.
 *
 * cufile_lock guards everything static below. Lock order: a handle's
 * lock, then cufile_lock. cuFileRead/cuFileWrite run under no lock.
 */
#define _GNU_SOURCE
#include "paths/cufile_shim.h"
#include "core/decide.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct registration {
	struct registration *next;
	char *base;
	size_t size;
};

static pthread_mutex_t cufile_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpufile__cufile table;
static const struct gpufile__cufile *_Atomic active; /* set once open */
static void *lib;
static int load_state;   /* 0 not tried, 1 loaded, -1 failed */
static int driver_state; /* 0 not tried, 1 open, -1 failed */
static int failure_err;  /* GPUFILE_ENOCUFILE or GPUFILE_ECUFILE */
static int failure_status;
static int version;
static CUfileDrvProps_t props;
static int have_props;
static int stats_level; /* applied with cuFileSetStatsLevel */
static int exit_handler;
static char library[256];
static char message[512];
static struct registration *registrations;
static unsigned char *l3_buffer; /* GPUFILE__CUFILE_L3_BUFFER bytes */
static atomic_int handles_live;  /* files registered with cuFile now */

static const struct {
	const char *symbol;
	size_t offset;
	unsigned optional; /* 0: required */
} symbols[] = {
#define SYM(field, name, opt)                                                  \
	{                                                                      \
		name, offsetof(struct gpufile__cufile, field), opt             \
	}
    SYM(cuFileDriverOpen, "cuFileDriverOpen", 0),
    SYM(cuFileHandleRegister, "cuFileHandleRegister", 0),
    SYM(cuFileHandleDeregister, "cuFileHandleDeregister", 0),
    SYM(cuFileRead, "cuFileRead", 0),
    SYM(cuFileWrite, "cuFileWrite", 0),
    SYM(cuFileBufRegister, "cuFileBufRegister", 0),
    SYM(cuFileBufDeregister, "cuFileBufDeregister", 0),
    SYM(cuFileDriverGetProperties, "cuFileDriverGetProperties",
        GPUFILE__CUFILE_HAS_PROPS),
    SYM(cuFileGetVersion, "cuFileGetVersion", GPUFILE__CUFILE_HAS_VERSION),
    SYM(cuFileSetStatsLevel, "cuFileSetStatsLevel", GPUFILE__CUFILE_HAS_STATS),
    SYM(cuFileGetStatsL3, "cuFileGetStatsL3", GPUFILE__CUFILE_HAS_STATS),
#undef SYM
};

const char *gpufile__cufile_status_name(int status)
{
	switch (status) {
#define GPUFILE__CUFILE_CASE(name, value)                                      \
	case value:                                                            \
		return #name;
		GPUFILE__CUFILE_STATUS(GPUFILE__CUFILE_CASE)
#undef GPUFILE__CUFILE_CASE
	default:
		return "CU_FILE_UNKNOWN_STATUS";
	}
}

const char *gpufile_cufile_status_name(int status)
{
	return gpufile__cufile_status_name(status);
}

/* "NAME (code)", plus the CUDA error for CU_FILE_CUDA_DRIVER_ERROR. */
static void describe(CUfileError_t e, char *out, size_t len)
{
	if (e.err == CU_FILE_CUDA_DRIVER_ERROR)
		snprintf(out, len, "%s (%d), CUDA error %d",
		         gpufile__cufile_status_name(e.err), (int)e.err,
		         (int)e.cu_err);
	else
		snprintf(out, len, "%s (%d)",
		         gpufile__cufile_status_name(e.err), (int)e.err);
}

/* Caller holds cufile_lock. Records why cuFile cannot be used (message
 * already written), closes the library if open. Returns -1. */
static int load_failed(int err)
{
	failure_err = err;
	load_state = -1;
	if (lib)
		dlclose(lib);
	lib = NULL;
	return -1;
}

/* Caller holds cufile_lock. Fills the table's entries of symbols[]; a
 * required one missing is a failure. Returns 0 or -1. */
static int resolve_listed(void)
{
	memset(&table, 0, sizeof(table));
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *fn = dlsym(lib, symbols[i].symbol);

		if (!fn && !symbols[i].optional) {
			snprintf(message, sizeof(message),
			         "%.200s lacks %s: not a usable cuFile library",
			         library, symbols[i].symbol);
			return load_failed(GPUFILE_ENOCUFILE);
		}
		memcpy((char *)&table + symbols[i].offset, &fn, sizeof(fn));
	}
	return 0;
}

/* Caller holds cufile_lock. The optional groups, each used whole or not
 * at all: properties, version, stats (both calls), stream (read and
 * write), batch (all five). */
static void resolve_optional(void)
{
	if (table.cuFileDriverGetProperties)
		table.optional |= GPUFILE__CUFILE_HAS_PROPS;
	if (table.cuFileGetVersion)
		table.optional |= GPUFILE__CUFILE_HAS_VERSION;
	if (table.cuFileSetStatsLevel && table.cuFileGetStatsL3)
		table.optional |= GPUFILE__CUFILE_HAS_STATS;
	else
		table.cuFileGetStatsL3 = NULL;
	table.cuFileReadAsync =
	    (cuFileReadAsync_fn)(uintptr_t)dlsym(lib, "cuFileReadAsync");
	table.cuFileWriteAsync =
	    (cuFileWriteAsync_fn)(uintptr_t)dlsym(lib, "cuFileWriteAsync");
	if (table.cuFileReadAsync && table.cuFileWriteAsync)
		table.optional |= GPUFILE__CUFILE_HAS_STREAM;
	else
		table.cuFileReadAsync = NULL, table.cuFileWriteAsync = NULL;
	table.cuFileBatchIOSetUp =
	    (cuFileBatchIOSetUp_fn)dlsym(lib, "cuFileBatchIOSetUp");
	table.cuFileBatchIOSubmit =
	    (cuFileBatchIOSubmit_fn)dlsym(lib, "cuFileBatchIOSubmit");
	table.cuFileBatchIOGetStatus =
	    (cuFileBatchIOGetStatus_fn)dlsym(lib, "cuFileBatchIOGetStatus");
	table.cuFileBatchIOCancel =
	    (cuFileBatchIOCancel_fn)dlsym(lib, "cuFileBatchIOCancel");
	table.cuFileBatchIODestroy =
	    (cuFileBatchIODestroy_fn)dlsym(lib, "cuFileBatchIODestroy");
	if (table.cuFileBatchIOSetUp && table.cuFileBatchIOSubmit &&
	    table.cuFileBatchIOGetStatus && table.cuFileBatchIOCancel &&
	    table.cuFileBatchIODestroy)
		table.optional |= GPUFILE__CUFILE_HAS_BATCH;
}

/* Caller holds cufile_lock. cuFileDriverClose_v2 (1.10+) is the one to
 * call at exit; the old one stays for older libraries. Returns 0 or -1. */
static int resolve_close(void)
{
	void *fn = dlsym(lib, "cuFileDriverClose_v2");

	if (fn)
		table.optional |= GPUFILE__CUFILE_HAS_CLOSE_V2;
	else
		fn = dlsym(lib, "cuFileDriverClose");
	if (!fn) {
		snprintf(message, sizeof(message),
		         "%.200s lacks cuFileDriverClose: not a usable cuFile "
		         "library",
		         library);
		return load_failed(GPUFILE_ENOCUFILE);
	}
	memcpy(&table.cuFileDriverClose, &fn, sizeof(fn));
	return 0;
}

/* Caller holds cufile_lock. */
static int load_locked(void)
{
	if (load_state)
		return load_state > 0 ? 0 : -1;
	if (gpufile__config_string("cufile_library", library,
	                           sizeof(library))) {
		snprintf(message, sizeof(message), "%s", gpufile_errmsg());
		return load_failed(GPUFILE_ECONFIG);
	}
	lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(message, sizeof(message),
		         "cannot load the cuFile library %.200s (%.250s)",
		         library, dlerror());
		return load_failed(GPUFILE_ENOCUFILE);
	}
	if (resolve_listed() || resolve_close())
		return -1;
	resolve_optional();
	version = 0;
	if (table.cuFileGetVersion) {
		int v = 0;
		if (table.cuFileGetVersion(&v).err == CU_FILE_SUCCESS)
			version = v;
	}
	load_state = 1;
	return 0;
}

/* Caller holds cufile_lock. Applies the cufile_stats setting. */
static void apply_stats_level(unsigned level)
{
	if (!table.cuFileGetStatsL3 || (int)level == stats_level)
		return;
	if (table.cuFileSetStatsLevel((int)level).err == CU_FILE_SUCCESS)
		stats_level = (int)level;
}

/* profile.cufile_stats of the cufile.json cuFile reads
 * (CUFILE_ENV_PATH_JSON, else /etc/cufile.json), or -1 when absent or
 * unreadable. A scan for the key outside comments and strings, not a
 * parse: cufile_json.c judges the file; this only asks one number. */
static int json_stats_level(void)
{
	const char *path = gpufile__path_getenv("CUFILE_ENV_PATH_JSON");
	char text[65536];
	ssize_t n;
	int fd, level = -1;

	if (!path || !*path)
		path = "/etc/cufile.json";
	/* O_NONBLOCK: a FIFO named there must not hang the first read. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -1;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	text[n] = '\0';
	for (const char *p = text; *p; p++) {
		if (p[0] == '/' && p[1] == '/') {
			p += strcspn(p, "\n");
			if (!*p)
				break;
		} else if (p[0] == '/' && p[1] == '*') {
			const char *e = strstr(p + 2, "*/");
			if (!e)
				break;
			p = e + 1;
		} else if (*p == '"') {
			/* It ends at the first quote no backslash escapes. */
			const char *e = p + 1;
			while (*e && *e != '"')
				e += e[0] == '\\' && e[1] ? 2 : 1;
			if (!*e)
				break;
			if (e - p == 13 &&
			    strncmp(p, "\"cufile_stats\"", 14) == 0) {
				const char *v =
				    e + 1 + strspn(e + 1, " \t\r\n");
				if (*v == ':')
					level = (int)strtol(v + 1, NULL, 10);
			}
			p = e;
		}
	}
	return level >= 0 && level <= 3 ? level : -1;
}

/* The level to ask cuFile for, or -1 to leave cuFile's own. The user's
 * choice wins: the cufile_stats setting (GPUFILE_CUFILE_STATS or a
 * setter), then CUFILE_STATS_LEVEL (the setting's default), then a
 * nonzero profile.cufile_stats of cufile.json. Otherwise level 3, so that
 * cuFile's per-GPU nvfs/posix counts (the second layer) are there
 * without preparation. NVIDIA's shipped cufile.json says
 * "cufile_stats": 0, so 0 there is not taken as a choice; set
 * GPUFILE_CUFILE_STATS=0 (or CUFILE_STATS_LEVEL=0) to turn counting
 * off. */
static int wanted_stats_level(const struct gpufile__settings *cfg)
{
	char value[32], var[64];
	gpufile_source_t src = GPUFILE_SOURCE_DEFAULT;
	const char *env = getenv("CUFILE_STATS_LEVEL");
	int json;

	if (gpufile_config_get("cufile_stats", value, sizeof(value), &src, var,
	                       sizeof(var)) == 0 &&
	    src != GPUFILE_SOURCE_DEFAULT)
		return (int)cfg->cufile_stats;
	if (env && *env)
		return (int)cfg->cufile_stats; /* the default follows it */
	json = json_stats_level();
	if (json > 0) {
		stats_level = json; /* cuFile applies it itself */
		return -1;
	}
	return (int)cfg->cufile_stats;
}

static void close_at_exit(void)
{
	pthread_mutex_lock(&cufile_lock);
	if (driver_state == 1) {
		while (registrations) {
			struct registration *g = registrations;
			registrations = g->next;
			table.cuFileBufDeregister(g->base);
			free(g);
		}
		table.cuFileDriverClose();
		driver_state = 0;
		atomic_store(&active, NULL);
	}
	pthread_mutex_unlock(&cufile_lock);
}

/* Makes ctx current in this thread; *old receives the previous one. */
static void push_context(void *ctx, CUcontext *old)
{
	const struct gpufile__cuda *cu = gpufile__cuda_if_loaded();

	*old = NULL;
	if (!cu || !ctx)
		return;
	cu->cuCtxGetCurrent(old);
	if (*old != (CUcontext)ctx)
		cu->cuCtxSetCurrent((CUcontext)ctx);
}

static void pop_context(void *ctx, CUcontext old)
{
	const struct gpufile__cuda *cu = gpufile__cuda_if_loaded();

	if (cu && ctx && old != (CUcontext)ctx)
		gpufile__ctx_restore(cu, old);
}

const struct gpufile__cufile *gpufile__cufile_open(void *ctx, int *err,
                                                   int *status)
{
	struct gpufile__settings cfg;
	const struct gpufile__cufile *t = NULL;
	CUcontext old;
	CUfileError_t e;
	char what[96];
	int level;

	*err = 0;
	*status = 0;
	if (gpufile__settings(&cfg)) {
		*err = GPUFILE_ECONFIG;
		return NULL;
	}
	pthread_mutex_lock(&cufile_lock);
	if (load_locked() == 0 && driver_state == 0) {
		push_context(ctx, &old);
		/* cuFile 1.15 fills the per-GPU counters of level 3 only when
		 * the level was set before the driver opened (seen on an H200:
		 * set afterwards, num_gpus stays 0 while read_ops counts). */
		level = wanted_stats_level(&cfg);
		if (level >= 0)
			apply_stats_level((unsigned)level);
		e = table.cuFileDriverOpen();
		if (e.err == CU_FILE_SUCCESS) {
			driver_state = 1;
			have_props =
			    table.cuFileDriverGetProperties &&
			    table.cuFileDriverGetProperties(&props).err ==
			        CU_FILE_SUCCESS;
			if (!exit_handler && atexit(close_at_exit) == 0)
				exit_handler = 1;
		} else {
			describe(e, what, sizeof(what));
			snprintf(message, sizeof(message),
			         "cuFileDriverOpen failed: %s", what);
			driver_state = -1;
			failure_err = GPUFILE_ECUFILE;
			failure_status = (int)e.err;
		}
		pop_context(ctx, old);
	}
	if (driver_state == 1) {
		level = wanted_stats_level(&cfg);
		if (level >= 0)
			apply_stats_level((unsigned)level);
		t = &table;
		atomic_store(&active, t);
	} else {
		*err = failure_err;
		*status = failure_status;
		gpufile__fail_msg(failure_err, message);
	}
	pthread_mutex_unlock(&cufile_lock);
	return t;
}

int gpufile__cufile_load(void)
{
	int rc = 0;

	pthread_mutex_lock(&cufile_lock);
	if (load_locked())
		rc = gpufile__fail_msg(failure_err, message);
	pthread_mutex_unlock(&cufile_lock);
	return rc;
}

int gpufile__cufile_p2pdma(void)
{
	int p2p;

	pthread_mutex_lock(&cufile_lock);
	p2p = have_props && (props.fflags & (1u << CU_FILE_P2P_SUPPORTED));
	pthread_mutex_unlock(&cufile_lock);
	return p2p;
}

int gpufile__cufile_handle_register(void *ctx, int fd, CUfileHandle_t *fh,
                                    int *status)
{
	const struct gpufile__cufile *t = atomic_load(&active);
	CUfileDescr_t descr;
	CUfileError_t e;
	CUcontext old;

	*status = 0;
	*fh = NULL;
	if (!t)
		return GPUFILE_ENOCUFILE;
	memset(&descr, 0, sizeof(descr));
	descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	descr.handle.fd = fd;
	push_context(ctx, &old);
	e = t->cuFileHandleRegister(fh, &descr);
	pop_context(ctx, old);
	if (e.err != CU_FILE_SUCCESS) {
		*status = (int)e.err;
		*fh = NULL;
		return GPUFILE_ECUFILE;
	}
	atomic_fetch_add(&handles_live,
	                 1); /* see gpufile_cufile_driver_close */
	return 0;
}

void gpufile__cufile_handle_deregister(CUfileHandle_t fh)
{
	const struct gpufile__cufile *t = atomic_load(&active);

	if (t && fh) {
		t->cuFileHandleDeregister(fh);
		atomic_fetch_sub(&handles_live, 1);
	}
}

char *gpufile__cufile_buf_base(const void *buf, size_t size)
{
	const char *p = buf;
	char *base = NULL;

	pthread_mutex_lock(&cufile_lock);
	for (struct registration *g = registrations; g; g = g->next) {
		if (p >= g->base && size <= g->size &&
		    (size_t)(p - g->base) <= g->size - size) {
			base = g->base;
			break;
		}
	}
	pthread_mutex_unlock(&cufile_lock);
	return base;
}

/* cuFileRead/Write return -1 with errno set for file system errors, and
 * -(CUfileOpError) for cuFile's own (some versions return -errno
 * directly). Maps n < 0 to gpufile's code and a message. */
static ssize_t io_error(ssize_t n, int saved_errno, struct gpufile__request *r,
                        size_t len, int64_t off, char *msg, size_t msg_len)
{
	const char *op = r->is_write ? "cuFileWrite" : "cuFileRead";
	int err;

	if (n == -1 || (n < 0 && -n < 4096)) {
		err = (int)gpufile__cufile_io_error(n, saved_errno);
		snprintf(msg, msg_len,
		         "%s of %zu bytes of %s at offset %lld: %s", op, len,
		         r->h->path, (long long)off, strerror(-err));
		return err;
	}
	snprintf(msg, msg_len,
	         "%s of %zu bytes of %s at offset %lld: %s (%lld)", op, len,
	         r->h->path, (long long)off,
	         gpufile__cufile_status_name((int)-n), (long long)-n);
	return GPUFILE_ECUFILE;
}

ssize_t gpufile__cufile_task(struct gpufile__request *r, char *buf, size_t len,
                             int64_t off, char *msg, size_t msg_len)
{
	const struct gpufile__cufile *t = atomic_load(&active);
	const struct gpufile__cuda *cu = gpufile__cuda_if_loaded();
	const off_t buf_off = (off_t)(buf - r->cufile_base);
	size_t done = 0;
	int again = 0;

	if (!t) {
		snprintf(msg, msg_len, "cuFile driver closed during a request");
		return GPUFILE_ENOCUFILE;
	}
	/* cuFile maps device memory in the current context: on a worker
	 * thread that is whatever the previous task left, so set it. */
	if (cu && r->cuda_ctx)
		cu->cuCtxSetCurrent((CUcontext)r->cuda_ctx);
	while (done < len) {
		ssize_t n;

		errno = 0;
		if (r->is_write)
			n = t->cuFileWrite(r->cufile_handle, r->cufile_base,
			                   len - done,
			                   (off_t)(off + (int64_t)done),
			                   buf_off + (off_t)done);
		else
			n = t->cuFileRead(r->cufile_handle, r->cufile_base,
			                  len - done,
			                  (off_t)(off + (int64_t)done),
			                  buf_off + (off_t)done);
		if (n < 0) {
			const int e = n == -1 ? errno : (int)-n;
			/* Transient, as for pread (posix_io.c): retry. */
			if (e == EINTR || (e == EAGAIN && again++ < 1000))
				continue;
			return io_error(n, errno, r, len - done,
			                off + (int64_t)done, msg, msg_len);
		}
		if (n == 0)
			break; /* end of file */
		done += (size_t)n;
	}
	if (r->is_write && done < len) {
		snprintf(msg, msg_len,
		         "cuFileWrite to %s at offset %lld wrote "
		         "nothing",
		         r->h->path, (long long)(off + (int64_t)done));
		return -EIO;
	}
	return (ssize_t)done;
}

/* Caller holds cufile_lock. Reads cuFile's per-GPU counters into out;
 * returns how many GPUs, or -1 when they cannot be read. */
static int read_per_gpu(gpufile_cufile_gpu_t *out, int *verified)
{
	size_t l1 = GPUFILE__CUFILE_L1_SIZE_1_15;
	uint32_t n;

	*verified = version >= 1140 && version < 1160;
	if (version >= 1160)
		l1 = GPUFILE__CUFILE_L1_SIZE_READV;
	if (driver_state != 1 || !table.cuFileGetStatsL3 || stats_level < 3)
		return -1;
	if (!l3_buffer)
		l3_buffer = malloc(GPUFILE__CUFILE_L3_BUFFER);
	if (!l3_buffer)
		return -1;
	memset(l3_buffer, 0, GPUFILE__CUFILE_L3_BUFFER);
	if (table.cuFileGetStatsL3(l3_buffer).err != CU_FILE_SUCCESS)
		return -1;
	memcpy(&n, l3_buffer + GPUFILE__CUFILE_L3_NUM_GPUS(l1), sizeof(n));
	if (n > GPUFILE__CUFILE_MAX_GPUS)
		return -1; /* not the layout we think it is */
	for (uint32_t i = 0; i < n; i++) {
		CUfilePerGpuStats_t g;

		memcpy(&g,
		       l3_buffer + GPUFILE__CUFILE_L3_PER_GPU(l1) +
		           i * sizeof(g),
		       sizeof(g));
		out[i].gpu = (int)i;
		out[i].nvfs_reads = g.n_nvfs_reads;
		out[i].posix_reads = g.n_posix_reads;
		out[i].p2p_reads = g.n_p2p_reads;
		out[i].unaligned_reads = g.n_unaligned_reads;
		out[i].nvfs_writes = g.n_nvfs_writes;
		out[i].posix_writes = g.n_posix_writes;
		out[i].p2p_writes = g.n_p2p_writes;
		out[i].unaligned_writes = g.n_unaligned_writes;
	}
	return (int)n;
}

void gpufile__cufile_publish_stats(void)
{
	gpufile_cufile_gpu_t counts[GPUFILE__CUFILE_MAX_GPUS];
	int verified, n;

	pthread_mutex_lock(&cufile_lock);
	n = read_per_gpu(counts, &verified);
	pthread_mutex_unlock(&cufile_lock);
	if (n >= 0)
		gpufile__stats_cufile(counts, n);
}

int gpufile_cufile_info(gpufile_cufile_info_t *caller_out)
{
	gpufile_cufile_gpu_t counts[GPUFILE__CUFILE_MAX_GPUS];
	gpufile_cufile_info_t local, *out = &local;
	int n, rc;

	if (!caller_out)
		return gpufile__fail(-EINVAL,
		                     "gpufile_cufile_info: out is NULL");
	rc = GPUFILE__SIZED_CHECK(caller_out, gpufile_cufile_info_t);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	out->nvfs_loaded = access("/proc/driver/nvidia-fs", F_OK) == 0;
	pthread_mutex_lock(&cufile_lock);
	out->loaded = load_state > 0;
	out->driver_open = driver_state > 0;
	out->status = driver_state < 0 ? failure_status : 0;
	out->version = version;
	out->optional = load_state > 0 ? table.optional : 0;
	out->p2pdma =
	    have_props && (props.fflags & (1u << CU_FILE_P2P_SUPPORTED)) != 0;
	out->stats_level = stats_level;
	snprintf(out->library, sizeof(out->library), "%s", library);
	if (load_state < 0 || driver_state < 0)
		snprintf(out->message, sizeof(out->message), "%.255s", message);
	n = read_per_gpu(counts, &out->stats_layout_verified);
	pthread_mutex_unlock(&cufile_lock);
	for (int i = 0; i < n && i < GPUFILE_MAX_GPUS; i++) {
		out->gpu[i] = counts[i];
		out->ngpus = i + 1;
	}
	gpufile__sized_put(caller_out, out, sizeof(*out));
	return 0;
}

int gpufile_buf_register(const void *buf, size_t size, int flags)
{
	struct gpufile__settings cfg;
	struct gpufile__facts f = {0};
	struct gpufile__decision d;
	const struct gpufile__cufile *t;
	struct registration *g;
	gpufile_mem_t kind;
	int device, err, status, rc;
	void *ctx;
	char why[160];
	CUcontext old;
	CUfileError_t e;

	if (!buf || !size)
		return gpufile__fail(-EINVAL, "gpufile_buf_register: %s",
		                     buf ? "size is 0" : "buffer is NULL");
	rc = gpufile__settings(&cfg);
	if (rc)
		return rc;
	rc = gpufile__classify(buf, &kind, &device, &ctx);
	if (rc)
		return rc;
	/* Registered only where a request of gds_threshold bytes into buf
	 * could be handed to cuFile (decide.c): cheap facts first, cuFile
	 * loaded only when they leave it possible. No file is known here,
	 * so P2PDMA is cuFile's own answer. */
	f.cfg = &cfg;
	f.kind = kind;
	f.size = cfg.gds_threshold;
	if (kind == GPUFILE_MEM_DEVICE && cfg.compat_mode != GPUFILE_COMPAT_ON)
		gpufile__platform_facts(&f, NULL);
	gpufile__decide(&f, &d);
	if (!d.need_cufile)
		return 0; /* requests into buf never reach cuFile */
	t = gpufile__cufile_open(ctx, &err, &status);
	if (!t) {
		if (cfg.compat_mode == GPUFILE_COMPAT_OFF)
			return gpufile__fail(err,
			                     "registering %p with cuFile "
			                     "(compat_mode=off): %s",
			                     buf, gpufile_errmsg());
		gpufile__clear_error();
		return 0;
	}
	f.cufile_known = f.cufile_registered = 1;
	f.cufile_p2pdma = gpufile__cufile_p2pdma();
	gpufile__decide(&f, &d);
	if (d.path != GPUFILE_PATH_CUFILE)
		return 0;
	g = malloc(sizeof(*g));
	if (!g)
		return gpufile__fail(-ENOMEM, "out of memory");
	push_context(ctx, &old);
	e = t->cuFileBufRegister(buf, size, flags);
	pop_context(ctx, old);
	if (e.err != CU_FILE_SUCCESS) {
		describe(e, why, sizeof(why));
		free(g);
		return gpufile__fail(GPUFILE_ECUFILE,
		                     "cuFileBufRegister(%p, %zu bytes): %s",
		                     buf, size, why);
	}
	g->base = (char *)buf;
	g->size = size;
	pthread_mutex_lock(&cufile_lock);
	g->next = registrations;
	registrations = g;
	pthread_mutex_unlock(&cufile_lock);
	return 0;
}

int gpufile_buf_deregister(const void *buf)
{
	struct registration **pp, *g = NULL;
	const struct gpufile__cufile *t = atomic_load(&active);
	gpufile_mem_t kind;
	int device;
	void *ctx = NULL;
	char why[160];
	CUcontext old;
	CUfileError_t e;

	pthread_mutex_lock(&cufile_lock);
	for (pp = &registrations; *pp; pp = &(*pp)->next) {
		if ((*pp)->base == (const char *)buf) {
			g = *pp;
			*pp = g->next;
			break;
		}
	}
	pthread_mutex_unlock(&cufile_lock);
	if (!g || !t) {
		free(g);
		return 0;
	}
	free(g);
	if (gpufile__classify(buf, &kind, &device, &ctx))
		ctx = NULL;
	push_context(ctx, &old);
	e = t->cuFileBufDeregister(buf);
	pop_context(ctx, old);
	if (e.err != CU_FILE_SUCCESS) {
		describe(e, why, sizeof(why));
		return gpufile__fail(GPUFILE_ECUFILE,
		                     "cuFileBufDeregister(%p): %s", buf, why);
	}
	return 0;
}

void gpufile__cufile_reset(void)
{
	close_at_exit();
	pthread_mutex_lock(&cufile_lock);
	if (lib)
		dlclose(lib);
	lib = NULL;
	load_state = 0;
	driver_state = 0;
	failure_err = 0;
	failure_status = 0;
	version = 0;
	have_props = 0;
	stats_level = 0;
	library[0] = '\0';
	message[0] = '\0';
	memset(&table, 0, sizeof(table));
	atomic_store(&active, NULL);
	pthread_mutex_unlock(&cufile_lock);
}

/* ---- explicit driver control and properties (gpufile_cufile_driver_*) ----
 *
 * The driver opens on first need as above; these let a program open it
 * early, close it, and read or tune its properties the way KvikIO's
 * cufile_driver module does. Property sizes are in KiB, as cuFile's. */

enum {
	PROP_MAJOR,
	PROP_MINOR,
	PROP_GDS,
	PROP_P2PDMA,
	PROP_COMPAT,
	PROP_POLL_MODE,
	PROP_POLL_THRESH,
	PROP_MAX_DIRECT_IO,
	PROP_MAX_CACHE,
	PROP_PER_BUFFER_CACHE,
	PROP_MAX_PINNED,
	PROP_MAX_BATCH_IO,
	PROP_BATCH_TIMEOUT,
	PROP_STATUS_FLAGS,
	PROP_FEATURE_FLAGS,
	NPROPS
};

static const struct {
	const char *name;
	const char *setter; /* cuFile entry point, or NULL: read-only */
} driver_props[NPROPS] = {
    [PROP_MAJOR] = {"major_version", NULL},
    [PROP_MINOR] = {"minor_version", NULL},
    [PROP_GDS] = {"is_gds_available", NULL},
    [PROP_P2PDMA] = {"p2pdma", NULL},
    [PROP_COMPAT] = {"allow_compat_mode", NULL},
    [PROP_POLL_MODE] = {"poll_mode", "cuFileDriverSetPollMode"},
    [PROP_POLL_THRESH] = {"poll_thresh_size", "cuFileDriverSetPollMode"},
    [PROP_MAX_DIRECT_IO] = {"max_direct_io_size",
                            "cuFileDriverSetMaxDirectIOSize"},
    [PROP_MAX_CACHE] = {"max_device_cache_size", "cuFileDriverSetMaxCacheSize"},
    [PROP_PER_BUFFER_CACHE] = {"per_buffer_cache_size", NULL},
    [PROP_MAX_PINNED] = {"max_pinned_memory_size",
                         "cuFileDriverSetMaxPinnedMemSize"},
    [PROP_MAX_BATCH_IO] = {"max_batch_io_size", NULL},
    [PROP_BATCH_TIMEOUT] = {"max_batch_io_timeout_msecs", NULL},
    [PROP_STATUS_FLAGS] = {"status_flags", NULL},
    [PROP_FEATURE_FLAGS] = {"feature_flags", NULL},
};

static uint64_t prop_value(const CUfileDrvProps_t *p, int i)
{
	switch (i) {
	case PROP_MAJOR:
		return p->nvfs.major_version;
	case PROP_MINOR:
		return p->nvfs.minor_version;
	case PROP_GDS:
		/* nvidia-fs reports its version only when it is loaded. */
		return p->nvfs.major_version || p->nvfs.minor_version;
	case PROP_P2PDMA:
		return !!(p->fflags & (1u << CU_FILE_P2P_SUPPORTED));
	case PROP_COMPAT:
		return !!(p->nvfs.dcontrolflags &
		          (1u << CU_FILE_ALLOW_COMPAT_MODE));
	case PROP_POLL_MODE:
		return !!(p->nvfs.dcontrolflags &
		          (1u << CU_FILE_USE_POLL_MODE));
	case PROP_POLL_THRESH:
		return p->nvfs.poll_thresh_size;
	case PROP_MAX_DIRECT_IO:
		return p->nvfs.max_direct_io_size;
	case PROP_MAX_CACHE:
		return p->max_device_cache_size;
	case PROP_PER_BUFFER_CACHE:
		return p->per_buffer_cache_size;
	case PROP_MAX_PINNED:
		return p->max_device_pinned_mem_size;
	case PROP_MAX_BATCH_IO:
		return p->max_batch_io_size;
	case PROP_BATCH_TIMEOUT:
		return p->max_batch_io_timeout_msecs;
	case PROP_STATUS_FLAGS:
		return p->nvfs.dstatusflags;
	default:
		return p->fflags;
	}
}

static int find_prop(const char *name)
{
	for (int i = 0; name && i < NPROPS; i++)
		if (strcmp(name, driver_props[i].name) == 0)
			return i;
	return gpufile__fail(-ENOENT,
	                     "\"%s\" is not a cuFile driver property "
	                     "(gpufile_cufile_driver_prop_name lists them)",
	                     name ? name : "(null)");
}

const char *gpufile_cufile_driver_prop_name(int index, int *writable)
{
	if (index < 0 || index >= NPROPS)
		return NULL;
	if (writable)
		*writable = driver_props[index].setter != NULL;
	return driver_props[index].name;
}

int gpufile_cufile_driver_open(void)
{
	const struct gpufile__cuda *cu = gpufile__cuda_if_loaded();
	CUcontext ctx = NULL;
	int err, status;

	/* cuFileDriverOpen sets up per-GPU state in the current context:
	 * the caller's, else device 0's primary one. */
	if (!cu && gpufile_cuda_device_count() > 0)
		cu = gpufile__cuda_if_loaded();
	if (cu && gpufile__current_or_primary((void **)&ctx))
		ctx = NULL;
	gpufile__clear_error();
	if (!gpufile__cufile_open(ctx, &err, &status))
		return err; /* the message names the library or the status */
	return 0;
}

int gpufile_cufile_driver_close(void)
{
	int nregs = 0, nhandles;
	CUfileError_t e;
	char what[96];

	pthread_mutex_lock(&cufile_lock);
	if (driver_state != 1) {
		pthread_mutex_unlock(&cufile_lock);
		return 0;
	}
	for (struct registration *g = registrations; g; g = g->next)
		nregs++;
	nhandles = atomic_load(&handles_live);
	if (nhandles || nregs) {
		pthread_mutex_unlock(&cufile_lock);
		return gpufile__fail(
		    -EBUSY,
		    "cannot close the cuFile driver: %d file handle(s) and %d "
		    "buffer(s) are registered with it (close those files and "
		    "call gpufile_buf_deregister first)",
		    nhandles, nregs);
	}
	e = table.cuFileDriverClose();
	driver_state = 0;
	have_props = 0;
	atomic_store(&active, NULL);
	pthread_mutex_unlock(&cufile_lock);
	if (e.err != CU_FILE_SUCCESS) {
		describe(e, what, sizeof(what));
		return gpufile__fail(GPUFILE_ECUFILE,
		                     "cuFileDriverClose failed: %s", what);
	}
	return 0;
}

/* Caller holds cufile_lock, driver open. Reads the properties into props
 * (which gpufile__cufile_accelerated also reads). */
static int read_props_locked(void)
{
	CUfileError_t e;
	char what[96];

	if (!table.cuFileDriverGetProperties)
		return gpufile__fail(
		    -ENOTSUP, "%s lacks cuFileDriverGetProperties", library);
	e = table.cuFileDriverGetProperties(&props);
	if (e.err != CU_FILE_SUCCESS) {
		describe(e, what, sizeof(what));
		return gpufile__fail(GPUFILE_ECUFILE,
		                     "cuFileDriverGetProperties failed: %s",
		                     what);
	}
	have_props = 1;
	return 0;
}

int gpufile_cufile_driver_get(const char *name, uint64_t *value)
{
	int i = find_prop(name), rc;

	if (i < 0)
		return i;
	if (!value)
		return gpufile__fail(
		    -EINVAL, "gpufile_cufile_driver_get: value is NULL");
	rc = gpufile_cufile_driver_open();
	if (rc)
		return rc;
	pthread_mutex_lock(&cufile_lock);
	rc = driver_state == 1 ? read_props_locked()
	                       : gpufile__fail(GPUFILE_ECUFILE,
	                                       "the cuFile driver was closed");
	if (rc == 0)
		*value = prop_value(&props, i);
	pthread_mutex_unlock(&cufile_lock);
	return rc;
}

/* Caller holds cufile_lock, props fresh. Calls the setter of property i. */
static CUfileError_t call_setter(void *fn, int i, uint64_t value)
{
	switch (i) {
	case PROP_POLL_MODE:
		return ((cuFileDriverSetPollMode_fn)fn)(
		    value != 0, props.nvfs.poll_thresh_size);
	case PROP_POLL_THRESH:
		return ((cuFileDriverSetPollMode_fn)fn)(
		    (props.nvfs.dcontrolflags &
		     (1u << CU_FILE_USE_POLL_MODE)) != 0,
		    (size_t)value);
	case PROP_MAX_DIRECT_IO:
		return ((cuFileDriverSetMaxDirectIOSize_fn)fn)((size_t)value);
	case PROP_MAX_CACHE:
		return ((cuFileDriverSetMaxCacheSize_fn)fn)((size_t)value);
	default:
		return ((cuFileDriverSetMaxPinnedMemSize_fn)fn)((size_t)value);
	}
}

int gpufile_cufile_driver_set(const char *name, uint64_t value)
{
	int i = find_prop(name), rc;
	CUfileError_t e;
	char what[96];
	void *fn;

	if (i < 0)
		return i;
	if (!driver_props[i].setter)
		return gpufile__fail(
		    -EPERM, "cuFile driver property %s is read-only", name);
	if (i == PROP_POLL_MODE && value > 1)
		return gpufile__fail(
		    -EINVAL,
		    "cuFile driver property poll_mode: %llu is "
		    "not 0 or 1",
		    (unsigned long long)value);
	rc = gpufile_cufile_driver_open();
	if (rc)
		return rc;
	pthread_mutex_lock(&cufile_lock);
	fn = lib ? dlsym(lib, driver_props[i].setter) : NULL;
	if (driver_state != 1)
		rc = gpufile__fail(GPUFILE_ECUFILE,
		                   "the cuFile driver was closed");
	else if (!fn)
		rc = gpufile__fail(-ENOTSUP, "cannot set %s: %s lacks %s", name,
		                   library, driver_props[i].setter);
	else
		rc = read_props_locked();
	if (rc == 0) {
		e = call_setter(fn, i, value);
		if (e.err != CU_FILE_SUCCESS) {
			describe(e, what, sizeof(what));
			rc = gpufile__fail(GPUFILE_ECUFILE,
			                   "cuFile refused %s=%llu (%s): %s",
			                   name, (unsigned long long)value,
			                   driver_props[i].setter, what);
		}
		/* What cuFile holds now, right or wrong. cuFile 1.15 without
		 * nvidia-fs returns success from cuFileDriverSetPollMode yet
		 * keeps reporting poll mode off (seen on the H200 machine):
		 * a value that did not take is a refusal too. */
		if (read_props_locked() == 0 && rc == 0 &&
		    prop_value(&props, i) != value)
			rc = gpufile__fail(
			    GPUFILE_ECUFILE,
			    "cuFile accepted %s=%llu (%s) but still reports "
			    "%llu",
			    name, (unsigned long long)value,
			    driver_props[i].setter,
			    (unsigned long long)prop_value(&props, i));
		if (rc == 0)
			gpufile__clear_error();
	}
	pthread_mutex_unlock(&cufile_lock);
	return rc;
}

/*
 * fork() (see fork.c). cuFile's driver state lives in the parent's CUDA
 * context, which a child cannot use: a child of a process that opened the
 * driver forgets it without a call into cuFile (its registrations are the
 * parent's; the exit handler finds the driver not open and does nothing),
 * and reports cuFile unavailable with the reason.
 */
void gpufile__cufile_atfork_prepare(void)
{
	pthread_mutex_lock(&cufile_lock);
}

void gpufile__cufile_atfork_parent(void)
{
	pthread_mutex_unlock(&cufile_lock);
}

void gpufile__cufile_atfork_child(void)
{
	if (driver_state == 1) {
		while (registrations) {
			struct registration *g = registrations;
			registrations = g->next;
			free(g);
		}
		driver_state = -1;
		failure_err = GPUFILE_ENOCUFILE;
		failure_status = 0;
		snprintf(
		    message, sizeof(message),
		    "cuFile's driver was opened in the parent before "
		    "fork(): a forked child cannot use it (it lives in the "
		    "parent's CUDA context)");
		atomic_store(&active, NULL);
	}
	pthread_mutex_unlock(&cufile_lock);
}

const struct gpufile__cufile *gpufile__cufile_loaded(void)
{
	return atomic_load(&active);
}
