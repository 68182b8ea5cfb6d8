/*
 * The layout of a process's statistics segment: an unlinked memfd named
 * STATS_MEMFD_NAME, held open by the process and sealed against shrinking
 * and growing, shared by the writer (the process itself) and readers
 * (gpufile stats in another process, through /proc/PID/fd/N). It dies
 * with the last descriptor and mapping: nothing outlives the process.
 * Any change to this layout bumps STATS_SEG_VERSION;
 * a reader refuses a segment whose magic, version or size differ from its
 * own, so that two versions of the library never misread each other.
 *
 * Counters are lock-free 64-bit atomics updated with relaxed ordering:
 * a reader sees each counter as some value it had, not a snapshot of all
 * counters at one instant. Text (file records, settings, the cuFile
 * layer) is written under a sequence number (odd while being written); a
 * reader copies it and retries when the number changed meanwhile.
 */
#ifndef GPUFILE_STATS_SEGMENT_H
#define GPUFILE_STATS_SEGMENT_H

#include "gpufile.h"

#include <stdatomic.h>
#include <stdint.h>

#define STATS_SEG_MAGIC 0x5441545346555047ull /* "GPUFSTAT" little-endian */
#define STATS_SEG_VERSION                                                      \
	6u /* 3: the memfd segment, the mmap path;                             \
	    4: remote counters;                                                \
	    5: copies from file maps;                                          \
	    6: per-task crediting, in-flight gauges, collectives,              \
	       remote ranges in flight;                                        \
	    7: per-file counters */
/* The memfd's name; readlink of /proc/PID/fd/N gives
 * "/memfd:gpufile-stats (deleted)". */
#define STATS_MEMFD_NAME "gpufile-stats"
/* A process counting privately holds an empty memfd named this prefix
 * and why (no segment to read; the name is the message). */
#define STATS_PRIVATE_PREFIX   "gpufile-stats-private: "
#define STATS_PRIVATE_NAME_MAX 240 /* memfd names: 249 bytes at most */
/* Segments of gpufile before version 3 were files named
 * /dev/shm/gpufile-UID-PID, left behind by killed processes; only
 * gpufile stats --clean still looks there. */
#define STATS_SEG_PREFIX "gpufile-"
#define STATS_SEG_DIR    "/dev/shm"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "shared counters need lock-free 64-bit atomics");

struct stats_seg_counter {
	_Atomic uint64_t ops, tasks, bytes, errors;
	_Atomic uint64_t latency[GPUFILE_HIST_BUCKETS];
	_Atomic uint64_t size[GPUFILE_HIST_BUCKETS];
};

/* The request counters of one thread. A slot has one writer at a time
 * (the thread that owns it), which adds with a relaxed load and store:
 * no locked instruction, so counting costs a few nanoseconds. A thread
 * that exits gives its slot, counts included, to the next thread.
 * Threads beyond STATS_SEG_SLOTS share the segment's "shared" slot,
 * updated with atomic read-modify-write. Readers sum the slots. */
#define STATS_SEG_SLOTS 64
struct stats_seg_slot {
	struct stats_seg_counter path[GPUFILE_PATH_COUNT][2];
	/* What is in flight (pool.c's requests), as this thread changed it:
	 * requests started and not ended, their tasks not ended, their bytes
	 * not moved. A request starts in one thread and its tasks end in
	 * others, so a slot's share may be "negative" (it wraps); readers
	 * sum the slots modulo 2^64 and read a sum below 0 (slots read at
	 * different instants) as 0. No locked instruction, as for the
	 * counters above. */
	_Atomic uint64_t inflight_requests, inflight_tasks, pending_bytes;
};

struct stats_seg_file {
	_Atomic uint32_t seq; /* odd while being written */
	int32_t chosen;       /* gpufile_path_t */
	int32_t pending;      /* 1: opened, device path not decided yet */
	char path[256];
	char reason[256];
};

/* The counters of one file (gpufile_file_counters_t), in a table of
 * GPUFILE_MAX_FILE_COUNTERS records. A record is given to a file (its
 * shown name) by its first handle, under seg_lock, and held while any
 * handle of it is open (handles); a file opened when every record is
 * taken gets the one of the closed file used least recently
 * (last_used_ns), whose counters start again under a new id. Every
 * thread that moves bytes of the file adds to its record with atomic
 * read-modify-writes (several threads share it, unlike a slot), a few
 * per task. The gauges are differences of counters that only grow
 * (requests begun less ops ended, tasks begun less tasks ended and
 * skipped, bytes asked less bytes moved and settled), so that a task
 * adds two counters and no gauge. */
struct stats_seg_file_counter {
	_Atomic uint64_t ops, tasks, bytes, errors;
};
struct stats_seg_file_counters {
	/* seq guards id and the name (odd while written, under seg_lock);
	 * the counters are set to 0 inside that window when the record is
	 * given to another file. */
	_Atomic uint32_t seq;
	uint32_t name_len;       /* the shown name's whole length */
	_Atomic uint64_t id;     /* 0: a free record */
	uint32_t hash;           /* of the name (writer's quick compare) */
	_Atomic int32_t handles; /* open handles (changed under seg_lock) */
	char name[256];
	_Atomic uint64_t last_used_ns;
	_Atomic uint64_t requests_begun, tasks_begun, tasks_skipped;
	_Atomic uint64_t bytes_asked, bytes_settled; /* settled: never moved */
	struct stats_seg_file_counter path[GPUFILE_PATH_COUNT][2];
};

struct stats_seg {
	/* Header: written once before magic is stored (release). */
	_Atomic uint64_t magic;
	uint32_t version;
	uint32_t size; /* sizeof(struct stats_seg) */
	int32_t pid;
	uint32_t uid;
	uint64_t proc_start; /* /proc/PID/stat starttime, to tell PID reuse */
	uint64_t start_time_ns;
	char command[64];
	/* "shared: ..." or, in a private segment, "private: " and why the
	 * shared one could not be made. */
	char backing[192];

	_Atomic uint32_t nslots; /* slots handed out so far */
	_Atomic uint64_t direct_io_fallbacks;
	/* Host-path bytes copied from a map of the file (host_map_copy,
	 * gathered reads), and guarded copies a SIGBUS cut short. */
	_Atomic uint64_t map_copy_bytes, map_copy_faults;

	_Atomic uint64_t files_opened; /* slot of file n: n % MAX_FILE_STATS */
	struct stats_seg_file files[GPUFILE_MAX_FILE_STATS];

	_Atomic uint32_t cufile_seq;
	struct stats_seg_cufile {
		int32_t ngpus; /* -1: never reported */
		gpufile_cufile_gpu_t gpu[GPUFILE_MAX_GPUS];
	} cufile;

	_Atomic uint32_t settings_seq;
	struct stats_seg_settings {
		int32_t n;
		gpufile_setting_value_t v[GPUFILE_MAX_SETTINGS];
	} settings;

	/* Remote sources (remote.c): gpufile_remote_stats_t, as atomics. */
	struct stats_seg_remote {
		_Atomic uint64_t requests, ranges, bytes, retries, failures;
		_Atomic uint64_t connects;
		_Atomic uint64_t status[GPUFILE_REMOTE_STATUS_CLASSES];
		_Atomic uint64_t in_flight_max; /* the most at once */
	} remote;

	/* Bytes that torch.distributed collectives delivered to and sent
	 * from this process, and the collective calls
	 * (gpufile_stats_add_collective). */
	_Atomic uint64_t collective_calls, collective_bytes_received,
	    collective_bytes_sent;

	/* Per-file counters; records dropped for another file, and files
	 * that found every record held (see above). */
	_Atomic uint64_t file_ids; /* the last id given */
	_Atomic uint64_t file_counters_dropped, file_counters_untracked;
	struct stats_seg_file_counters file_counters[GPUFILE_MAX_FILE_COUNTERS];

	struct stats_seg_slot shared;
	struct stats_seg_slot slots[STATS_SEG_SLOTS];
};

#endif
