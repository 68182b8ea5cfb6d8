/*
 * numa_pinned: does the NUMA node of a pinned bounce buffer matter for
 * the GPU it feeds, and can gpufile choose it? (issue 14 item 5: "pinned
 * buffers on the NUMA node of the GPU they feed, where the machine has more
 * than one"). Measures, for every GPU and every NUMA node:
 *   - where pinned memory lands when the allocating thread prefers that
 *     node (set_mempolicy around cuMemHostAlloc), and when the memory is
 *     mapped, bound with mbind, touched, then cuMemHostRegister'ed: the
 *     two ways gpufile could place its buffers;
 *   - the host-to-device copy rate from that memory to that GPU.
 * It prints each GPU's PCI bus id and node (sysfs), then one line per
 * (method, node, GPU). On a single-node machine it says so and stops.
 * Uses raw system calls (no libnuma) and loads libcuda with dlopen.
 *
 *   numa_pinned [--mib N] [--reps N]
 */
#define _GNU_SOURCE
#include "bench_util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MPOL_DEFAULT   0
#define MPOL_PREFERRED 1
#define MPOL_BIND      2
#define MPOL_F_NODE    1
#define MPOL_F_ADDR    2
#define MAX_NODES      64
#define MAX_GPUS       16

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;

static struct {
	CUresult (*init)(unsigned);
	CUresult (*count)(int *);
	CUresult (*get)(CUdevice *, int);
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*set)(CUcontext);
	CUresult (*busid)(char *, int, CUdevice);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free)(CUdeviceptr);
	CUresult (*hostalloc)(void **, size_t, unsigned);
	CUresult (*freehost)(void *);
	CUresult (*reg)(void *, size_t, unsigned);
	CUresult (*unreg)(void *);
	CUresult (*htod)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*screate)(CUstream *, unsigned);
	CUresult (*ssync)(CUstream);
	CUresult (*sdestroy)(CUstream);
} cu;

static int load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	struct {
		void **fn;
		const char *name;
	} syms[] = {
	    {(void **)&cu.init, "cuInit"},
	    {(void **)&cu.count, "cuDeviceGetCount"},
	    {(void **)&cu.get, "cuDeviceGet"},
	    {(void **)&cu.retain, "cuDevicePrimaryCtxRetain"},
	    {(void **)&cu.set, "cuCtxSetCurrent"},
	    {(void **)&cu.busid, "cuDeviceGetPCIBusId"},
	    {(void **)&cu.alloc, "cuMemAlloc_v2"},
	    {(void **)&cu.free, "cuMemFree_v2"},
	    {(void **)&cu.hostalloc, "cuMemHostAlloc"},
	    {(void **)&cu.freehost, "cuMemFreeHost"},
	    {(void **)&cu.reg, "cuMemHostRegister_v2"},
	    {(void **)&cu.unreg, "cuMemHostUnregister"},
	    {(void **)&cu.htod, "cuMemcpyHtoDAsync_v2"},
	    {(void **)&cu.screate, "cuStreamCreate"},
	    {(void **)&cu.ssync, "cuStreamSynchronize"},
	    {(void **)&cu.sdestroy, "cuStreamDestroy_v2"},
	};

	if (!lib)
		return -1;
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].fn = dlsym(lib, syms[i].name);
		if (!*syms[i].fn) {
			fprintf(stderr, "numa_pinned: libcuda lacks %s\n",
			        syms[i].name);
			return -1;
		}
	}
	return cu.init(0) == 0 ? 0 : -1;
}

/* Online nodes from sysfs ("0-1", "0,2"): fills nodes, returns count. */
static int online_nodes(int *nodes)
{
	FILE *f = fopen("/sys/devices/system/node/online", "r");
	char line[256], *p, *save = NULL;
	int n = 0;

	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	for (p = strtok_r(line, ",\n", &save); p;
	     p = strtok_r(NULL, ",\n", &save)) {
		int a, b;
		if (sscanf(p, "%d-%d", &a, &b) == 2) {
			for (int x = a; x <= b && n < MAX_NODES; x++)
				nodes[n++] = x;
		} else if (sscanf(p, "%d", &a) == 1 && n < MAX_NODES) {
			nodes[n++] = a;
		}
	}
	return n;
}

/* The NUMA node sysfs gives the PCI device busid, or -1. */
static int pci_node(const char *busid)
{
	char path[128], lower[32];
	FILE *f;
	int node = -1;

	for (size_t i = 0; i < sizeof(lower) - 1 && busid[i]; i++)
		lower[i] = (char)(busid[i] >= 'A' && busid[i] <= 'F'
		                      ? busid[i] - 'A' + 'a'
		                      : busid[i]);
	lower[strnlen(busid, sizeof(lower) - 1)] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node",
	         lower);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &node) != 1)
		node = -1;
	fclose(f);
	return node;
}

/* Node of the page at p, or -1. */
static int page_node(void *p)
{
	int node = -1;

	if (syscall(SYS_get_mempolicy, &node, NULL, 0UL, p,
	            MPOL_F_NODE | MPOL_F_ADDR) != 0)
		return -1;
	return node;
}

/* Nodes of the first, middle and last page, as "a/b/c". */
static void placement(void *p, size_t size, char *out, size_t len)
{
	char *c = p;

	snprintf(out, len, "%d/%d/%d", page_node(c), page_node(c + size / 2),
	         page_node(c + size - 4096));
}

/* GB/s of reps copies of size bytes from host to dst on one stream. */
static double h2d_rate(const void *host, CUdeviceptr dst, size_t size, int reps)
{
	CUstream s;
	double t0, t;

	if (cu.screate(&s, 1) != 0)
		return -1;
	cu.htod(dst, host, size, s); /* first touch of the mappings */
	cu.ssync(s);
	t0 = bench_now();
	for (int i = 0; i < reps; i++)
		cu.htod(dst, host, size, s);
	cu.ssync(s);
	t = bench_now() - t0;
	cu.sdestroy(s);
	return (double)size * reps / t / 1e9;
}

int main(int argc, char **argv)
{
	size_t size = 256u << 20;
	int reps = 16, nodes[MAX_NODES], nn, ngpu = 0;
	CUcontext ctx[MAX_GPUS];
	CUdeviceptr dbuf[MAX_GPUS];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--mib"))
			size = strtoull(argv[i + 1], NULL, 10) << 20;
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
	}
	if (size == 0 || reps <= 0) {
		fprintf(stderr, "numa_pinned: --mib and --reps must be > 0\n");
		return 2;
	}
	if (load() != 0 || cu.count(&ngpu) != 0 || ngpu <= 0) {
		fprintf(stderr, "numa_pinned: no CUDA device\n");
		return 77;
	}
	if (ngpu > MAX_GPUS)
		ngpu = MAX_GPUS;
	nn = online_nodes(nodes);
	printf("numa nodes online: %d\n", nn);
	for (int g = 0; g < ngpu; g++) {
		CUdevice d;
		char busid[32] = "?";

		if (cu.get(&d, g) || cu.retain(&ctx[g], d) || cu.set(ctx[g]) ||
		    cu.alloc(&dbuf[g], size)) {
			fprintf(stderr, "numa_pinned: cannot set up GPU %d\n",
			        g);
			return 1;
		}
		cu.busid(busid, sizeof(busid), d);
		printf("gpu %d pci %s numa_node %d\n", g, busid,
		       pci_node(busid));
	}
	if (nn < 2) {
		printf("single NUMA node: placement cannot matter here\n");
		return 0;
	}
	for (int i = 0; i < nn; i++) {
		unsigned long mask = 1UL << nodes[i];
		char where[64];
		void *h = NULL;

		/* 1. The thread prefers node i while cuMemHostAlloc runs. */
		if (syscall(SYS_set_mempolicy, MPOL_PREFERRED, &mask,
		            sizeof(mask) * 8) != 0)
			perror("set_mempolicy");
		if (cu.hostalloc(&h, size, 1 /* PORTABLE */) != 0)
			h = NULL;
		syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0UL);
		if (h) {
			placement(h, size, where, sizeof(where));
			for (int g = 0; g < ngpu; g++) {
				cu.set(ctx[g]);
				printf(
				    "method=hostalloc+set_mempolicy asked=%d "
				    "placed=%s gpu=%d h2d=%.2f GB/s\n",
				    nodes[i], where, g,
				    h2d_rate(h, dbuf[g], size, reps));
			}
			cu.freehost(h);
		}

		/* 2. mmap, mbind to node i, touch, then register. */
		h = mmap(NULL, size, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (h == MAP_FAILED)
			continue;
		if (syscall(SYS_mbind, h, size, MPOL_BIND, &mask,
		            sizeof(mask) * 8, 0U) != 0)
			perror("mbind");
		memset(h, 1, size);
		if (cu.reg(h, size, 1 /* PORTABLE */) == 0) {
			placement(h, size, where, sizeof(where));
			for (int g = 0; g < ngpu; g++) {
				cu.set(ctx[g]);
				printf("method=mbind+register asked=%d "
				       "placed=%s gpu=%d h2d=%.2f GB/s\n",
				       nodes[i], where, g,
				       h2d_rate(h, dbuf[g], size, reps));
			}
			cu.unreg(h);
		}
		munmap(h, size);
	}
	for (int g = 0; g < ngpu; g++) {
		cu.set(ctx[g]);
		cu.free(dbuf[g]);
	}
	return 0;
}
