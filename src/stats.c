/*
 * Per-process counters in a shared-memory segment, and their reader.
 *
 * The writer: from the first counter update, the process maps
 * /dev/shm/gpufile-UID-PID (created 0600 with O_CREAT|O_EXCL|O_NOFOLLOW,
 * so never through a symlink and never someone else's file) and counts
 * there with relaxed atomics, so that `gpufile stats PID` can watch it
 * live. When the segment cannot be created the counters live in private
 * memory and only gpufile_stats_self() sees them. The segment is unlinked
 * by a destructor at normal exit (and at dlclose); a crash leaves it
 * behind, and readers recognise it as stale because its process is gone,
 * or is a different process with the same PID (start time differs).
 *
 * Lock order: seg_lock, then config.c's config_lock (settings are copied
 * into the segment under seg_lock). seg_lock guards the segment's creation
 * and every text record; counters need no lock.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "stats_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The sequence locks below need fences, which GCC's ThreadSanitizer does
 * not model (-Wtsan). In-process readers also take seg_lock, so what
 * TSan checks is still ordered; other processes it cannot see anyway. */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wtsan"
#endif

uint64_t gpufile__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *gpufile_path_name(gpufile_path_t path)
{
	static const char *const names[] = {"host", "posix", "cufile", "small",
	                                    "remote"};

	return (unsigned)path < GPUFILE_PATH_COUNT ? names[path] : "?";
}

int gpufile_stats_segment_path(int pid, char *buf, size_t len)
{
	int n =
	    snprintf(buf, len, "%s/%s%u-%d", STATS_SEG_DIR, STATS_SEG_PREFIX,
	             (unsigned)getuid(), pid > 0 ? pid : (int)getpid());

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks
 * since boot. Two processes that share a PID never share it. 0 when
 * unknown. */
static uint64_t proc_start_time(int pid)
{
	char path[64], buf[1024];
	const char *p;
	unsigned long long v = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* comm may contain spaces and ')' */
	if (!p)
		return 0;
	/* After ") " come fields 3 (state) .. ; starttime is field 22. */
	p++;
	for (int field = 2; field < 21 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %llu", &v) != 1)
		return 0;
	return v;
}

static void proc_command(int pid, char *out, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, out, len - 1);
	close(fd);
	if (n < 0)
		n = 0;
	out[n] = '\0';
	if (n > 0 && out[n - 1] == '\n')
		out[n - 1] = '\0';
}

/* Copies src into a text record of len bytes, always NUL-terminated. */
static void copy_text(char *dst, const char *src, size_t len)
{
	snprintf(dst, len, "%s", src ? src : "");
}

/* Copies len bytes of a record guarded by seq. Returns the sequence
 * number it saw (even), or 1 when the writer kept changing it. */
static uint32_t seq_read(const _Atomic uint32_t *seq, void *dst,
                         const void *src, size_t len)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint32_t a = atomic_load_explicit(seq, memory_order_acquire);

		if (a & 1) {
			sched_yield();
			continue;
		}
		memcpy(dst, src, len);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(seq, memory_order_relaxed) == a)
			return a;
	}
	return 1;
}

#ifndef GPUFILE_NO_STATS

static void seq_write_begin(_Atomic uint32_t *seq)
{
	uint32_t q = atomic_load_explicit(seq, memory_order_relaxed);

	atomic_store_explicit(seq, q + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void seq_write_end(_Atomic uint32_t *seq)
{
	uint32_t q = atomic_load_explicit(seq, memory_order_relaxed);

	atomic_store_explicit(seq, q + 1, memory_order_release);
}

static pthread_mutex_t seg_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct stats_seg *) seg; /* NULL until the first update */
static struct stats_seg *seg_map;       /* the shared mapping, if any */
static char seg_name[128];              /* its name, "" when private */
static pid_t seg_owner;                 /* the process that created it */
static struct stats_seg private_seg;    /* when /dev/shm is unusable */
static int atfork_done;

/* Slots of exited threads, to be handed to new threads. Guarded by
 * seg_lock. */
static pthread_key_t slot_key;
static int free_slots[STATS_SEG_SLOTS];
static int nfree_slots;

/* This thread's slot in the current segment, or NULL. */
static _Thread_local struct stats_seg_slot *my_slot;
static _Thread_local struct stats_seg *my_seg;

/* Copies the effective settings into s. Caller holds seg_lock. Reading a
 * setting may fail (a bad environment variable) and set this thread's
 * error message; the message of the caller's own request is kept. */
static void snapshot_settings(struct stats_seg *s)
{
	static char saved[1024];
	int n = 0;

	copy_text(saved, gpufile_errmsg(), sizeof(saved));
	seq_write_begin(&s->settings_seq);
	for (int i = 0; i < gpufile_config_count() && n < GPUFILE_MAX_SETTINGS;
	     i++) {
		gpufile_setting_value_t *v = &s->settings.v[n];
		gpufile_source_t src;
		char var[40];

		copy_text(v->name, gpufile_config_name(i), sizeof(v->name));
		if (gpufile_config_get(v->name, v->value, sizeof(v->value),
		                       &src, var, sizeof(var))) {
			copy_text(v->value, "(invalid)", sizeof(v->value));
			copy_text(v->source, "environment", sizeof(v->source));
		} else {
			copy_text(v->source,
			          var[0] ? var : gpufile_source_name(src),
			          sizeof(v->source));
		}
		n++;
	}
	s->settings.n = n;
	seq_write_end(&s->settings_seq);
	if (saved[0])
		gpufile__fail_msg(0, saved);
	else
		gpufile__clear_error();
}

static void init_header(struct stats_seg *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	s->version = STATS_SEG_VERSION;
	s->size = (uint32_t)sizeof(*s);
	s->pid = (int32_t)getpid();
	s->uid = (uint32_t)getuid();
	s->proc_start = proc_start_time(s->pid);
	s->start_time_ns =
	    (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	proc_command(s->pid, s->command, sizeof(s->command));
	s->cufile.ngpus = -1;
}

/* Opens a new segment file named name. A file already there under our
 * own PID can only be a dead process's (or ours from before an exec):
 * it is removed if it is a regular file of ours, else left alone and the
 * segment is not created. Returns a descriptor or -errno. */
static int create_segment_file(const char *name)
{
	const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = open(name, flags, 0600);

	if (fd < 0 && errno == EEXIST) {
		struct stat st;

		if (lstat(name, &st) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != getuid())
			return -EEXIST;
		if (unlink(name) < 0)
			return -errno;
		fd = open(name, flags, 0600);
	}
	if (fd < 0)
		return -errno;
	/* umask may have removed bits; the mode must be exactly 0600. */
	if (fchmod(fd, 0600) < 0 ||
	    ftruncate(fd, sizeof(struct stats_seg)) < 0) {
		int e = -errno;
		close(fd);
		unlink(name);
		return e;
	}
	return fd;
}

static void atfork_child(void)
{
	/* The child is a new process: it must not count into its parent's
	 * segment, nor remove it at exit. Its one thread is this one. */
	pthread_mutex_init(&seg_lock, NULL);
	my_slot = NULL;
	my_seg = NULL;
	nfree_slots = 0;
	if (seg_map)
		munmap(seg_map, sizeof(*seg_map));
	seg_map = NULL;
	seg_name[0] = '\0';
	memset(&private_seg, 0, sizeof(private_seg));
	atomic_store(&seg, NULL);
}

/* A thread with a slot exits: the slot goes to the next new thread. */
static void release_slot(void *value)
{
	int index = (int)(uintptr_t)value - 1;

	pthread_mutex_lock(&seg_lock);
	/* After a fork the value may name a slot of the parent's segment
	 * (the key's values survive fork); it is not the child's. */
	if (index >= 0 && index < STATS_SEG_SLOTS &&
	    nfree_slots < STATS_SEG_SLOTS &&
	    my_seg == atomic_load_explicit(&seg, memory_order_relaxed))
		free_slots[nfree_slots++] = index;
	pthread_mutex_unlock(&seg_lock);
}

/* Gives this thread a slot of s (or the shared one). */
static struct stats_seg_slot *claim_slot(struct stats_seg *s)
{
	int index = -1;

	pthread_mutex_lock(&seg_lock);
	if (nfree_slots)
		index = free_slots[--nfree_slots];
	else if (atomic_load_explicit(&s->nslots, memory_order_relaxed) <
	         STATS_SEG_SLOTS)
		index = (int)atomic_fetch_add_explicit(&s->nslots, 1,
		                                       memory_order_relaxed);
	pthread_mutex_unlock(&seg_lock);
	my_seg = s;
	if (index < 0) {
		my_slot = &s->shared;
		return my_slot;
	}
	pthread_setspecific(slot_key, (void *)(uintptr_t)(index + 1));
	my_slot = &s->slots[index];
	return my_slot;
}

static struct stats_seg *create_segment(void)
{
	struct stats_seg *s;
	int fd;

	pthread_mutex_lock(&seg_lock);
	s = atomic_load_explicit(&seg, memory_order_acquire);
	if (s) {
		pthread_mutex_unlock(&seg_lock);
		return s;
	}
	if (!atfork_done) {
		pthread_atfork(NULL, NULL, atfork_child);
		pthread_key_create(&slot_key, release_slot);
		atfork_done = 1;
	}
	s = &private_seg;
	seg_name[0] = '\0';
	if (gpufile_stats_segment_path(0, seg_name, sizeof(seg_name)) == 0 &&
	    (fd = create_segment_file(seg_name)) >= 0) {
		void *m = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
		               MAP_SHARED, fd, 0);
		close(fd);
		if (m != MAP_FAILED) {
			s = seg_map = m;
		} else {
			unlink(seg_name);
			seg_name[0] = '\0';
		}
	} else {
		seg_name[0] = '\0';
	}
	init_header(s);
	snapshot_settings(s);
	seg_owner = getpid();
	atomic_store_explicit(&s->magic, STATS_SEG_MAGIC, memory_order_release);
	atomic_store_explicit(&seg, s, memory_order_release);
	pthread_mutex_unlock(&seg_lock);
	return s;
}

static inline struct stats_seg *get_segment(void)
{
	struct stats_seg *s = atomic_load_explicit(&seg, memory_order_acquire);

	return s ? s : create_segment();
}

__attribute__((destructor)) static void remove_segment(void)
{
	/* The mapping stays: a thread still running may count into it. */
	if (seg_name[0] && seg_owner == getpid())
		unlink(seg_name);
}

static inline unsigned bucket(uint64_t v)
{
	unsigned b = v ? 63u - (unsigned)__builtin_clzll(v) : 0;

	return b < GPUFILE_HIST_BUCKETS ? b : GPUFILE_HIST_BUCKETS - 1;
}

#define ADD(field, n)                                                          \
	atomic_fetch_add_explicit(&(field), (n), memory_order_relaxed)

/* Adds n to a counter of a slot this thread owns: one writer, so a load
 * and a store (no locked instruction); readers still see whole values. */
#define OWN_ADD(field, n)                                                      \
	atomic_store_explicit(                                                 \
	    &(field),                                                          \
	    atomic_load_explicit(&(field), memory_order_relaxed) + (n),        \
	    memory_order_relaxed)

void gpufile__stats_request(gpufile_path_t path, int is_write, ssize_t result,
                            uint64_t tasks, size_t size, uint64_t ns)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_slot *slot = my_slot;
	struct stats_seg_counter *c;

	if ((unsigned)path >= GPUFILE_PATH_COUNT)
		return;
	if (__builtin_expect(!slot || my_seg != s, 0))
		slot = claim_slot(s);
	c = &slot->path[path][is_write ? 1 : 0];
	if (__builtin_expect(slot == &s->shared, 0)) {
		ADD(c->ops, 1);
		ADD(c->tasks, tasks);
		if (result < 0)
			ADD(c->errors, 1);
		else
			ADD(c->bytes, (uint64_t)result);
		ADD(c->latency[bucket(ns)], 1);
		ADD(c->size[bucket(size)], 1);
		return;
	}
	OWN_ADD(c->ops, 1);
	OWN_ADD(c->tasks, tasks);
	if (result < 0)
		OWN_ADD(c->errors, 1);
	else
		OWN_ADD(c->bytes, (uint64_t)result);
	OWN_ADD(c->latency[bucket(ns)], 1);
	OWN_ADD(c->size[bucket(size)], 1);
}

void gpufile__stats_direct_fallback(void)
{
	ADD(get_segment()->direct_io_fallbacks, 1);
}

void gpufile__stats_file(const char *path, gpufile_path_t chosen,
                         const char *reason)
{
	struct stats_seg *s = get_segment();
	uint64_t n = ADD(s->files_opened, 1);
	struct stats_seg_file *f = &s->files[n % GPUFILE_MAX_FILE_STATS];

	pthread_mutex_lock(&seg_lock);
	seq_write_begin(&f->seq);
	f->chosen = (int32_t)chosen;
	copy_text(f->path, path, sizeof(f->path));
	copy_text(f->reason, reason, sizeof(f->reason));
	seq_write_end(&f->seq);
	snapshot_settings(s);
	pthread_mutex_unlock(&seg_lock);
}

void gpufile__stats_cufile(const gpufile_cufile_gpu_t *per_gpu, int ngpus)
{
	struct stats_seg *s = get_segment();

	if (ngpus < 0)
		ngpus = 0;
	if (ngpus > GPUFILE_MAX_GPUS)
		ngpus = GPUFILE_MAX_GPUS;
	pthread_mutex_lock(&seg_lock);
	seq_write_begin(&s->cufile_seq);
	for (int i = 0; i < ngpus; i++)
		s->cufile.gpu[i] = per_gpu[i];
	s->cufile.ngpus = ngpus;
	seq_write_end(&s->cufile_seq);
	pthread_mutex_unlock(&seg_lock);
}

/* ---- remote sources (remote.c) ---- */

void gpufile__stats_remote_response(long status, long connects)
{
	struct stats_seg *s = get_segment();
	const long cls = status / 100;

	ADD(s->remote.requests, 1);
	if (connects > 0)
		ADD(s->remote.connects, (uint64_t)connects);
	ADD(s->remote.status[cls >= 1 && cls <= 5 ? cls : 0], 1);
}

void gpufile__stats_remote_retry(void)
{
	ADD(get_segment()->remote.retries, 1);
}

void gpufile__stats_remote_range(uint64_t bytes, int failed)
{
	struct stats_seg *s = get_segment();

	if (failed) {
		ADD(s->remote.failures, 1);
		return;
	}
	ADD(s->remote.ranges, 1);
	ADD(s->remote.bytes, bytes);
}

#else /* GPUFILE_NO_STATS: counters compiled out */

void gpufile__stats_request(gpufile_path_t path, int is_write, ssize_t result,
                            uint64_t tasks, size_t size, uint64_t ns)
{
	(void)path;
	(void)is_write;
	(void)result;
	(void)tasks;
	(void)size;
	(void)ns;
}

void gpufile__stats_direct_fallback(void)
{
}

void gpufile__stats_file(const char *path, gpufile_path_t chosen,
                         const char *reason)
{
	(void)path;
	(void)chosen;
	(void)reason;
}

void gpufile__stats_cufile(const gpufile_cufile_gpu_t *per_gpu, int ngpus)
{
	(void)per_gpu;
	(void)ngpus;
}

void gpufile__stats_remote_response(long status, long connects)
{
	(void)status;
	(void)connects;
}

void gpufile__stats_remote_retry(void)
{
}

void gpufile__stats_remote_range(uint64_t bytes, int failed)
{
	(void)bytes;
	(void)failed;
}

#endif /* GPUFILE_NO_STATS */

/* ---- the reader ---- */

#define LOAD(field) atomic_load_explicit(&(field), memory_order_relaxed)

static int used_slots(const struct stats_seg *s)
{
	uint32_t n = LOAD(s->nslots);

	return n < STATS_SEG_SLOTS ? (int)n : STATS_SEG_SLOTS;
}

/* Bytes moved on every path and direction. */
static uint64_t total_bytes(const struct stats_seg *s)
{
	uint64_t sum = 0;

	for (int i = -1; i < used_slots(s); i++) {
		const struct stats_seg_slot *slot =
		    i < 0 ? &s->shared : &s->slots[i];
		for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
			for (int d = 0; d < 2; d++)
				sum += LOAD(slot->path[p][d].bytes);
	}
	return sum;
}

/* Copies segment s into out. */
static void snapshot(const struct stats_seg *s, gpufile_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = -1; i < used_slots(s); i++) {
		const struct stats_seg_slot *slot =
		    i < 0 ? &s->shared : &s->slots[i];
		for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
			for (int d = 0; d < 2; d++) {
				const struct stats_seg_counter *c =
				    &slot->path[p][d];
				out->path[p][d].ops += LOAD(c->ops);
				out->path[p][d].tasks += LOAD(c->tasks);
				out->path[p][d].bytes += LOAD(c->bytes);
				out->path[p][d].errors += LOAD(c->errors);
				for (int b = 0; b < GPUFILE_HIST_BUCKETS; b++) {
					out->latency_hist[p][d][b] +=
					    LOAD(c->latency[b]);
					out->size_hist[p][d][b] +=
					    LOAD(c->size[b]);
				}
			}
		}
	}
	out->direct_io_fallbacks = LOAD(s->direct_io_fallbacks);
	out->pid = s->pid;
	out->uid = s->uid;
	memcpy(out->command, s->command, sizeof(out->command));
	out->command[sizeof(out->command) - 1] = '\0';
	out->start_time_ns = s->start_time_ns;
	out->files_opened = LOAD(s->files_opened);

	struct stats_seg_cufile cu;
	struct stats_seg_settings st;

	out->cufile_ngpus = -1;
	if ((seq_read(&s->cufile_seq, &cu, &s->cufile, sizeof(cu)) & 1) == 0 &&
	    cu.ngpus >= 0) {
		out->cufile_ngpus =
		    cu.ngpus < GPUFILE_MAX_GPUS ? cu.ngpus : GPUFILE_MAX_GPUS;
		memcpy(out->cufile, cu.gpu,
		       sizeof(cu.gpu[0]) * (size_t)out->cufile_ngpus);
	}
	if ((seq_read(&s->settings_seq, &st, &s->settings, sizeof(st)) & 1) ==
	        0 &&
	    st.n > 0 && st.n <= GPUFILE_MAX_SETTINGS) {
		out->nsettings = st.n;
		for (int i = 0; i < st.n; i++) {
			gpufile_setting_value_t *v = &out->settings[i];
			*v = st.v[i];
			v->name[sizeof(v->name) - 1] = '\0';
			v->value[sizeof(v->value) - 1] = '\0';
			v->source[sizeof(v->source) - 1] = '\0';
		}
	}
}

static int copy_files(const struct stats_seg *s, gpufile_file_stat_t *out,
                      int max)
{
	uint64_t n = LOAD(s->files_opened);
	uint64_t first =
	    n > GPUFILE_MAX_FILE_STATS ? n - GPUFILE_MAX_FILE_STATS : 0;
	int copied = 0;

	for (uint64_t i = first; i < n && copied < max; i++) {
		const struct stats_seg_file *f =
		    &s->files[i % GPUFILE_MAX_FILE_STATS];
		struct stats_seg_file tmp;
		uint32_t q = seq_read(&f->seq, &tmp, f, sizeof(tmp));

		if (q == 0 || (q & 1))
			continue; /* claimed but not written yet, or busy */
		tmp.path[sizeof(tmp.path) - 1] = '\0';
		tmp.reason[sizeof(tmp.reason) - 1] = '\0';
		copy_text(out[copied].path, tmp.path, sizeof(out[copied].path));
		copy_text(out[copied].reason, tmp.reason,
		          sizeof(out[copied].reason));
		out[copied].chosen = (unsigned)tmp.chosen < GPUFILE_PATH_COUNT
		                         ? (gpufile_path_t)tmp.chosen
		                         : GPUFILE_PATH_COUNT;
		copied++;
	}
	return copied;
}

/* A segment mapped for reading. */
struct view {
	const struct stats_seg *s; /* NULL: this process, before any I/O */
	void *map; /* to unmap, or NULL for this process's own */
	int self;
};

/* Owner of process pid (from /proc/PID), or -errno. */
__attribute__((unused)) static int proc_owner(int pid, uid_t *uid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &st) < 0)
		return -errno;
	*uid = st.st_uid;
	return 0;
}

/* Maps the segment file name, checks its owner (uid), mode, size, magic
 * and version. Returns 0 or -EPROTO / -ENOENT / -errno with the message
 * set. */
static int map_segment(const char *name, uid_t uid, struct view *v)
{
	struct stat st;
	void *m;
	const struct stats_seg *s; /* NULL: this process, before any I/O */
	int fd = open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			return -ENOENT;
		if (e == ELOOP)
			return gpufile__fail(-EPROTO,
			                     "%s is a symbolic link, "
			                     "not a gpufile segment",
			                     name);
		return gpufile__fail(-e, "opening %s: %s", name, strerror(e));
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return gpufile__fail(-EPROTO, "%s is not a regular file", name);
	}
	if (st.st_uid != uid || (st.st_mode & 077)) {
		close(fd);
		return gpufile__fail(
		    -EPROTO,
		    "%s: owner %u mode %04o; a gpufile segment "
		    "belongs to uid %u with mode 0600",
		    name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
		    (unsigned)uid);
	}
	if ((uint64_t)st.st_size != sizeof(struct stats_seg)) {
		close(fd);
		return gpufile__fail(
		    -EPROTO,
		    "%s: %lld bytes, expected %zu (a different "
		    "version of gpufile wrote it?)",
		    name, (long long)st.st_size, sizeof(struct stats_seg));
	}
	m = mmap(NULL, sizeof(struct stats_seg), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return gpufile__fail(-errno, "mapping %s: %s", name,
		                     strerror(errno));
	s = m;
	if (atomic_load_explicit(&s->magic, memory_order_acquire) !=
	        STATS_SEG_MAGIC ||
	    s->version != STATS_SEG_VERSION ||
	    s->size != sizeof(struct stats_seg) || s->uid != uid) {
		munmap(m, sizeof(struct stats_seg));
		return gpufile__fail(-EPROTO,
		                     "%s: not a gpufile segment of layout "
		                     "version %u (or still being created)",
		                     name, STATS_SEG_VERSION);
	}
	v->s = s;
	v->map = m;
	v->self = 0;
	return 0;
}

static void release_view(struct view *v)
{
#ifndef GPUFILE_NO_STATS
	if (v->self)
		pthread_mutex_unlock(&seg_lock);
#endif
	if (v->map)
		munmap(v->map, sizeof(struct stats_seg));
}

/* Whether the segment's process is alive and is the process that wrote
 * it. */
static int segment_alive(const struct stats_seg *s)
{
	uint64_t start;

	if (kill(s->pid, 0) < 0 && errno == ESRCH)
		return 0;
	start = proc_start_time(s->pid);
	return !(start && s->proc_start && start != s->proc_start);
}

static int open_view(int pid, struct view *v)
{
	char name[128], comm[64];
	uid_t uid = 0;
	int rc;

	memset(v, 0, sizeof(*v));
#ifdef GPUFILE_NO_STATS
	(void)pid;
	(void)name;
	(void)comm;
	(void)uid;
	(void)rc;
	return gpufile__fail(-ENOTSUP,
	                     "gpufile was built with "
	                     "GPUFILE_NO_STATS: no counters are kept");
#else
	if (pid <= 0 || pid == (int)getpid()) {
		/* v->s stays NULL before this process's first I/O. */
		pthread_mutex_lock(&seg_lock);
		v->s = atomic_load_explicit(&seg, memory_order_acquire);
		v->self = 1;
		return 0;
	}
	if (kill(pid, 0) < 0 && errno == ESRCH) {
		snprintf(name, sizeof(name), "%s/%s%u-%d", STATS_SEG_DIR,
		         STATS_SEG_PREFIX, (unsigned)getuid(), pid);
		if (access(name, F_OK) == 0)
			return gpufile__fail(
			    -ESTALE,
			    "no process with PID %d; its segment "
			    "%s is stale (gpufile stats --clean "
			    "removes it)",
			    pid, name);
		return gpufile__fail(-ESRCH, "no process with PID %d", pid);
	}
	rc = proc_owner(pid, &uid);
	if (rc == -ENOENT)
		return gpufile__fail(-ESRCH, "no process with PID %d", pid);
	if (rc)
		return gpufile__fail(rc, "PID %d: %s", pid, strerror(-rc));
	if (uid != getuid() && getuid() != 0)
		return gpufile__fail(-EACCES,
		                     "PID %d belongs to another user (uid %u); "
		                     "only its owner can read its counters",
		                     pid, (unsigned)uid);
	proc_command(pid, comm, sizeof(comm));
	snprintf(name, sizeof(name), "%s/%s%u-%d", STATS_SEG_DIR,
	         STATS_SEG_PREFIX, (unsigned)uid, pid);
	rc = map_segment(name, uid, v);
	if (rc == -ENOENT)
		return gpufile__fail(-ENOENT,
		                     "PID %d (%s) does not use gpufile: no "
		                     "segment %s (it has done no I/O yet, or "
		                     "gpufile was built without statistics)",
		                     pid, comm, name);
	if (rc)
		return rc;
	if (v->s->pid != pid || !segment_alive(v->s)) {
		release_view(v);
		return gpufile__fail(-ESTALE,
		                     "%s is stale: it was left by an earlier "
		                     "process with PID %d, not by %s",
		                     name, pid, comm);
	}
	return 0;
#endif
}

int gpufile_stats_read(int pid, gpufile_stats_t *out)
{
	struct view v;
	int rc = open_view(pid, &v);

	if (rc) {
		memset(out, 0, sizeof(*out));
		return rc;
	}
	if (v.s)
		snapshot(v.s, out);
	else
		memset(out, 0, sizeof(*out));
	if (v.self && !out->pid) {
		out->pid = (int32_t)getpid();
		out->uid = (uint32_t)getuid();
		out->cufile_ngpus = -1;
		proc_command(out->pid, out->command, sizeof(out->command));
	}
	release_view(&v);
	return 0;
}

int gpufile_stats_self(gpufile_stats_t *out)
{
	int rc = gpufile_stats_read(0, out);

	if (rc) {
		/* Counters compiled out: report zeros. */
		out->pid = (int32_t)getpid();
		out->uid = (uint32_t)getuid();
		out->cufile_ngpus = -1;
		gpufile__clear_error();
	}
	return 0;
}

int gpufile_stats_files(int pid, gpufile_file_stat_t *out, int max)
{
	struct view v;
	int rc = open_view(pid, &v);

	if (rc)
		return rc;
	rc = v.s && max > 0 && out ? copy_files(v.s, out, max) : 0;
	release_view(&v);
	return rc;
}

int gpufile_stats_remote(int pid, gpufile_remote_stats_t *out)
{
	struct view v;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_stats_remote: out is "
		                              "NULL");
	memset(out, 0, sizeof(*out));
	rc = open_view(pid, &v);
	if (rc)
		return rc;
	if (v.s) {
		const struct stats_seg_remote *r = &v.s->remote;

		out->requests = LOAD(r->requests);
		out->ranges = LOAD(r->ranges);
		out->bytes = LOAD(r->bytes);
		out->retries = LOAD(r->retries);
		out->failures = LOAD(r->failures);
		out->connects = LOAD(r->connects);
		for (int i = 0; i < GPUFILE_REMOTE_STATUS_CLASSES; i++)
			out->status[i] = LOAD(r->status[i]);
	}
	release_view(&v);
	return 0;
}

int gpufile__stats_read_file(const char *path, unsigned uid,
                             gpufile_stats_t *out, gpufile_file_stat_t *files,
                             int max)
{
	struct view v;
	int rc;

	memset(&v, 0, sizeof(v));
	rc = map_segment(path, (uid_t)uid, &v);
	if (rc)
		return rc;
	snapshot(v.s, out);
	rc = files && max > 0 ? copy_files(v.s, files, max) : 0;
	release_view(&v);
	return rc;
}

/* Parses "gpufile-UID-PID". Returns 0 when name is a segment's. */
static int parse_name(const char *name, unsigned *uid, int *pid)
{
	char tail;

	if (strncmp(name, STATS_SEG_PREFIX, strlen(STATS_SEG_PREFIX)) != 0)
		return -1;
	if (sscanf(name + strlen(STATS_SEG_PREFIX), "%u-%d%c", uid, pid,
	           &tail) != 2 ||
	    *pid <= 0)
		return -1;
	return 0;
}

/* Calls fn for each segment of this user (every user's for root). */
static int each_segment(int (*fn)(const char *path, unsigned uid, int pid,
                                  void *arg),
                        void *arg)
{
	DIR *d = opendir(STATS_SEG_DIR);
	struct dirent *e;
	int n = 0;

	if (!d)
		return gpufile__fail(-errno, "opening %s: %s", STATS_SEG_DIR,
		                     strerror(errno));
	while ((e = readdir(d))) {
		char path[384];
		unsigned uid;
		int pid;

		if (parse_name(e->d_name, &uid, &pid) ||
		    (uid != getuid() && getuid() != 0))
			continue;
		snprintf(path, sizeof(path), "%s/%s", STATS_SEG_DIR, e->d_name);
		n += fn(path, uid, pid, arg);
	}
	closedir(d);
	return n;
}

struct list_arg {
	gpufile_process_t *out;
	int max, n;
};

/* 1 when the segment at path is stale (its process gone or replaced),
 * else 0. v gets the mapped segment when it is readable (v->s NULL when
 * not), to be released by the caller. */
static int is_stale(const char *path, unsigned uid, int pid, struct view *v)
{
	int rc;

	memset(v, 0, sizeof(*v));
	rc = map_segment(path, uid, v);
	gpufile__clear_error();
	if (rc)
		return kill(pid, 0) < 0 && errno == ESRCH;
	if (v->s->pid != pid)
		return kill(pid, 0) < 0 && errno == ESRCH;
	return !segment_alive(v->s);
}

static int list_one(const char *path, unsigned uid, int pid, void *arg)
{
	struct list_arg *a = arg;
	gpufile_process_t p;
	struct view v;

	memset(&p, 0, sizeof(p));
	p.pid = pid;
	p.stale = is_stale(path, uid, pid, &v);
	if (v.s) {
		copy_text(p.command, v.s->command, sizeof(p.command));
		p.bytes = total_bytes(v.s);
		release_view(&v);
	} else if (!p.stale) {
		return 0; /* a live process's unreadable file: not ours */
	}
	if (a->n < a->max && a->out)
		a->out[a->n] = p;
	a->n++;
	return 1;
}

int gpufile_stats_list(gpufile_process_t *out, int max)
{
	struct list_arg a = {out, max, 0};
	int rc = each_segment(list_one, &a);

	return rc < 0 ? rc : a.n;
}

static int clean_one(const char *path, unsigned uid, int pid, void *arg)
{
	struct view v;
	struct stat st;
	int stale = is_stale(path, uid, pid, &v);

	(void)arg;
	if (v.s)
		release_view(&v);
	if (!stale || lstat(path, &st) < 0 || st.st_uid != getuid())
		return 0;
	return unlink(path) == 0;
}

int gpufile_stats_clean(void)
{
	int rc = each_segment(clean_one, NULL);

	return rc < 0 ? 0 : rc;
}
