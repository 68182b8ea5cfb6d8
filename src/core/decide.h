/*
 * The path decision (decide.c): facts in, (path, reason) out. See the
 * head of decide.c for the two rounds (cheap facts, then cuFile's).
 */
#ifndef GPUFILE_DECIDE_H
#define GPUFILE_DECIDE_H

#include "core/core.h"

#include <stdatomic.h>
#include <stdint.h>

enum {
	GPUFILE__SOURCE_FILE = 0,
	GPUFILE__SOURCE_MMAP = 1,
	GPUFILE__SOURCE_REMOTE = 2, /* an http(s):// or s3:// object */
	/* one whose server ignores Range: each read streams the body */
	GPUFILE__SOURCE_REMOTE_STREAM = 3,
};

struct gpufile__facts {
	const struct gpufile__settings *cfg;
	int source;         /* GPUFILE__SOURCE_* */
	gpufile_mem_t kind; /* the request's buffer */
	size_t size;        /* the request's bytes */
	/* Cheap platform facts (gpufile__platform_facts): no cuFile call. */
	int nvfs_loaded;     /* the nvidia-fs kernel module */
	int p2pdma_possible; /* PCI P2PDMA not ruled out for the file */
	char nvfs_why[96], p2pdma_why[128];
	/* CUFILE_FORCE_COMPAT_MODE's value where it is true (cuFile then uses
	 * only its compatibility path, whatever the platform), else NULL
	 * (gpufile__cufile_forced_compat). */
	const char *cufile_forced;
	/* The CPU's streaming stores for host reads (platform/cpu.c):
	 * GPUFILE__STREAM_*. */
	int stream_copy;
	/* The CPUs this process may run on (gpufile__usable_cpus). */
	int cpus;
	/* 1: the kernel does not tell this process which pages of the file
	 * are cached (gpufile__mincore_tells), so warm host reads cannot be
	 * told from cold ones and are not copied from the map. */
	int cache_hidden;
	/* cuFile's facts, only once the first round asked for them. */
	int cufile_known;       /* the fields below are filled */
	int cufile_registered;  /* driver open and the file registered */
	int cufile_error;       /* error a compat_mode=off request gets */
	int cufile_p2pdma;      /* driver properties report PCI P2PDMA */
	const char *cufile_why; /* why the file is not registered */
};

struct gpufile__decision {
	gpufile_path_t path;
	int need_cufile; /* fill the cuFile facts and decide again */
	int error;       /* 0, or the error the request fails with */
	char reason[512];
};

/* The path of a request with facts f. Pure: no I/O, no locks. The table
 * it implements, first rule that applies:
 *   source remote                        remote
 *   source mmap                          mmap
 *   host or pinned buffer                host
 *   size < gds_threshold                 small
 *   managed buffer                       off: cufile + error (cuFile
 *                                        refuses it); else posix
 *   compat_mode=on                       posix
 *   auto, cufile_accel_only, neither nvidia-fs nor P2PDMA possible,
 *   or CUFILE_FORCE_COMPAT_MODE true     posix, cuFile never loaded
 *   cuFile facts unknown                 need_cufile
 *   file not registered                  off: cufile + error; auto: posix
 *   off                                  cufile
 *   auto, accel_only, no nvfs, cuFile reports no P2PDMA   posix
 *   otherwise                            cufile */
void gpufile__decide(const struct gpufile__facts *f,
                     struct gpufile__decision *d);

/* Whether a cuFile environment value says true (true, 1, yes, on; any
 * case), as gpufile check reads them. */
int gpufile__env_true(const char *v);
/* CUFILE_FORCE_COMPAT_MODE's value where it says true, else NULL. */
const char *gpufile__cufile_forced_compat(void);

/* gpufile__decide() for a source whose path its kind alone settles (mmap,
 * remote: the table's first rules), for every buffer and setting. */
void gpufile__decide_source(int source, struct gpufile__decision *d);

/* Where the cheap facts come from; tests replace the entries to play a
 * machine with nvidia-fs or P2PDMA. Each writes its evidence into why. */
struct gpufile__platform_ops {
	int (*nvfs_loaded)(char *why, size_t len);
	/* dev: the block device holding the file. */
	int (*p2pdma_possible)(dev_t dev, char *why, size_t len);
};
extern struct gpufile__platform_ops gpufile__platform;
void gpufile__platform_reset(void);
/* The real readers' answers are kept this long (decide.c; tests change
 * it), and gpufile__facts_read counts their readings. */
extern _Atomic uint64_t gpufile__facts_ttl_ns;
extern atomic_ulong gpufile__facts_read;
/* fork(): facts_lock held across it (api/fork.c). */
void gpufile__facts_atfork_prepare(void);
void gpufile__facts_atfork_parent(void);
void gpufile__facts_atfork_child(void);

/* Fills f's cheap platform facts for a file of status st (NULL: no file,
 * P2PDMA is left to cuFile's answer). */
void gpufile__platform_facts(struct gpufile__facts *f, const struct stat *st);

#endif
