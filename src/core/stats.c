/*
 * Per-process counters in a shared-memory segment, and their reader.
 *
 * The writer: from its first gpufile_open() or request, the process counts
 * into an unlinked memfd (STATS_MEMFD_NAME, mode 0600, close-on-exec) that
 * it keeps open, sized, its memory reserved with fallocate() (so that a
 * memory limit fails here, not with SIGBUS at the first touch of a page),
 * then sealed against shrinking and growing. Nothing has a name in a file
 * system, so nothing outlives the process, whatever kills it. When any
 * step fails the counters live in private memory, with the reason in the
 * header (gpufile_stats_backing()); only the process itself sees them.
 *
 * The reader (gpufile stats PID) finds the memfd among /proc/PID/fd and
 * opens /proc/PID/fd/N, which the kernel allows only to the same user
 * (and a dumpable process) or root. It maps the segment only when it is
 * sealed against shrinking, so that its writer cannot truncate it under
 * the reader (SIGBUS), and checks mode, owner, size, magic and version.
 *
 * fork(): the child gets its own segment at its first update; it closes
 * and unmaps its parent's (pthread_atfork child handler).
 *
 * Before layout 3, segments were named files in /dev/shm
 * (STATS_SEG_DIR/STATS_SEG_PREFIX UID-PID) that outlived a killed
 * process. Nothing makes them now, but the reader still knows them:
 * gpufile_stats_list() lists those of dead processes as stale, a read of
 * such a PID says one was left, and gpufile_stats_clean() (gpufile stats
 * --clean) removes them. A file of a live PID is never touched: it may be
 * the segment of an older gpufile still running.
 *
 * Lock order: seg_lock, then config.c's config_lock (settings are copied
 * into the segment under seg_lock). seg_lock guards the segment's creation,
 * every text record, and the giving and holding of per-file records
 * (gpufile__stats_file_hold/_release); counters need no lock.
 */
#define _GNU_SOURCE
#include "core/core.h"
#include "core/stats_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
	static const char *const names[] = {"host",  "posix", "cufile",
	                                    "small", "mmap",  "remote"};

	return (unsigned)path < GPUFILE_PATH_COUNT ? names[path] : "?";
}

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks
 * since boot. Two processes that share a PID never share it. 0 when
 * unknown. */
__attribute__((unused)) static uint64_t proc_start_time(int pid)
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
static int seg_fd = -1;                 /* its memfd, kept for readers */
static dev_t seg_dev;                   /* and its identity, to know it */
static ino_t seg_ino;
static struct stats_seg private_seg; /* when no memfd can be made */
static int atfork_done;
/* Moves on at each segment this process makes and at fork (a child
 * makes its own): a handle's per-file record is of the segment of this
 * generation only (struct gpufile__stats_file_ref). While it equals a
 * handle's, the segment exists. */
static _Atomic uint64_t seg_generation;

/* Slots of exited threads, to be handed to new threads. Guarded by
 * seg_lock. */
static pthread_key_t slot_key;
static int free_slots[STATS_SEG_SLOTS];
static int nfree_slots;

/* This thread's slot in the current segment, or NULL. */
static _Thread_local struct stats_seg_slot *my_slot;
static _Thread_local struct stats_seg *my_seg;
/* The settings generation (config.c) the segment's copy of the settings
 * is of; guarded by seg_lock. */
static unsigned snapshot_generation;

/* Copies the effective settings into s. Caller holds seg_lock (the
 * segment's text records). Reading a setting may fail (a bad environment
 * variable) and set this thread's error message: the message of the
 * caller's own request is set aside meanwhile and comes back whole
 * (error.c keeps it per thread: no buffer here, shared or cut). */
static void snapshot_settings(struct stats_seg *s)
{
	int n = 0;

	/* Before the values: a set meanwhile moves the generation past it,
	 * and the next record copies them again. */
	snapshot_generation = gpufile__config_generation();
	gpufile__error_save();
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
	gpufile__error_restore();
}

static void init_header(struct stats_seg *s)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	s->version = STATS_SEG_VERSION;
	s->size = (uint32_t)sizeof(*s);
	s->pid = (int32_t)getpid();
	s->uid = (uint32_t)geteuid(); /* the memfd's owner */
	s->proc_start = proc_start_time(s->pid);
	s->start_time_ns =
	    (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	proc_command(s->pid, s->command, sizeof(s->command));
	s->cufile.ngpus = -1;
}

static int real_fallocate(int fd, off_t offset, off_t len)
{
	return fallocate(fd, 0, offset, len);
}

int (*gpufile__stats_fallocate)(int fd, off_t offset,
                                off_t len) = real_fallocate;

/* Makes the shared segment: a sealed memfd whose memory is reserved, kept
 * open in seg_fd. Returns the mapping, or NULL with why (len bytes) set. */
static struct stats_seg *create_shared(char *why, size_t len)
{
	const size_t size = sizeof(struct stats_seg);
	const char *step = "memfd_create";
	void *m = MAP_FAILED;
	int fd = -1;
	struct stat st;

#ifdef MFD_NOEXEC_SEAL
	/* Linux 6.3 and later: with vm.memfd_noexec=2 a memfd that could be
	 * executable is refused; ours never needs to be. Older kernels
	 * refuse the flag (EINVAL): then without it. */
	fd = memfd_create(STATS_MEMFD_NAME,
	                  MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0 && errno == EINVAL)
#endif
		fd = memfd_create(STATS_MEMFD_NAME,
		                  MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		goto fail;
	/* Its mode stays the kernel's (0777 or 0666, never 0600) until
	 * create_segment() has written the header: readers take a segment
	 * whose mode is not 0600 and whose magic is not stored yet as one
	 * still being created (segment_building()). */
	step = "ftruncate";
	if (ftruncate(fd, (off_t)size) < 0)
		goto fail;
	/* Every page now, or a full tmpfs or memory cgroup would answer the
	 * first touch of a page with SIGBUS in the middle of a read. */
	step = "reserving its memory (fallocate)";
	if (gpufile__stats_fallocate(fd, 0, (off_t)size) < 0)
		goto fail;
	step = "sealing it (F_ADD_SEALS)";
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) <
	    0)
		goto fail;
	step = "mmap";
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED || fstat(fd, &st) < 0) {
		if (m != MAP_FAILED)
			munmap(m, size);
		goto fail;
	}
	seg_fd = fd;
	seg_dev = st.st_dev;
	seg_ino = st.st_ino;
	snprintf(why, len,
	         "shared: memfd %s (descriptor %d), readable by gpufile stats "
	         "%d",
	         STATS_MEMFD_NAME, fd, (int)getpid());
	return m;
fail:
	snprintf(why, len,
	         "private: the shared segment (%zu bytes) could not be made: "
	         "%s: %s; gpufile stats %d cannot see these counters",
	         size, step, strerror(errno), (int)getpid());
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Counting privately: an empty memfd whose name carries why (a name
 * costs no memory), so that gpufile stats PID can say so rather than "no
 * I/O yet". Kept in seg_fd. */
static void mark_private(const char *why)
{
	char name[STATS_PRIVATE_NAME_MAX];
	struct stat st;
	size_t n =
	    (size_t)snprintf(name, sizeof(name), "%s%s", STATS_PRIVATE_PREFIX,
	                     strncmp(why, "private: ", 9) == 0 ? why + 9 : why);
	int fd;

	for (size_t i = 0; i < n && i < sizeof(name); i++)
		if (name[i] == '/') /* not allowed in a memfd name */
			name[i] = '|';
	fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return;
	}
	seg_fd = fd;
	seg_dev = st.st_dev;
	seg_ino = st.st_ino;
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
	/* The inherited descriptor is closed, unless the program closed it
	 * and its number now names a file of the program's own. */
	if (seg_fd >= 0) {
		struct stat st;
		if (fstat(seg_fd, &st) == 0 && st.st_dev == seg_dev &&
		    st.st_ino == seg_ino)
			close(seg_fd);
	}
	seg_fd = -1;
	memset(&private_seg, 0, sizeof(private_seg));
	atomic_store(&seg, NULL);
	/* The handles' per-file records are the parent's from now on. */
	atomic_fetch_add_explicit(&seg_generation, 1, memory_order_relaxed);
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
	char why[sizeof(s->backing)];

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
	s = seg_map = create_shared(why, sizeof(why));
	if (!s) {
		s = &private_seg;
		mark_private(why);
	}
	init_header(s);
	copy_text(s->backing, why, sizeof(s->backing));
	snapshot_settings(s);
	/* The owner alone may read the counters. Until now the segment
	 * was visible in /proc/PID/fd, but recognisably incomplete (mode,
	 * magic 0): readers skip it. The magic comes last: a reader that
	 * sees it sees the whole header. */
	if (s == seg_map && fchmod(seg_fd, 0600) < 0) {
		char reason[sizeof(why)];

		snprintf(reason, sizeof(reason),
		         "private: the shared segment could not be made: "
		         "fchmod 0600: %s; gpufile stats %d cannot see these "
		         "counters",
		         strerror(errno), (int)getpid());
		munmap(seg_map, sizeof(*seg_map));
		close(seg_fd);
		seg_fd = -1;
		seg_map = NULL;
		s = &private_seg;
		mark_private(reason);
		init_header(s);
		copy_text(s->backing, reason, sizeof(s->backing));
		snapshot_settings(s);
	}
	atomic_store_explicit(&s->magic, STATS_SEG_MAGIC, memory_order_release);
	atomic_fetch_add_explicit(&seg_generation, 1, memory_order_relaxed);
	atomic_store_explicit(&seg, s, memory_order_release);
	pthread_mutex_unlock(&seg_lock);
	return s;
}

static inline struct stats_seg *get_segment(void)
{
	struct stats_seg *s = atomic_load_explicit(&seg, memory_order_acquire);

	return s ? s : create_segment();
}

static inline unsigned bucket(uint64_t v)
{
	unsigned b = v ? 63u - (unsigned)__builtin_clzll(v) : 0;

	return b < GPUFILE_HIST_BUCKETS ? b : GPUFILE_HIST_BUCKETS - 1;
}

#define ADD(field, n)                                                          \
	atomic_fetch_add_explicit(&(field), (n), memory_order_relaxed)
#define LOAD_FILES(s)                                                          \
	atomic_load_explicit(&(s)->files_opened, memory_order_relaxed)

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

/* This thread's slot of s (claimed at its first count). */
static inline struct stats_seg_slot *own_slot(struct stats_seg *s)
{
	struct stats_seg_slot *slot = my_slot;

	if (__builtin_expect(!slot || my_seg != s, 0))
		slot = claim_slot(s);
	return slot;
}

/*
 * The worker pool's requests (pool.c) count in three steps, so that a
 * reader sees a large request move while it runs: a request starts (the
 * gauges take it in), each task ends (its bytes and the task are credited
 * to the path at once, in the thread's own slot, and leave the gauges),
 * the request ends (its op, error and histograms; what it asked for and
 * no task moved, e.g. past the end of the file, leaves the gauges). All
 * of it goes into the thread's own slot with plain stores, the gauges
 * included (see struct stats_seg_slot): per task four stores, no locked
 * instruction (bench/stats_overhead measures it).
 */
/* Adds n (modulo 2^64: "- x" adds -x) to a field of slot, this
 * thread's: a plain store, or an atomic add in the shared slot. */
#define SLOT_ADD(s, slot, field, n)                                            \
	do {                                                                   \
		if (__builtin_expect((slot) == &(s)->shared, 0))               \
			ADD((slot)->field, (n));                               \
		else                                                           \
			OWN_ADD((slot)->field, (n));                           \
	} while (0)

/* The record ref names in s, or NULL: none, or one of a segment this
 * process no longer counts in (a forked child's inherited handle). */
static inline struct stats_seg_file_counters *
file_record(struct stats_seg *s, const struct gpufile__stats_file_ref *ref)
{
	if (!ref || !ref->segment ||
	    ref->segment !=
	        atomic_load_explicit(&seg_generation, memory_order_relaxed) ||
	    ref->index >= GPUFILE_MAX_FILE_COUNTERS)
		return NULL;
	return &s->file_counters[ref->index];
}

void gpufile__stats_request_begin(const struct gpufile__stats_file_ref *file,
                                  uint64_t ntasks, uint64_t size,
                                  uint64_t start_ns)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_slot *slot = own_slot(s);
	struct stats_seg_file_counters *f = file_record(s, file);

	SLOT_ADD(s, slot, inflight_requests, 1);
	SLOT_ADD(s, slot, inflight_tasks, ntasks);
	SLOT_ADD(s, slot, pending_bytes, size);
	if (f) {
		atomic_store_explicit(&f->last_used_ns, start_ns,
		                      memory_order_relaxed);
		ADD(f->requests_begun, 1);
		ADD(f->tasks_begun, ntasks);
		ADD(f->bytes_asked, size);
	}
}

void gpufile__stats_task(const struct gpufile__stats_file_ref *file,
                         gpufile_path_t path, int is_write, uint64_t bytes)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_slot *slot = own_slot(s);
	struct stats_seg_file_counters *f = file_record(s, file);
	struct stats_seg_counter *c;

	SLOT_ADD(s, slot, inflight_tasks, -(uint64_t)1);
	SLOT_ADD(s, slot, pending_bytes, -bytes);
	if ((unsigned)path >= GPUFILE_PATH_COUNT) {
		if (f) /* no path to credit it to: out of the gauges */
			ADD(f->tasks_skipped, 1);
		return;
	}
	if (f) {
		struct stats_seg_file_counter *fc =
		    &f->path[path][is_write ? 1 : 0];
		ADD(fc->tasks, 1);
		ADD(fc->bytes, bytes);
	}
	c = &slot->path[path][is_write ? 1 : 0];
	if (__builtin_expect(slot == &s->shared, 0)) {
		ADD(c->tasks, 1);
		ADD(c->bytes, bytes);
		return;
	}
	OWN_ADD(c->tasks, 1);
	OWN_ADD(c->bytes, bytes);
}

void gpufile__stats_tasks_skipped(const struct gpufile__stats_file_ref *file,
                                  uint64_t ntasks)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_slot *slot = own_slot(s);
	struct stats_seg_file_counters *f = file_record(s, file);

	SLOT_ADD(s, slot, inflight_tasks, -ntasks);
	if (f)
		ADD(f->tasks_skipped, ntasks);
}

void gpufile__stats_request_end(const struct gpufile__stats_file_ref *file,
                                gpufile_path_t path, int is_write,
                                ssize_t result, size_t size, uint64_t moved,
                                uint64_t ns)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_slot *slot = own_slot(s);
	struct stats_seg_file_counters *f = file_record(s, file);
	struct stats_seg_counter *c;

	SLOT_ADD(s, slot, inflight_requests, -(uint64_t)1);
	SLOT_ADD(s, slot, pending_bytes, -((uint64_t)size - moved));
	if (f) {
		/* A path out of range has no op to count: its begin is
		 * taken back instead, so that it leaves the gauge. */
		if ((unsigned)path >= GPUFILE_PATH_COUNT) {
			ADD(f->requests_begun, -(uint64_t)1);
		} else {
			struct stats_seg_file_counter *fc =
			    &f->path[path][is_write ? 1 : 0];
			ADD(fc->ops, 1);
			if (result < 0)
				ADD(fc->errors, 1);
		}
		if ((uint64_t)size != moved)
			ADD(f->bytes_settled, (uint64_t)size - moved);
	}
	if ((unsigned)path >= GPUFILE_PATH_COUNT)
		return;
	c = &slot->path[path][is_write ? 1 : 0];
	if (__builtin_expect(slot == &s->shared, 0)) {
		ADD(c->ops, 1);
		if (result < 0)
			ADD(c->errors, 1);
		ADD(c->latency[bucket(ns)], 1);
		ADD(c->size[bucket(size)], 1);
		return;
	}
	OWN_ADD(c->ops, 1);
	if (result < 0)
		OWN_ADD(c->errors, 1);
	OWN_ADD(c->latency[bucket(ns)], 1);
	OWN_ADD(c->size[bucket(size)], 1);
}

int gpufile_stats_add_collective(uint64_t bytes_received, uint64_t bytes_sent)
{
	struct stats_seg *s = get_segment();

	ADD(s->collective_calls, 1);
	ADD(s->collective_bytes_received, bytes_received);
	ADD(s->collective_bytes_sent, bytes_sent);
	return 0;
}

void gpufile__stats_direct_fallback(void)
{
	ADD(get_segment()->direct_io_fallbacks, 1);
}

void gpufile__stats_map_copy(uint64_t bytes, int faulted)
{
	struct stats_seg *s = get_segment();

	if (faulted)
		ADD(s->map_copy_faults, 1);
	else
		ADD(s->map_copy_bytes, bytes);
}

/* Writes record f. Caller holds seg_lock. */
static void write_file_record(struct stats_seg_file *f, const char *path,
                              gpufile_path_t chosen, int pending,
                              const char *reason)
{
	seq_write_begin(&f->seq);
	f->chosen = (int32_t)chosen;
	f->pending = pending;
	copy_text(f->path, path, sizeof(f->path));
	copy_text(f->reason, reason, sizeof(f->reason));
	seq_write_end(&f->seq);
}

/* A new record for a handle of path; returns its number (1 for the
 * first). Caller holds seg_lock. */
static uint64_t add_file_record(struct stats_seg *s, const char *path,
                                gpufile_path_t chosen, int pending,
                                const char *reason)
{
	uint64_t n = ADD(s->files_opened, 1);

	write_file_record(&s->files[n % GPUFILE_MAX_FILE_STATS], path, chosen,
	                  pending, reason);
	/* Copied again only when a setting changed since: reading every
	 * setting was a tenth of the cost of a gpufile_open (perf, 2,048
	 * opens). The segment's creation copies them first. */
	if (snapshot_generation != gpufile__config_generation())
		snapshot_settings(s);
	return n + 1;
}

uint64_t gpufile__stats_file_open(const char *path)
{
	struct stats_seg *s = get_segment();
	uint64_t record;

	pthread_mutex_lock(&seg_lock);
	record = add_file_record(s, path, GPUFILE_PATH_HOST, 1,
	                         "opened; host memory is read and written in "
	                         "place (host); the device path is decided at "
	                         "the first device request");
	pthread_mutex_unlock(&seg_lock);
	return record;
}

/* The handle's record from gpufile_open() still waiting for its device
 * path, newest first: the same path opened twice gets its two decisions
 * in its two records. NULL when there is none. Caller holds seg_lock. */
static struct stats_seg_file *pending_record(struct stats_seg *s,
                                             const char *path)
{
	const uint64_t n = LOAD_FILES(s);
	const uint64_t first =
	    n > GPUFILE_MAX_FILE_STATS ? n - GPUFILE_MAX_FILE_STATS : 0;

	for (uint64_t i = n; i > first; i--) {
		struct stats_seg_file *f =
		    &s->files[(i - 1) % GPUFILE_MAX_FILE_STATS];
		if (f->pending && strcmp(f->path, path ? path : "") == 0)
			return f;
	}
	return NULL;
}

void gpufile__stats_file_set(uint64_t record, const char *path,
                             gpufile_path_t chosen, const char *reason)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_file *f = NULL;
	uint64_t n;

	pthread_mutex_lock(&seg_lock);
	n = LOAD_FILES(s);
	/* Still the handle's: not yet reused for a newer handle, and of
	 * this segment (a forked child's numbers start again). */
	if (record && record <= n && n - record < GPUFILE_MAX_FILE_STATS) {
		f = &s->files[(record - 1) % GPUFILE_MAX_FILE_STATS];
		if (strcmp(f->path, path ? path : "") != 0)
			f = NULL;
	}
	if (!f)
		f = pending_record(s, path);
	if (f)
		write_file_record(f, path, chosen, 0, reason);
	else
		add_file_record(s, path, chosen, 0, reason);
	pthread_mutex_unlock(&seg_lock);
}

void gpufile__stats_file(const char *path, gpufile_path_t chosen,
                         const char *reason)
{
	gpufile__stats_file_set(0, path, chosen, reason);
}

void gpufile__stats_file_note(const char *path, gpufile_path_t chosen,
                              const char *reason)
{
	struct stats_seg *s = get_segment();
	struct stats_seg_file *f;

	pthread_mutex_lock(&seg_lock);
	f = pending_record(s, path);
	if (f)
		write_file_record(f, path, chosen, 1, reason);
	pthread_mutex_unlock(&seg_lock);
}

/* ---- per-file counters ---- */

/* FNV-1a of the first len bytes of name. */
static uint32_t name_hash(const char *name, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 16777619u;
	return h;
}

/* Gives record f to the file shown as name (len bytes, whole_len in
 * all) under a new id, its counters from 0. Caller holds seg_lock; no
 * handle holds f, so nothing else writes it. */
static void give_record(struct stats_seg *s, struct stats_seg_file_counters *f,
                        const char *name, size_t len, size_t whole_len,
                        uint32_t hash, uint64_t now)
{
	seq_write_begin(&f->seq);
	atomic_store_explicit(&f->id, ADD(s->file_ids, 1) + 1,
	                      memory_order_relaxed);
	memcpy(f->name, name, len);
	memset(f->name + len, 0, sizeof(f->name) - len);
	f->name_len = whole_len > UINT32_MAX ? UINT32_MAX : (uint32_t)whole_len;
	f->hash = hash;
	atomic_store_explicit(&f->handles, 0, memory_order_relaxed);
	atomic_store_explicit(&f->last_used_ns, now, memory_order_relaxed);
	atomic_store_explicit(&f->requests_begun, 0, memory_order_relaxed);
	atomic_store_explicit(&f->tasks_begun, 0, memory_order_relaxed);
	atomic_store_explicit(&f->tasks_skipped, 0, memory_order_relaxed);
	atomic_store_explicit(&f->bytes_asked, 0, memory_order_relaxed);
	atomic_store_explicit(&f->bytes_settled, 0, memory_order_relaxed);
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		for (int d = 0; d < 2; d++) {
			struct stats_seg_file_counter *c = &f->path[p][d];

			atomic_store_explicit(&c->ops, 0, memory_order_relaxed);
			atomic_store_explicit(&c->tasks, 0,
			                      memory_order_relaxed);
			atomic_store_explicit(&c->bytes, 0,
			                      memory_order_relaxed);
			atomic_store_explicit(&c->errors, 0,
			                      memory_order_relaxed);
		}
	}
	seq_write_end(&f->seq);
}

/* The index of the record of the file shown as name (len bytes kept,
 * whole_len in all): its own, else a free one, else the least recently
 * used that no open handle holds (its counters dropped); -1 when every
 * record is held. Caller holds seg_lock. */
static int find_record(struct stats_seg *s, const char *name, size_t len,
                       size_t whole_len, uint64_t now)
{
	const uint32_t hash = name_hash(name, len);
	int victim = -1, free_one = -1;
	uint64_t oldest = UINT64_MAX;

	for (int i = 0; i < GPUFILE_MAX_FILE_COUNTERS; i++) {
		struct stats_seg_file_counters *f = &s->file_counters[i];
		uint64_t used;

		if (!atomic_load_explicit(&f->id, memory_order_relaxed)) {
			if (free_one < 0)
				free_one = i;
			continue;
		}
		if (f->hash == hash && memcmp(f->name, name, len) == 0 &&
		    (len == sizeof(f->name) - 1 || f->name[len] == '\0'))
			return i;
		used = atomic_load_explicit(&f->last_used_ns,
		                            memory_order_relaxed);
		if (!atomic_load_explicit(&f->handles, memory_order_relaxed) &&
		    used < oldest) {
			oldest = used;
			victim = i;
		}
	}
	if (free_one >= 0)
		victim = free_one;
	else if (victim >= 0)
		ADD(s->file_counters_dropped, 1);
	if (victim >= 0)
		give_record(s, &s->file_counters[victim], name, len, whole_len,
		            hash, now);
	return victim;
}

void gpufile__stats_file_hold(struct gpufile__stats_file_ref *ref,
                              const char *path)
{
	struct stats_seg *s = get_segment();
	/* The name kept is the name shown: a URL without its secrets
	 * (redact.c), never the raw one. */
	char *shown =
	    gpufile__is_url(path) ? gpufile__remote_redact(path) : NULL;
	const char *name = shown                   ? shown
	                   : gpufile__is_url(path) ? GPUFILE__URL_NOT_SHOWN
	                   : path                  ? path
	                                           : "";
	const size_t whole_len = strlen(name);
	const size_t len = whole_len < sizeof(s->file_counters[0].name) - 1
	                       ? whole_len
	                       : sizeof(s->file_counters[0].name) - 1;
	const uint64_t now = gpufile__now_ns();
	int i;

	ref->segment = 0;
	ref->index = 0;
	pthread_mutex_lock(&seg_lock);
	i = find_record(s, name, len, whole_len, now);
	if (i >= 0) {
		struct stats_seg_file_counters *f = &s->file_counters[i];

		ADD(f->handles, 1);
		atomic_store_explicit(&f->last_used_ns, now,
		                      memory_order_relaxed);
		ref->segment =
		    atomic_load_explicit(&seg_generation, memory_order_relaxed);
		ref->index = (uint32_t)i;
	} else {
		ADD(s->file_counters_untracked, 1);
	}
	pthread_mutex_unlock(&seg_lock);
	free(shown);
}

void gpufile__stats_file_release(struct gpufile__stats_file_ref *ref)
{
	struct stats_seg *s;
	struct stats_seg_file_counters *f;

	/* An inherited handle's record (a forked child) is the parent's:
	 * the child makes no segment for it. */
	if (!ref || !ref->segment ||
	    ref->segment !=
	        atomic_load_explicit(&seg_generation, memory_order_relaxed)) {
		if (ref)
			ref->segment = 0;
		return;
	}
	s = get_segment();
	pthread_mutex_lock(&seg_lock);
	f = file_record(s, ref);
	if (f && atomic_load_explicit(&f->handles, memory_order_relaxed) > 0) {
		ADD(f->handles, -1);
		atomic_store_explicit(&f->last_used_ns, gpufile__now_ns(),
		                      memory_order_relaxed);
	}
	pthread_mutex_unlock(&seg_lock);
	ref->segment = 0;
}

void gpufile__stats_file_request(const struct gpufile__stats_file_ref *file,
                                 gpufile_path_t path, int is_write,
                                 ssize_t result, uint64_t tasks)
{
	struct stats_seg *s;
	struct stats_seg_file_counters *f;
	struct stats_seg_file_counter *c;

	if (!file || !file->segment || (unsigned)path >= GPUFILE_PATH_COUNT)
		return;
	s = get_segment();
	f = file_record(s, file);
	if (!f)
		return;
	c = &f->path[path][is_write ? 1 : 0];
	/* Begun and ended at once: each gauge's two sides move alike. */
	atomic_store_explicit(&f->last_used_ns, gpufile__now_ns(),
	                      memory_order_relaxed);
	ADD(f->requests_begun, 1);
	ADD(f->tasks_begun, tasks);
	if (result > 0)
		ADD(f->bytes_asked, (uint64_t)result);
	ADD(c->tasks, tasks);
	if (result > 0)
		ADD(c->bytes, (uint64_t)result);
	if (result < 0)
		ADD(c->errors, 1);
	ADD(c->ops, 1);
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

void gpufile__stats_remote_in_flight(uint64_t n)
{
	struct stats_seg *s = get_segment();
	uint64_t seen = atomic_load_explicit(&s->remote.in_flight_max,
	                                     memory_order_relaxed);

	while (n > seen && !atomic_compare_exchange_weak_explicit(
	                       &s->remote.in_flight_max, &seen, n,
	                       memory_order_relaxed, memory_order_relaxed))
		;
}

#else /* GPUFILE_NO_STATS: counters compiled out */

void gpufile__stats_file_hold(struct gpufile__stats_file_ref *ref,
                              const char *path)
{
	(void)path;
	ref->segment = 0;
	ref->index = 0;
}

void gpufile__stats_file_release(struct gpufile__stats_file_ref *ref)
{
	(void)ref;
}

void gpufile__stats_file_request(const struct gpufile__stats_file_ref *file,
                                 gpufile_path_t path, int is_write,
                                 ssize_t result, uint64_t tasks)
{
	(void)file;
	(void)path;
	(void)is_write;
	(void)result;
	(void)tasks;
}

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

void gpufile__stats_request_begin(const struct gpufile__stats_file_ref *file,
                                  uint64_t ntasks, uint64_t size,
                                  uint64_t start_ns)
{
	(void)file;
	(void)ntasks;
	(void)size;
	(void)start_ns;
}

void gpufile__stats_task(const struct gpufile__stats_file_ref *file,
                         gpufile_path_t path, int is_write, uint64_t bytes)
{
	(void)file;
	(void)path;
	(void)is_write;
	(void)bytes;
}

void gpufile__stats_tasks_skipped(const struct gpufile__stats_file_ref *file,
                                  uint64_t ntasks)
{
	(void)file;
	(void)ntasks;
}

void gpufile__stats_request_end(const struct gpufile__stats_file_ref *file,
                                gpufile_path_t path, int is_write,
                                ssize_t result, size_t size, uint64_t moved,
                                uint64_t ns)
{
	(void)file;
	(void)path;
	(void)is_write;
	(void)result;
	(void)size;
	(void)moved;
	(void)ns;
}

int gpufile_stats_add_collective(uint64_t bytes_received, uint64_t bytes_sent)
{
	(void)bytes_received;
	(void)bytes_sent;
	return -ENOTSUP;
}

void gpufile__stats_direct_fallback(void)
{
}

void gpufile__stats_map_copy(uint64_t bytes, int faulted)
{
	(void)bytes;
	(void)faulted;
}

void gpufile__stats_file(const char *path, gpufile_path_t chosen,
                         const char *reason)
{
	(void)path;
	(void)chosen;
	(void)reason;
}

void gpufile__stats_file_set(uint64_t record, const char *path,
                             gpufile_path_t chosen, const char *reason)
{
	(void)record;
	(void)path;
	(void)chosen;
	(void)reason;
}

void gpufile__stats_file_note(const char *path, gpufile_path_t chosen,
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

void gpufile__stats_remote_in_flight(uint64_t n)
{
	(void)n;
}

uint64_t gpufile__stats_file_open(const char *path)
{
	(void)path;
	return 0;
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
	out->size = sizeof(*out);
	for (int i = -1; i < used_slots(s); i++) {
		const struct stats_seg_slot *slot =
		    i < 0 ? &s->shared : &s->slots[i];
		out->inflight_requests += LOAD(slot->inflight_requests);
		out->inflight_tasks += LOAD(slot->inflight_tasks);
		out->pending_bytes += LOAD(slot->pending_bytes);
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
	/* Sums of shares read at different instants: one below 0 is 0. */
	if ((int64_t)out->inflight_requests < 0)
		out->inflight_requests = 0;
	if ((int64_t)out->inflight_tasks < 0)
		out->inflight_tasks = 0;
	if ((int64_t)out->pending_bytes < 0)
		out->pending_bytes = 0;
	out->direct_io_fallbacks = LOAD(s->direct_io_fallbacks);
	out->map_copy_bytes = LOAD(s->map_copy_bytes);
	out->map_copy_faults = LOAD(s->map_copy_faults);
	out->collective_calls = LOAD(s->collective_calls);
	out->collective_bytes_received = LOAD(s->collective_bytes_received);
	out->collective_bytes_sent = LOAD(s->collective_bytes_sent);
	out->file_counters_dropped = LOAD(s->file_counters_dropped);
	out->file_counters_untracked = LOAD(s->file_counters_untracked);
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

/* The newest max handles, oldest first: walked from the newest back
 * (slots claimed but not yet written are skipped, so where the newest max
 * begin is known only on the way), then put in order. Walking forward
 * from the oldest kept slot returned the oldest max instead. */
static int copy_files(const struct stats_seg *s, void *dst, int max)
{
	gpufile_file_stat_t *out = dst;
	uint64_t n = LOAD(s->files_opened);
	uint64_t first =
	    n > GPUFILE_MAX_FILE_STATS ? n - GPUFILE_MAX_FILE_STATS : 0;
	int copied = 0;

	for (uint64_t i = n; i > first && copied < max; i--) {
		const struct stats_seg_file *f =
		    &s->files[(i - 1) % GPUFILE_MAX_FILE_STATS];
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
	for (int a = 0, b = copied - 1; a < b; a++, b--) {
		gpufile_file_stat_t t = out[a];

		out[a] = out[b];
		out[b] = t;
	}
	return copied;
}

/* The gauge begun - ended (counters read at different instants: one
 * below 0 is 0). */
static uint64_t gauge(uint64_t begun, uint64_t ended)
{
	return begun > ended ? begun - ended : 0;
}

/* Copies record f into out. Returns 1, or 0 when it is free or was
 * being given to another file all along. The counters that end a gauge
 * are read before those that begin it, so that a read between a task's
 * end and its request's shows too much in flight rather than too
 * little. */
static int read_file_record(const struct stats_seg_file_counters *f,
                            gpufile_file_counters_t *out)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint32_t a =
		    atomic_load_explicit(&f->seq, memory_order_acquire);
		uint64_t ops = 0, tasks = 0, bytes = 0, skipped, settled;

		if (a & 1) {
			sched_yield();
			continue;
		}
		memset(out, 0, sizeof(*out));
		out->id = LOAD(f->id);
		if (!out->id)
			return 0;
		memcpy(out->name, f->name, sizeof(out->name));
		out->name_len = f->name_len;
		out->handles = (uint32_t)LOAD(f->handles);
		out->last_used_ns = LOAD(f->last_used_ns);
		for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
			for (int d = 0; d < 2; d++) {
				const struct stats_seg_file_counter *c =
				    &f->path[p][d];
				gpufile_counter_t *o = &out->path[p][d];

				o->ops = LOAD(c->ops);
				o->tasks = LOAD(c->tasks);
				o->bytes = LOAD(c->bytes);
				o->errors = LOAD(c->errors);
				ops += o->ops;
				tasks += o->tasks;
				bytes += o->bytes;
			}
		}
		skipped = LOAD(f->tasks_skipped);
		settled = LOAD(f->bytes_settled);
		out->inflight_requests = gauge(LOAD(f->requests_begun), ops);
		out->inflight_tasks =
		    gauge(LOAD(f->tasks_begun), tasks + skipped);
		out->pending_bytes =
		    gauge(LOAD(f->bytes_asked), bytes + settled);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&f->seq, memory_order_relaxed) != a)
			continue;
		out->name[sizeof(out->name) - 1] = '\0';
		return 1;
	}
	return 0;
}

static int newer_first(const void *a, const void *b)
{
	const gpufile_file_counters_t *x = a, *y = b;

	if (x->last_used_ns != y->last_used_ns)
		return x->last_used_ns > y->last_used_ns ? -1 : 1;
	return x->id > y->id ? -1 : x->id < y->id;
}

/* The files with a record, the most recently used first, up to max into
 * out. Returns how many have a record, or -ENOMEM. */
static int copy_file_counters(const struct stats_seg *s, void *dst, int max)
{
	gpufile_file_counters_t *out = dst;
	gpufile_file_counters_t *all =
	    malloc(sizeof(*all) * GPUFILE_MAX_FILE_COUNTERS);
	int n = 0;

	if (!all)
		return gpufile__fail(
		    -ENOMEM,
		    "gpufile_stats_file_counters: no memory for "
		    "%zu bytes",
		    sizeof(*all) * GPUFILE_MAX_FILE_COUNTERS);
	for (int i = 0; i < GPUFILE_MAX_FILE_COUNTERS; i++)
		n += read_file_record(&s->file_counters[i], &all[n]);
	qsort(all, (size_t)n, sizeof(*all), newer_first);
	if (max > 0)
		memcpy(out, all, sizeof(*all) * (size_t)(n < max ? n : max));
	free(all);
	return n;
}

/* A segment mapped for reading. */
struct view {
	const struct stats_seg *s; /* NULL: this process, before any I/O */
	void *map; /* to unmap, or NULL for this process's own */
	int self;
};

/* Owner of process pid (from /proc/PID), or -errno. */
static int proc_owner(int pid, uid_t *uid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &st) < 0)
		return -errno;
	*uid = st.st_uid;
	return 0;
}

/* Whether fd (st its fstat) is a segment its writer is still creating
 * (create_shared(), create_segment()): its mode is still the kernel's
 * (not 0600) or it is sealed, and its magic is not stored yet (0, or
 * the file is shorter than the header). A forged or broken segment
 * with its magic stored, or one of mode 0600 that is not sealed (which
 * a writer never leaves visible), is not: the checks refuse it. Read
 * with pread, not mmap: an unsealed file may shrink under us. */
static int segment_building(int fd, const struct stat *st)
{
	uint64_t magic = 0;
	int seals = fcntl(fd, F_GET_SEALS);
	ssize_t n;

	if ((st->st_mode & 07777) == 0600 &&
	    (seals < 0 || !(seals & F_SEAL_SHRINK)))
		return 0;
	n = pread(fd, &magic, sizeof(magic),
	          (off_t)offsetof(struct stats_seg, magic));
	return n == 0 || (n == (ssize_t)sizeof(magic) && magic == 0);
}

/* Checks that fd is a segment of uid (mode, owner, seals, size), maps it
 * and checks its header. label names it in messages. Returns 0, -EAGAIN
 * for a segment still being created (segment_building()), or -EPROTO /
 * -errno, with the message set. */
static int map_segment_fd(int fd, const char *label, uid_t uid, struct view *v)
{
	const struct stats_seg *s;
	struct stat st;
	int seals;
	void *m;

	if (fstat(fd, &st) < 0)
		return gpufile__fail(-errno, "%s: %s", label, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return gpufile__fail(-EPROTO, "%s is not a regular file",
		                     label);
	if (st.st_uid == uid && segment_building(fd, &st))
		return gpufile__fail(-EAGAIN,
		                     "%s: a gpufile segment its process is "
		                     "still creating (no magic yet)",
		                     label);
	if (st.st_uid != uid || (st.st_mode & 077))
		return gpufile__fail(
		    -EPROTO,
		    "%s: owner %u mode %04o; a gpufile segment "
		    "belongs to uid %u with mode 0600",
		    label, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
		    (unsigned)uid);
	/* Without the seal its writer could shrink it while we read, and
	 * our next load would die of SIGBUS. A seal, once set, stays. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return gpufile__fail(-EPROTO,
		                     "%s is not sealed against shrinking "
		                     "(F_SEAL_SHRINK): refused, a reader could "
		                     "be killed by its truncation",
		                     label);
	if ((uint64_t)st.st_size != sizeof(struct stats_seg))
		return gpufile__fail(
		    -EPROTO,
		    "%s: %lld bytes, expected %zu (a different "
		    "version of gpufile wrote it?)",
		    label, (long long)st.st_size, sizeof(struct stats_seg));
	m = mmap(NULL, sizeof(struct stats_seg), PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return gpufile__fail(-errno, "mapping %s: %s", label,
		                     strerror(errno));
	s = m;
	if (atomic_load_explicit(&s->magic, memory_order_acquire) !=
	        STATS_SEG_MAGIC ||
	    s->version != STATS_SEG_VERSION ||
	    s->size != sizeof(struct stats_seg) || s->uid != uid) {
		munmap(m, sizeof(struct stats_seg));
		return gpufile__fail(-EPROTO,
		                     "%s: not a gpufile segment of layout "
		                     "version %u",
		                     label, STATS_SEG_VERSION);
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
	v->map = NULL;
	v->s = NULL;
}

/* Finds process pid's segment among its descriptors and maps it (owner
 * uid). Returns 0; -ENOENT when it has none; -EAGAIN (no message) when
 * its one is still being created; -EACCES when its descriptors cannot be
 * listed; or the error of the last candidate refused. */
static int find_segment(int pid, uid_t uid, struct view *v)
{
	static const char want[] = "/memfd:" STATS_MEMFD_NAME " (deleted)";
	static const char priv[] = "/memfd:" STATS_PRIVATE_PREFIX;
	char dir[64], label[64 + 256], link[512], why[256] = "";
	struct dirent *e;
	int rc = -ENOENT, building = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	d = opendir(dir);
	if (!d) {
		int err = errno;
		if (err == ENOENT)
			return gpufile__fail(-ESRCH, "no process with PID %d",
			                     pid);
		return gpufile__fail(-err,
		                     "PID %d: cannot list %s: %s (a process "
		                     "of another user, or one that is not "
		                     "dumpable, e.g. setuid)",
		                     pid, dir, strerror(err));
	}
	while ((e = readdir(d))) {
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		n = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
		if (n > 0 && strncmp(link, priv, strlen(priv)) == 0) {
			/* Text of another process: printable ASCII only. */
			size_t k = 0;
			for (ssize_t i = (ssize_t)strlen(priv);
			     i < n && k + 1 < sizeof(why); i++) {
				unsigned char c = (unsigned char)link[i];
				why[k++] =
				    c >= 0x20 && c < 0x7f ? (char)c : '?';
			}
			why[k] = '\0';
			if (k > 10 && !strcmp(why + k - 10, " (deleted)"))
				why[k - 10] = '\0';
			continue;
		}
		if (n != (ssize_t)strlen(want) || memcmp(link, want, (size_t)n))
			continue;
		/* The descriptor may have been replaced since readlink:
		 * O_NONBLOCK so that a FIFO cannot hang us, O_NOCTTY so that
		 * a terminal cannot become ours. */
		fd = openat(dirfd(d), e->d_name,
		            O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
		if (fd < 0)
			continue; /* closed meanwhile */
		snprintf(label, sizeof(label), "%s/%s", dir, e->d_name);
		rc = map_segment_fd(fd, label, uid, v);
		close(fd);
		if (rc == -EAGAIN) {
			building = 1;
			rc = -ENOENT;
			continue;
		}
		if (rc == 0 && v->s->pid != pid) {
			/* Inherited from a parent through a fork that
			 * bypassed pthread_atfork (a raw clone). */
			rc = gpufile__fail(-EPROTO,
			                   "%s: the segment of PID %d, not of "
			                   "PID %d",
			                   label, (int)v->s->pid, pid);
			release_view(v);
		}
		if (rc == 0)
			break;
	}
	closedir(d);
	if (rc == -ENOENT && building) {
		gpufile__clear_error();
		return -EAGAIN;
	}
	if (rc == -ENOENT && why[0])
		return gpufile__fail(
		    -ENOENT,
		    "PID %d counts in private memory, invisible "
		    "to other processes: %s",
		    pid, why);
	if (rc == -ENOENT)
		gpufile__clear_error(); /* none: the caller tells why */
	return rc;
}

/* What /proc/PID/maps shows of gpufile: the library, and a segment. */
enum { MAPS_LIBRARY = 1, MAPS_SEGMENT = 2 };

/* The MAPS_* that process pid maps: a library named libgpufile (loaded),
 * and a stats segment, mapped also after its descriptor was closed. */
__attribute__((unused)) static int maps_gpufile(int pid)
{
	static const char segment[] = "/memfd:" STATS_MEMFD_NAME " (deleted)";
	char path[64], line[512];
	FILE *f;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (found != (MAPS_LIBRARY | MAPS_SEGMENT) &&
	       fgets(line, sizeof(line), f)) {
		const char *slash = strrchr(line, '/');

		if (slash && strncmp(slash, "/libgpufile", 11) == 0)
			found |= MAPS_LIBRARY;
		if (strstr(line, segment))
			found |= MAPS_SEGMENT;
	}
	fclose(f);
	return found;
}

/* Old-style segment left in /dev/shm by a gpufile before layout 3. */
__attribute__((unused)) static void old_segment_path(unsigned uid, int pid,
                                                     char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%u-%d", STATS_SEG_DIR, STATS_SEG_PREFIX, uid,
	         pid);
}

int gpufile_stats_segment_path(int pid, char *buf, size_t len)
{
	int n;

	if (!buf)
		return gpufile__fail(-EINVAL,
		                     "gpufile_stats_segment_path: buf is NULL");
	n = snprintf(buf, len, "/proc/%d/fd (memfd %s)",
	             pid > 0 ? pid : (int)getpid(), STATS_MEMFD_NAME);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Fills v with the zero counters of a process that has no segment (yet):
 * pid, uid, command, no cuFile layer. */
static void no_counters(int pid, uid_t uid, gpufile_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	out->size = sizeof(*out);
	out->pid = (int32_t)pid;
	out->uid = (uint32_t)uid;
	out->cufile_ngpus = -1;
	proc_command(pid, out->command, sizeof(out->command));
}

/* Opens process pid's segment. Returns 0 with v->s set; 1 when the
 * process loads gpufile but has no segment yet, or one still being
 * created (no I/O counted yet: v->s NULL);
 * or an error with the message set. */
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
	rc = proc_owner(pid, &uid);
	if (rc == -ENOENT || (kill(pid, 0) < 0 && errno == ESRCH)) {
		old_segment_path((unsigned)getuid(), pid, name, sizeof(name));
		if (access(name, F_OK) == 0)
			return gpufile__fail(
			    -ESTALE,
			    "no process with PID %d; %s was left by an "
			    "older gpufile (gpufile stats --clean removes it)",
			    pid, name);
		return gpufile__fail(-ESRCH, "no process with PID %d", pid);
	}
	if (rc)
		return gpufile__fail(rc, "PID %d: %s", pid, strerror(-rc));
	if (uid != getuid() && getuid() != 0)
		return gpufile__fail(-EACCES,
		                     "PID %d belongs to another user (uid %u); "
		                     "only its owner can read its counters",
		                     pid, (unsigned)uid);
	proc_command(pid, comm, sizeof(comm));
	rc = find_segment(pid, uid, v);
	if (rc == -EAGAIN) {
		/* Being created by its first I/O: nothing counted yet. */
		return 1;
	}
	if (rc == -ENOENT && !gpufile_errmsg()[0]) {
		int maps = maps_gpufile(pid);

		/* No descriptor, but the segment is mapped: the process made
		 * it (so it did I/O) and then closed its descriptor, as a
		 * daemon closing every descriptor after startup does. Its
		 * counters still count but are out of reach: that is not
		 * "no I/O yet". */
		if (maps & MAPS_SEGMENT)
			return gpufile__fail(
			    -EBADF,
			    "PID %d (%s) has closed the descriptor of its "
			    "counters (memfd %s, still mapped in "
			    "/proc/%d/maps): "
			    "other processes cannot reach them; "
			    "gpufile_stats_self() in that process still can",
			    pid, comm, STATS_MEMFD_NAME, pid);
		if (maps & MAPS_LIBRARY) {
			gpufile__clear_error();
			return 1;
		}
		return gpufile__fail(-ENOENT,
		                     "PID %d (%s) does not use gpufile: no "
		                     "memfd %s among its descriptors and no "
		                     "libgpufile mapped",
		                     pid, comm, STATS_MEMFD_NAME);
	}
	return rc;
#endif
}

/* gpufile_stats_read() into the library's own struct out. */
static int stats_read(int pid, gpufile_stats_t *out)
{
	struct view v;
	int rc;

	rc = open_view(pid, &v);
	if (rc < 0) {
		memset(out, 0, sizeof(*out));
		return rc;
	}
	if (rc == 1) {
		uid_t uid = 0;
		proc_owner(pid, &uid);
		no_counters(pid, uid, out);
		return 0;
	}
	if (v.s)
		snapshot(v.s, out);
	else
		no_counters((int)getpid(), getuid(), out);
	release_view(&v);
	return 0;
}

/* Validates out, fills it through stats_read() (self: counters compiled
 * out read as zeros) and hands it out by the size rule. */
static int stats_out(const char *fn, int pid, int self, gpufile_stats_t *out)
{
	gpufile_stats_t *local;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "%s: out is NULL", fn);
	/* Its first version ended before map_copy_bytes. */
	rc = gpufile__sized_check(
	    out, offsetof(gpufile_stats_t, map_copy_bytes), "gpufile_stats_t");
	if (rc)
		return rc;
	/* About 15 KiB: not on the stack of a caller's (maybe small)
	 * thread. */
	local = malloc(sizeof(*local));
	if (!local)
		return gpufile__fail(-ENOMEM, "%s: no memory for %zu bytes", fn,
		                     sizeof(*local));
	rc = stats_read(pid, local);
	if (rc && self) {
		no_counters((int)getpid(), getuid(), local);
		gpufile__clear_error();
		rc = 0;
	}
	gpufile__sized_put(out, local, sizeof(*local));
	free(local);
	return rc;
}

int gpufile_stats_read(int pid, gpufile_stats_t *out)
{
	return stats_out("gpufile_stats_read", pid, 0, out);
}

int gpufile_stats_self(gpufile_stats_t *out)
{
	return stats_out("gpufile_stats_self", 0, 1, out);
}

/* The records of process pid that copy() takes from its segment, newest
 * last or first as copy() orders them; 0 for a process with none yet. */
static int stats_records(const char *fn, int pid, void *out, int max,
                         int (*copy)(const struct stats_seg *, void *, int))
{
	struct view v;
	int rc;

	if (!out && max > 0)
		return gpufile__fail(-EINVAL, "%s: out is NULL and max is %d",
		                     fn, max);
	rc = open_view(pid, &v);
	if (rc < 0)
		return rc;
	if (rc == 1)
		return 0;
	rc = v.s ? copy(v.s, out, max) : 0;
	release_view(&v);
	return rc;
}

int gpufile_stats_files(int pid, gpufile_file_stat_t *out, int max)
{
	return stats_records("gpufile_stats_files", pid, out, max, copy_files);
}

int gpufile_stats_file_counters(int pid, gpufile_file_counters_t *out, int max)
{
	return stats_records("gpufile_stats_file_counters", pid, out, max,
	                     copy_file_counters);
}

int gpufile_stats_remote(int pid, gpufile_remote_stats_t *out)
{
	gpufile_remote_stats_t local;
	struct view v;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_stats_remote: out is "
		                              "NULL");
	rc = GPUFILE__SIZED_CHECK(out, gpufile_remote_stats_t);
	if (rc)
		return rc;
	memset(&local, 0, sizeof(local));
	rc = open_view(pid, &v);
	if (rc == 0) {
		if (v.s) {
			const struct stats_seg_remote *r = &v.s->remote;

			local.requests = LOAD(r->requests);
			local.ranges = LOAD(r->ranges);
			local.bytes = LOAD(r->bytes);
			local.retries = LOAD(r->retries);
			local.failures = LOAD(r->failures);
			local.connects = LOAD(r->connects);
			local.in_flight_max = LOAD(r->in_flight_max);
			for (int i = 0; i < GPUFILE_REMOTE_STATUS_CLASSES; i++)
				local.status[i] = LOAD(r->status[i]);
		}
		release_view(&v);
	} else if (rc == 1) {
		rc = 0; /* counting privately: nothing to read */
	}
	gpufile__sized_put(out, &local, sizeof(local));
	return rc;
}

int gpufile_stats_backing(char *buf, size_t len)
{
	if (!buf || !len)
		return gpufile__fail(-EINVAL, "gpufile_stats_backing: buf is "
		                              "NULL or len is 0");
#ifdef GPUFILE_NO_STATS
	snprintf(buf, len, "none: gpufile was built with GPUFILE_NO_STATS");
	return 0;
#else
	{
		const struct stats_seg *s = get_segment();
		int shared;

		pthread_mutex_lock(&seg_lock);
		snprintf(buf, len, "%s", s->backing);
		shared = s == seg_map;
		pthread_mutex_unlock(&seg_lock);
		return shared;
	}
#endif
}

int gpufile__stats_read_fd(int fd, unsigned uid, gpufile_stats_t *out,
                           gpufile_file_stat_t *files, int max)
{
	struct view v;
	char label[32];
	int rc;

	memset(&v, 0, sizeof(v));
	snprintf(label, sizeof(label), "descriptor %d", fd);
	rc = map_segment_fd(fd, label, (uid_t)uid, &v);
	if (rc)
		return rc;
	snapshot(v.s, out);
	rc = files && max > 0 ? copy_files(v.s, files, max) : 0;
	release_view(&v);
	return rc;
}

/* Parses "gpufile-UID-PID". Returns 0 when name is an old segment's. */
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

/* Calls fn for each old-style segment in /dev/shm of this user (every
 * user's for root) whose process is gone. A live PID's file is left
 * alone: it may be the live segment of an older gpufile. */
static int each_old_segment(int (*fn)(const char *path, int pid, void *arg),
                            void *arg)
{
	DIR *d = opendir(STATS_SEG_DIR);
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0; /* no /dev/shm: nothing left there */
	while ((e = readdir(d))) {
		char path[384];
		unsigned uid;
		int pid;

		if (parse_name(e->d_name, &uid, &pid) ||
		    (uid != getuid() && getuid() != 0) ||
		    !(kill(pid, 0) < 0 && errno == ESRCH))
			continue;
		snprintf(path, sizeof(path), "%s/%s", STATS_SEG_DIR, e->d_name);
		n += fn(path, pid, arg);
	}
	closedir(d);
	return n;
}

struct list_arg {
	gpufile_process_t *out;
	int max, n;
};

static void list_add(struct list_arg *a, const gpufile_process_t *p)
{
	if (a->n < a->max && a->out)
		a->out[a->n] = *p;
	a->n++;
}

static int list_old(const char *path, int pid, void *arg)
{
	gpufile_process_t p;

	(void)path;
	memset(&p, 0, sizeof(p));
	p.pid = pid;
	p.stale = 1;
	copy_text(p.command, "(left by an older gpufile)", sizeof(p.command));
	list_add(arg, &p);
	return 1;
}

int gpufile_stats_list(gpufile_process_t *out, int max)
{
	struct list_arg a = {out, max, 0};
	struct dirent *e;
	DIR *d;

	if (!out && max > 0)
		return gpufile__fail(-EINVAL,
		                     "gpufile_stats_list: out is NULL and max "
		                     "is %d",
		                     max);
	d = opendir("/proc");
	if (!d)
		return gpufile__fail(-errno, "opening /proc: %s",
		                     strerror(errno));
	while ((e = readdir(d))) {
		gpufile_process_t p;
		struct view v;
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		uid_t uid = 0;

		if (*end || pid <= 0 || pid > 0x7fffffff ||
		    proc_owner((int)pid, &uid) ||
		    (uid != getuid() && getuid() != 0))
			continue;
		memset(&v, 0, sizeof(v));
		if (pid == getpid()) {
#ifndef GPUFILE_NO_STATS
			pthread_mutex_lock(&seg_lock);
			v.s = atomic_load_explicit(&seg, memory_order_acquire);
			v.self = 1;
			if (v.s != seg_map)
				v.s = NULL; /* private: not listed */
#endif
		} else if (find_segment((int)pid, uid, &v)) {
			continue;
		}
		if (v.s) {
			memset(&p, 0, sizeof(p));
			p.pid = (int32_t)pid;
			copy_text(p.command, v.s->command, sizeof(p.command));
			p.bytes = total_bytes(v.s);
			list_add(&a, &p);
		}
		release_view(&v);
	}
	closedir(d);
	gpufile__clear_error();
	each_old_segment(list_old, &a);
	return a.n;
}

static int clean_one(const char *path, int pid, void *arg)
{
	struct stat st;

	(void)pid;
	(void)arg;
	if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != getuid())
		return 0;
	return unlink(path) == 0;
}

int gpufile_stats_clean(void)
{
	return each_old_segment(clean_one, NULL);
}
