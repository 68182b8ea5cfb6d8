/*
 * Platform and per-file checks (gpufile check): what gdscheck -p and the
 * GDS prerequisites cover, and a prediction of the path each layer takes
 * for a device read of one file. Every item says pass, fail or unknown,
 * and why. Nothing here changes a setting or a file.
 */
#define _GNU_SOURCE
#include "controls/controls.h"
#include "platform/cuda_shim.h"
#include "sources/remote.h"
#include "paths/cufile_shim.h"
#include "core/decide.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef GPUFILE_HAVE_CJSON
#define GPUFILE_HAVE_CJSON 0
#endif

/* Every snprintf below fills a display field of a fixed size; cutting a
 * long path or mount option short there is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

extern char **environ;

const char *gpufile_check_status_name(gpufile_check_status_t s)
{
	switch (s) {
	case GPUFILE_CHECK_PASS:
		return "pass";
	case GPUFILE_CHECK_FAIL:
		return "fail";
	case GPUFILE_CHECK_UNKNOWN:
		return "unknown";
	}
	return "?";
}

struct list {
	gpufile_check_item_t *items;
	int max, n;
};

static void add(struct list *l, const char *name, gpufile_check_status_t st,
                const char *value, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void add(struct list *l, const char *name, gpufile_check_status_t st,
                const char *value, const char *fmt, ...)
{
	va_list ap;

	if (l->n < l->max) {
		gpufile_check_item_t *it = &l->items[l->n];
		snprintf(it->name, sizeof(it->name), "%s", name);
		it->status = st;
		snprintf(it->value, sizeof(it->value), "%s",
		         value ? value : "");
		va_start(ap, fmt);
		vsnprintf(it->why, sizeof(it->why), fmt, ap);
		va_end(ap);
	}
	l->n++;
}

/* Reads a small text file into buf, without the final newline. Returns
 * 0 or -errno. */
static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	buf[0] = '\0';
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

/* ---- cuFile ---- */

struct cufile_probe {
	int found;         /* libcufile loaded */
	int driver_ok;     /* cuFileDriverOpen succeeded */
	int driver_status; /* its status when not */
	int error;         /* the error gpufile gets when not driver_ok */
	char message[256]; /* why not, in cufile_shim's words */
};

/* libcufile through cufile_shim's own loader (the cufile_library setting,
 * nothing else), so that the library reported is the one gpufile uses. */
static void check_cufile(struct list *l, struct cufile_probe *cp)
{
	gpufile_cufile_info_t info;
	char where[PATH_MAX] = "", value[256 + PATH_MAX], version[64] = "";
	char bad_setting[256] = "";
	struct link_map *map = NULL;
	void *lib;

	memset(cp, 0, sizeof(*cp));
	/* The library first, on its own: it needs only cufile_library. The
	 * driver is opened only with valid settings (gpufile__cufile_open),
	 * and a bad GPUFILE_TASK_SIZE used to be shown here as "libcufile
	 * not found"; it is reported as not trying the driver instead. */
	cp->error = gpufile__cufile_load();
	if (cp->error == 0 && gpufile_config_check()) {
		snprintf(bad_setting, sizeof(bad_setting), "%s",
		         gpufile_errmsg());
		cp->error = GPUFILE_ECONFIG;
	} else if (cp->error == 0) {
		cp->error = gpufile_cufile_driver_open();
	}
	snprintf(cp->message, sizeof(cp->message), "%s",
	         cp->error ? gpufile_errmsg() : "");
	gpufile__clear_error();
	GPUFILE_INIT(info);
	gpufile_cufile_info(&info);
	if (!info.loaded) {
		add(l, "libcufile", GPUFILE_CHECK_FAIL, "not found",
		    "%s: gpufile will not use cuFile (install the GDS "
		    "package, add its lib directory to LD_LIBRARY_PATH, or "
		    "set cufile_library)",
		    cp->message);
		add(l, "cufile.driver", GPUFILE_CHECK_UNKNOWN, "not tried",
		    "libcufile is not available, so cuFileDriverOpen() "
		    "cannot be called");
		return;
	}
	cp->found = 1;
	gpufile__dl_lock();
	lib = dlopen(info.library, RTLD_NOW | RTLD_NOLOAD);
	if (lib && dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map &&
	    map->l_name && !realpath(map->l_name, where))
		snprintf(where, sizeof(where), "%s", map->l_name);
	if (lib)
		dlclose(lib);
	gpufile__dl_unlock();
	if (info.version)
		snprintf(version, sizeof(version), "%d.%d (%d)",
		         info.version / 1000, (info.version % 1000) / 10,
		         info.version);
	else
		snprintf(version, sizeof(version), "unknown");
	snprintf(value, sizeof(value), "%s version %s",
	         where[0] ? where : info.library, version);
	add(l, "libcufile", GPUFILE_CHECK_PASS, value,
	    "loaded %s (the cufile_library setting) with dlopen", info.library);
	cp->driver_status = info.status;
	if (info.driver_open) {
		cp->driver_ok = 1;
		add(l, "cufile.driver", GPUFILE_CHECK_PASS, "opens",
		    "cuFileDriverOpen() returned CU_FILE_SUCCESS");
	} else if (bad_setting[0]) {
		add(l, "cufile.driver", GPUFILE_CHECK_UNKNOWN, "not tried",
		    "gpufile opens the cuFile driver only when every setting "
		    "is valid (see gpufile.* below): %s",
		    bad_setting);
	} else {
		snprintf(value, sizeof(value), "cuFile status %d (%s)",
		         info.status, gpufile_cufile_status_name(info.status));
		add(l, "cufile.driver", GPUFILE_CHECK_FAIL, value,
		    "%s: gpufile falls back to its POSIX path "
		    "(compat_mode=auto) or fails (off)",
		    cp->message);
	}
}

static int check_nvidia_fs(struct list *l)
{
	char text[512], value[256];

	if (read_text("/proc/driver/nvidia-fs/version", text, sizeof(text)) ==
	    0) {
		for (char *p = text; *p; p++)
			if (*p == '\n')
				*p = ' ';
		snprintf(value, sizeof(value), "%s", text);
		add(l, "nvidia-fs", GPUFILE_CHECK_PASS, value,
		    "/proc/driver/nvidia-fs exists: the kernel module that "
		    "moves GDS data (cuFile's nvfs path) is loaded");
		return 1;
	}
	if (access("/sys/module/nvidia_fs", F_OK) == 0) {
		add(l, "nvidia-fs", GPUFILE_CHECK_UNKNOWN, "module present",
		    "/sys/module/nvidia_fs exists but "
		    "/proc/driver/nvidia-fs/version cannot be read");
		return 1;
	}
	add(l, "nvidia-fs", GPUFILE_CHECK_FAIL, "not loaded",
	    "/proc/driver/nvidia-fs is absent: cuFile can only use its "
	    "compatibility (posix) path (modprobe nvidia-fs)");
	return 0;
}

/* ---- PCIe ---- */

struct pci_dev {
	char bdf[16];
	char path[PATH_MAX]; /* resolved sysfs path */
	int numa;
};

#define MAX_PCI 32

static int read_hex(const char *dir, const char *file, unsigned long *out)
{
	char path[PATH_MAX], text[64];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	if (read_text(path, text, sizeof(text)))
		return -1;
	*out = strtoul(text, NULL, 16);
	return 0;
}

/* Lists PCI devices of vendor (0: any) whose class matches class_prefix
 * in its top bits (mask). */
static int list_pci(unsigned long vendor, unsigned long cls, unsigned long mask,
                    struct pci_dev *out, int max)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		char dir[PATH_MAX], path[PATH_MAX + 16], text[32];
		unsigned long v, c;

		if (e->d_name[0] == '.')
			continue;
		snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%s",
		         e->d_name);
		if (read_hex(dir, "vendor", &v) || read_hex(dir, "class", &c))
			continue;
		if ((vendor && v != vendor) || (c & mask) != cls)
			continue;
		snprintf(out[n].bdf, sizeof(out[n].bdf), "%.15s", e->d_name);
		if (!realpath(dir, out[n].path))
			snprintf(out[n].path, sizeof(out[n].path), "%s", dir);
		snprintf(path, sizeof(path), "%s/numa_node", dir);
		out[n].numa =
		    read_text(path, text, sizeof(text)) == 0 ? atoi(text) : -1;
		n++;
	}
	closedir(d);
	return n;
}

/* The PCIe relation of two devices, in nvidia-smi topo's words, from
 * their sysfs paths (/sys/devices/pci0000:00/0000:00:01.0/...). */
static const char *pcie_relation(const char *a, const char *b)
{
	size_t i = 0, last = 0;
	int depth = 0;

	while (a[i] && a[i] == b[i]) {
		if (a[i] == '/') {
			last = i;
			depth++;
		}
		i++;
	}
	(void)last;
	/* depth counts "/sys/devices/pci0000:00/" = 4 slashes shared when
	 * the root complex is shared; each bridge below adds one. */
	if (depth < 4)
		return "SYS (different PCIe root complexes)";
	if (depth == 4)
		return "PHB (same root complex, no shared switch)";
	if (depth == 5)
		return "PXB/PIX (behind the same root port)";
	return "PIX (same PCIe switch)";
}

static void check_gpus(struct list *l, struct pci_dev *gpus, int *ngpus)
{
	char value[256];
	int n = gpufile_cuda_device_count();
	size_t used = 0;

	*ngpus = list_pci(0x10de, 0x030000, 0xff0000, gpus, MAX_PCI);
	if (n > 0) {
		snprintf(value, sizeof(value), "%d", n);
		add(l, "cuda.devices", GPUFILE_CHECK_PASS, value,
		    "the CUDA driver (libcuda.so.1) reports %d device%s", n,
		    n == 1 ? "" : "s");
	} else {
		add(l, "cuda.devices", GPUFILE_CHECK_FAIL, "0", "%s",
		    gpufile_errmsg()[0] ? gpufile_errmsg()
		                        : "no usable CUDA device");
		gpufile__clear_error();
	}
	value[0] = '\0';
	for (int i = 0; i < *ngpus; i++) {
		int k = snprintf(value + used, sizeof(value) - used,
		                 "%s%s (NUMA %d)", i ? ", " : "", gpus[i].bdf,
		                 gpus[i].numa);
		if (k < 0 || (size_t)k >= sizeof(value) - used)
			break;
		used += (size_t)k;
	}
	if (*ngpus)
		add(l, "gpu.pcie", GPUFILE_CHECK_PASS, value,
		    "NVIDIA display/3D controllers on the PCI bus");
	else
		add(l, "gpu.pcie", GPUFILE_CHECK_FAIL, "none",
		    "no NVIDIA GPU (vendor 0x10de, class 0x03) in "
		    "/sys/bus/pci/devices");
}

static void check_nvme_placement(struct list *l, const struct pci_dev *gpus,
                                 int ngpus)
{
	struct pci_dev nvme[MAX_PCI];
	int n = list_pci(0, 0x010802, 0xffffff, nvme, MAX_PCI);
	char value[256];
	int best = 0;

	if (!n) {
		add(l, "nvme.pcie", GPUFILE_CHECK_UNKNOWN, "none",
		    "no NVMe controller (class 0x010802) on the PCI bus");
		return;
	}
	if (!ngpus) {
		snprintf(value, sizeof(value), "%d NVMe controller%s", n,
		         n == 1 ? "" : "s");
		add(l, "nvme.pcie", GPUFILE_CHECK_UNKNOWN, value,
		    "no GPU to compare placement with");
		return;
	}
	for (int g = 0; g < ngpus; g++) {
		for (int i = 0; i < n; i++) {
			const char *rel =
			    pcie_relation(gpus[g].path, nvme[i].path);
			int ok = rel[0] == 'P' && rel[1] != 'H';
			char name[48];

			snprintf(name, sizeof(name), "pcie %s-%s", gpus[g].bdf,
			         nvme[i].bdf);
			add(l, name,
			    ok ? GPUFILE_CHECK_PASS : GPUFILE_CHECK_FAIL, rel,
			    ok ? "GPU and NVMe share a PCIe bridge: "
			         "peer-to-peer transfers stay below the root"
			       : "GPU and NVMe do not share a PCIe switch: "
			         "GDS works but peer-to-peer crosses the root "
			         "complex (the tutorial's system is PIX)");
			best |= ok;
		}
	}
	(void)best;
}

static void check_iommu(struct list *l)
{
	DIR *d = opendir("/sys/class/iommu");
	char cmdline[4096] = "";
	int units = 0;
	struct dirent *e;

	read_text("/proc/cmdline", cmdline, sizeof(cmdline));
	if (d) {
		while ((e = readdir(d)))
			if (e->d_name[0] != '.')
				units++;
		closedir(d);
	}
	if (strstr(cmdline, "iommu=pt"))
		add(l, "iommu", GPUFILE_CHECK_PASS, "passthrough",
		    "the kernel command line has iommu=pt: DMA is not "
		    "translated for the host domain");
	else if (units)
		add(l, "iommu", GPUFILE_CHECK_FAIL, "enabled",
		    "%d IOMMU unit%s in /sys/class/iommu and no iommu=pt: "
		    "GDS peer-to-peer DMA needs the IOMMU off or in "
		    "passthrough (intel_iommu=off / amd_iommu=off or "
		    "iommu=pt)",
		    units, units == 1 ? "" : "s");
	else if (d)
		add(l, "iommu", GPUFILE_CHECK_PASS, "off",
		    "/sys/class/iommu has no IOMMU unit");
	else
		add(l, "iommu", GPUFILE_CHECK_UNKNOWN, "unknown",
		    "/sys/class/iommu cannot be read");
}

/* ---- cufile.json and the environment ---- */

static int check_cufile_json(struct list *l, gpufile_cufile_config_t *cfg)
{
	char value[256];
	int rc;

	GPUFILE_INIT(*cfg);
	rc = gpufile_cufile_config_load(NULL, cfg);
	if (rc == 0 && cfg->parsed)
		add(l, "cufile.json", GPUFILE_CHECK_PASS, cfg->path,
		    "read and parsed (path from %s)", cfg->path_source);
	else if (rc == 0)
		add(l, "cufile.json", GPUFILE_CHECK_PASS, "none",
		    "CUFILE_ENV_PATH_JSON is %s and /etc/cufile.json is "
		    "absent: cuFile uses its built-in defaults (below: "
		    "gpufile's model of the cuFile 1.15 defaults)",
		    gpufile__path_ignored("CUFILE_ENV_PATH_JSON")
		        ? "set but ignored (raised privileges)"
		        : "unset");
	else if (rc == -ENOTSUP)
		add(l, "cufile.json", GPUFILE_CHECK_UNKNOWN, cfg->path, "%s",
		    gpufile_errmsg());
	else
		add(l, "cufile.json", GPUFILE_CHECK_FAIL,
		    cfg->path[0] ? cfg->path : "?", "%s", gpufile_errmsg());
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++) {
		const gpufile_cufile_value_t *v = &cfg->v[i];
		char name[64];

		if (v->is_bool)
			snprintf(value, sizeof(value), "%s",
			         v->value ? "true" : "false");
		else
			snprintf(value, sizeof(value), "%lld",
			         (long long)v->value);
		snprintf(name, sizeof(name), "%s", v->key);
		add(l, name, GPUFILE_CHECK_PASS, value, "%s",
		    v->from_file ? "from the file"
		                 : "default (model of cuFile 1.15)");
	}
	if (cfg->denied_filesystems[0])
		add(l, "denylist.filesystems", GPUFILE_CHECK_PASS,
		    cfg->denied_filesystems,
		    "cuFile will not use GDS on these file systems");
	gpufile__clear_error();
	return rc;
}

static void check_cufile_env(struct list *l)
{
	int any = 0;

	for (char **e = environ; e && *e; e++) {
		char name[48];
		const char *eq = strchr(*e, '=');
		const char *v;
		gpufile_check_status_t st = GPUFILE_CHECK_PASS;
		const char *why = "set: passed on to cuFile";

		if (strncmp(*e, "CUFILE_", 7) != 0 || !eq)
			continue;
		snprintf(name, sizeof(name), "env %.*s", (int)(eq - *e), *e);
		v = eq + 1;
		any = 1;
		if (strncmp(*e, "CUFILE_FORCE_COMPAT_MODE=", 25) == 0) {
			if (gpufile__env_true(v)) {
				st = GPUFILE_CHECK_FAIL;
				why =
				    "cuFile is forced into compatibility mode: "
				    "every read it receives takes its posix "
				    "path, never nvidia-fs";
			} else {
				why = "compatibility mode not forced";
			}
		} else if (strncmp(*e, "CUFILE_ALLOW_COMPAT_MODE=", 25) == 0) {
			why = gpufile__env_true(v)
			          ? "cuFile may fall back to its posix "
			            "path where GDS is unavailable"
			          : "cuFile fails instead of falling back "
			            "to its posix path";
		} else if (strncmp(*e, "CUFILE_EXPERIMENTAL_FS=", 23) == 0) {
			st = GPUFILE_CHECK_UNKNOWN;
			why = "enables GDS on file systems NVIDIA lists as "
			      "experimental: support is not guaranteed";
		} else if (strncmp(*e, "CUFILE_ENV_PATH_JSON=", 21) == 0 &&
		           gpufile__path_ignored("CUFILE_ENV_PATH_JSON")) {
			st = GPUFILE_CHECK_UNKNOWN;
			why = "set but ignored (raised privileges: setuid, "
			      "setgid or capabilities): gpufile reads "
			      "/etc/cufile.json instead (see gpufile config)";
		} else if (strncmp(*e, "CUFILE_ENV_PATH_JSON=", 21) == 0) {
			why = "the cufile.json cuFile reads (instead of "
			      "/etc/cufile.json)";
		} else if (strncmp(*e, "CUFILE_STATS_LEVEL=", 19) == 0) {
			why =
			    "cuFile's statistics level (3: per-GPU nvfs/posix "
			    "counters, which gpufile stats shows)";
		}
		add(l, name, st, v, "%s", why);
	}
	if (!any)
		add(l, "env CUFILE_*", GPUFILE_CHECK_PASS, "none set",
		    "no CUFILE_* variable overrides cuFile's behaviour");
}

static void check_settings(struct list *l, struct gpufile__settings *s,
                           int *settings_ok)
{
	char value[256], name[64], var[64];

	*settings_ok = gpufile__settings(s) == 0;
	for (int i = 0; i < gpufile_config_count(); i++) {
		gpufile_source_t src;
		const char *n = gpufile_config_name(i);

		snprintf(name, sizeof(name), "gpufile.%s", n);
		if (gpufile_config_get(n, value, sizeof(value), &src, var,
		                       sizeof(var)))
			add(l, name, GPUFILE_CHECK_FAIL, "invalid", "%s",
			    gpufile_errmsg());
		else
			add(l, name, GPUFILE_CHECK_PASS, value, "%s",
			    var[0] ? var : gpufile_source_name(src));
	}
	add(l, "gpufile.features", GPUFILE_CHECK_PASS, gpufile_features(), "%s",
	    GPUFILE_HAVE_CJSON ? "cufile.json parsing compiled in (cJSON)"
	                       : "cufile.json parsing not compiled in");
	gpufile__clear_error();
}

/* ---- one file ---- */

struct mount {
	char point[PATH_MAX], fstype[64], source[256], options[512];
};

void gpufile__mountinfo_unescape(char *field)
{
	char *out = field;

	for (const char *in = field; *in; out++) {
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' &&
		    in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
		    in[3] <= '7') {
			*out = (char)((in[1] - '0') << 6 | (in[2] - '0') << 3 |
			              (in[3] - '0'));
			in += 4;
		} else {
			*out = *in++;
		}
	}
	*out = '\0';
}

/* Finds the mount holding real path rp on device dev in mountinfo: the
 * longest mount point that is a prefix of rp with that device. The
 * kernel writes a space, tab, newline or backslash in a field as an octal
 * escape (\040, \011, \012, \134): the fields are decoded before they
 * are compared with rp or shown. */
static int find_mount(const char *rp, dev_t dev, struct mount *m)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	size_t best = 0;
	int found = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		char point[PATH_MAX], *dash, fstype[64], source[256], opts[512];
		size_t len;

		if (sscanf(line, "%*d %*d %u:%u %*s %4095s", &maj, &min,
		           point) != 3)
			continue;
		dash = strstr(line, " - ");
		if (!dash || sscanf(dash + 3, "%63s %255s %511s", fstype,
		                    source, opts) < 2)
			continue;
		if (makedev(maj, min) != dev)
			continue;
		gpufile__mountinfo_unescape(point);
		gpufile__mountinfo_unescape(fstype);
		gpufile__mountinfo_unescape(source);
		len = strlen(point);
		if (strncmp(rp, point, len) != 0 ||
		    (rp[len] != '/' && rp[len] != '\0' &&
		     strcmp(point, "/") != 0))
			continue;
		if (len >= best) {
			best = len;
			snprintf(m->point, sizeof(m->point), "%s", point);
			snprintf(m->fstype, sizeof(m->fstype), "%s", fstype);
			snprintf(m->source, sizeof(m->source), "%s", source);
			snprintf(m->options, sizeof(m->options), "%s", opts);
			found = 1;
		}
	}
	fclose(f);
	return found;
}

/* Whether GDS (nvidia-fs) supports fstype: 1 yes, 0 no, -1 it depends. */
static int gds_fs_support(const char *fstype, const char *options,
                          const char **why)
{
	static const char *const local[] = {"ext4", "xfs"};
	static const char *const dist[] = {"lustre", "gpfs", "wekafs",
	                                   "beegfs", "nfs",  "nfs4"};

	for (size_t i = 0; i < 2; i++)
		if (strcmp(fstype, local[i]) == 0) {
			if (strcmp(fstype, "ext4") == 0 &&
			    strstr(options, "data=journal")) {
				*why = "ext4 with data=journal: GDS supports "
				       "ext4 only in data=ordered mode";
				return 0;
			}
			*why = "a local file system GDS supports (ext4 in "
			       "ordered mode, xfs)";
			return 1;
		}
	for (size_t i = 0; i < 6; i++)
		if (strcmp(fstype, dist[i]) == 0) {
			*why = "a distributed file system GDS supports with "
			       "its RDMA client and cufile.json settings";
			return -1;
		}
	*why = "not a file system GDS supports (supported: ext4, xfs, "
	       "lustre, gpfs, wekafs, beegfs, nfs over RDMA)";
	return 0;
}

/* The PCI device (resolved sysfs path) behind block device dev, or "". */
static void block_device(dev_t dev, char *name, size_t name_len, char *pci,
                         size_t pci_len)
{
	char link[PATH_MAX], rp[PATH_MAX];

	name[0] = pci[0] = '\0';
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(dev),
	         minor(dev));
	if (!realpath(link, rp))
		return;
	snprintf(name, name_len, "%s", strrchr(rp, '/') + 1);
	/* /sys/devices/pci0000:00/0000:00:1d.0/0000:3b:00.0/nvme/... :
	 * the PCI function is the last component of the form
	 * DDDD:BB:DD.F before the driver's subtree. */
	char *p = strstr(rp, "/nvme/");
	if (!p)
		p = strstr(rp, "/host");
	if (!p || strncmp(rp, "/sys/devices/pci", 16) != 0)
		return;
	*p = '\0';
	snprintf(pci, pci_len, "%s", rp);
}

/* What the checks of one file found, for the predictions. */
struct file_facts {
	int fd;          /* the one descriptor of the file (see below) */
	char fdpath[64]; /* /proc/self/fd/FD: the same file, by no name */
	struct stat st;  /* fstat of fd */
	struct mount m;
	int fs_ok;     /* gds_fs_support(): 1, 0 or -1 (it depends, or a
	                * raw block device) */
	int denied;    /* fstype in cufile.json's denylist.filesystems */
	int direct_ok; /* O_DIRECT open and an aligned read succeed */
};

/* One layer's predicted path, with the reason. */
struct prediction {
	gpufile_check_status_t status;
	const char *path;
	char why[512];
};

/* Whether mode is a file gpufile reads: a regular file or a block device. */
static int readable_kind(mode_t mode)
{
	return S_ISREG(mode) || S_ISBLK(mode);
}

/*
 * The file exists, is a regular file or block device, and this process
 * can open it for reading (as gpufile_open will: root passes, a mode-000
 * file or a directory without search permission does not). Returns 0 when
 * the other checks can go on, with f->fd, f->fdpath and f->st set.
 *
 * The path is opened once, and every later check (mount, O_DIRECT,
 * cuFile's registration, mincore) works on that descriptor: each open by
 * name was a chance for the path to name something else, and a FIFO put
 * there between a stat() and a blocking open() hung the check for good.
 * stat() first refuses special files without opening them (opening a
 * device can have effects); the open itself is O_NONBLOCK, so a FIFO
 * swapped in after the stat() does not wait for a writer, and fstat() of
 * the descriptor decides.
 */
static int check_file_access(struct list *l, const char *path,
                             struct file_facts *f)
{
	struct stat *st = &f->st;
	char rp[PATH_MAX], value[512];
	int64_t size;
	int err;

	if (stat(path, st) < 0) {
		add(l, "file", GPUFILE_CHECK_FAIL, path, "stat: %s",
		    strerror(errno));
		return -1;
	}
	if (!readable_kind(st->st_mode))
		goto not_a_file;
	/* stat() needs only search permission on the folders; reading
	 * needs read permission on the file itself, which only open()
	 * answers exactly (ACLs, LSMs, root's override). */
	f->fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (f->fd < 0) {
		err = errno;
		add(l, "file", GPUFILE_CHECK_FAIL, path,
		    "cannot be read by this user (uid %u): open: %s",
		    (unsigned)geteuid(), strerror(err));
		return -1;
	}
	if (fstat(f->fd, st) < 0) {
		err = errno;
		add(l, "file", GPUFILE_CHECK_FAIL, path, "fstat: %s",
		    strerror(err));
		goto fail;
	}
	if (!readable_kind(st->st_mode))
		goto not_a_file;
	snprintf(f->fdpath, sizeof(f->fdpath), "/proc/self/fd/%d", f->fd);
	if (!realpath(f->fdpath, rp) && !realpath(path, rp))
		snprintf(rp, sizeof(rp), "%s", path);
	/* A block device's st_size is 0: its size is the kernel's. */
	if ((err = gpufile__fd_size(f->fd, &size)))
		snprintf(value, sizeof(value), "%s (size unknown: %s)", rp,
		         strerror(-err));
	else
		snprintf(value, sizeof(value), "%s (%lld bytes)", rp,
		         (long long)size);
	add(l, "file", GPUFILE_CHECK_PASS, value, "%s",
	    S_ISBLK(st->st_mode) ? "a block device this user can read"
	                         : "a regular file this user can read");
	return 0;
not_a_file:
	add(l, "file", GPUFILE_CHECK_FAIL, path,
	    "not a regular file or block device");
fail:
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	return -1;
}

/* Whether fstype is listed in cufile.json's denylist.filesystems. */
static int fs_denied(const gpufile_cufile_config_t *cfg, const char *fstype)
{
	char list[260], needle[72];

	if (!cfg->denied_filesystems[0])
		return 0;
	snprintf(list, sizeof(list), " %s ", cfg->denied_filesystems);
	snprintf(needle, sizeof(needle), " %s ", fstype);
	return strstr(list, needle) != NULL;
}

/* The file system holding the file and whether GDS supports it. A block
 * device is read raw: no file system lies between gpufile and it (the
 * st_dev of a device node is the devtmpfs holding /dev, which says
 * nothing about the device). */
static void check_file_fs(struct list *l, const gpufile_cufile_config_t *cfg,
                          struct file_facts *f)
{
	const char *why = "";
	char rp[PATH_MAX], value[512];

	f->fs_ok = -1;
	memset(&f->m, 0, sizeof(f->m));
	if (S_ISBLK(f->st.st_mode)) {
		add(l, "file.fs", GPUFILE_CHECK_PASS, "n/a",
		    "a raw block device: no file system, so no file system "
		    "support to check");
		return;
	}
	if (!realpath(f->fdpath, rp)) {
		add(l, "file.fs", GPUFILE_CHECK_UNKNOWN, "?",
		    "the file's path cannot be found from %s: %s", f->fdpath,
		    strerror(errno));
		return;
	}
	if (!find_mount(rp, f->st.st_dev, &f->m)) {
		add(l, "file.fs", GPUFILE_CHECK_UNKNOWN, "?",
		    "no entry in /proc/self/mountinfo for device %u:%u",
		    major(f->st.st_dev), minor(f->st.st_dev));
		return;
	}
	f->fs_ok = gds_fs_support(f->m.fstype, f->m.options, &why);
	if (fs_denied(cfg, f->m.fstype)) {
		f->fs_ok = 0;
		f->denied = 1;
		why = "listed in cufile.json denylist.filesystems";
	}
	snprintf(value, sizeof(value), "%s on %s (mounted at %s)", f->m.fstype,
	         f->m.source, f->m.point);
	add(l, "file.fs",
	    f->fs_ok > 0    ? GPUFILE_CHECK_PASS
	    : f->fs_ok == 0 ? GPUFILE_CHECK_FAIL
	                    : GPUFILE_CHECK_UNKNOWN,
	    value, "%s", why);
}

/* The block device under the file (the device itself for a block
 * device: st_rdev, not the st_dev of /dev), and its PCIe placement
 * against each GPU. */
static void check_file_block_device(struct list *l, const struct stat *st,
                                    const struct pci_dev *gpus, int ngpus)
{
	const dev_t dev = S_ISBLK(st->st_mode) ? st->st_rdev : st->st_dev;
	char value[512], dev_name[64], pci[PATH_MAX];
	int nvme;

	block_device(dev, dev_name, sizeof(dev_name), pci, sizeof(pci));
	if (major(dev) == 0) {
		add(l, "file.block_device", GPUFILE_CHECK_FAIL, "none",
		    "device %u:%u is anonymous (tmpfs, overlay, network "
		    "or FUSE): no block device for nvidia-fs to reach",
		    major(dev), minor(dev));
		return;
	}
	if (!dev_name[0]) {
		snprintf(value, sizeof(value), "%u:%u", major(dev), minor(dev));
		add(l, "file.block_device", GPUFILE_CHECK_UNKNOWN, value,
		    "not found under /sys/dev/block");
		return;
	}
	nvme = strncmp(dev_name, "nvme", 4) == 0;
	snprintf(value, sizeof(value), "%s (%u:%u)%s%s", dev_name, major(dev),
	         minor(dev), pci[0] ? " at " : "",
	         pci[0] ? strrchr(pci, '/') + 1 : "");
	add(l, "file.block_device",
	    nvme ? GPUFILE_CHECK_PASS : GPUFILE_CHECK_UNKNOWN, value, "%s",
	    nvme ? "an NVMe namespace: a device GDS reaches directly"
	         : "not NVMe: GDS support depends on the driver (NVMe and "
	           "NVMe-oF are supported)");
	for (int g = 0; pci[0] && g < ngpus; g++) {
		char name[48];
		const char *rel = pcie_relation(gpus[g].path, pci);

		snprintf(name, sizeof(name), "file.pcie %s", gpus[g].bdf);
		add(l, name,
		    rel[0] == 'P' && rel[1] != 'H' ? GPUFILE_CHECK_PASS
		                                   : GPUFILE_CHECK_FAIL,
		    rel, "placement of GPU %s relative to %s", gpus[g].bdf,
		    dev_name);
	}
}

/* A second descriptor, with O_DIRECT, on the file f holds open: a reopen
 * of /proc/self/fd/FD, which is that file whatever its path names now
 * (as file.c's reopen_direct). Returns it or -errno. */
static int open_direct(const struct file_facts *f)
{
	int fd = open(f->fdpath, O_RDONLY | O_DIRECT | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* Whether the file opens with O_DIRECT and an aligned 4 KiB read at
 * offset 0 works, as cuFile's registration needs. The read is made
 * whatever the size: a file shorter than 4 KiB (or empty) gives a short
 * count, which is no failure; only an error is. Returns 1 or 0. */
static int check_file_o_direct(struct list *l, const struct file_facts *f)
{
	char err[128] = "";
	void *buf = NULL;
	int fd = open_direct(f), ok, e;

	if (fd < 0) {
		snprintf(err, sizeof(err), "open: %s", strerror(-fd));
	} else if ((e = posix_memalign(&buf, 4096, 4096))) {
		snprintf(err, sizeof(err), "posix_memalign: %s", strerror(e));
	} else if (gpufile__sys.pread(fd, buf, 4096, 0) < 0) {
		snprintf(err, sizeof(err), "read: %s", strerror(errno));
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	ok = !err[0];
	add(l, "file.o_direct", ok ? GPUFILE_CHECK_PASS : GPUFILE_CHECK_FAIL,
	    ok ? "opens" : err, "%s",
	    ok ? "O_DIRECT open and an aligned 4 KiB read at offset 0 "
	         "succeed: cuFile can register the file"
	       : "O_DIRECT refused: cuFile cannot register this file, and "
	         "gpufile reads it through the page cache");
	return ok;
}

/* Whether the kernel tells this process which of the file's pages are
 * cached, on which direct_io=auto and host_map_copy rely; f->cache_hidden
 * for the host prediction. */
static void check_file_cache_visible(struct list *l,
                                     const struct file_facts *ff,
                                     const struct gpufile__settings *s,
                                     struct gpufile__facts *f)
{
	const struct stat *st = &ff->st;
	const int tells = gpufile__mincore_tells(st, ff->fdpath);

	f->cache_hidden = !tells;
	if (tells)
		add(l, "file.page_cache_visible", GPUFILE_CHECK_PASS, "yes",
		    "%s",
		    geteuid() == 0 ? "mincore() tells root which pages of any "
		                     "file are cached"
		    : st->st_uid == geteuid()
		        ? "mincore() tells this process which pages of its own "
		          "file are cached"
		        : "mincore() tells this process which pages are "
		          "cached: "
		          "it may write the file");
	else
		add(l, "file.page_cache_visible", GPUFILE_CHECK_UNKNOWN, "no",
		    "this process neither owns the file nor may write it, so "
		    "mincore() reports every page cached (Linux 5.0 on): "
		    "direct_io=%s %s, and host reads are not copied from the "
		    "map",
		    s->direct_io == GPUFILE__DIRECT_ON    ? "on"
		    : s->direct_io == GPUFILE__DIRECT_OFF ? "off"
		                                          : "auto",
		    s->direct_io == GPUFILE__DIRECT_AUTO
		        ? "reads every range through the page cache, cold or "
		          "not (direct_io=on reads with O_DIRECT)"
		        : "is not affected");
}

/* cuFile's layer, as if it receives the read; f holds the decision's
 * facts (cuFile's own when they were gathered). */
static void predict_cufile(const struct file_facts *ff,
                           const struct gpufile__facts *f,
                           const gpufile_cufile_config_t *cfg,
                           struct prediction *p)
{
	const char *compat = cfg->v[GPUFILE_CUFILE_ALLOW_COMPAT_MODE].value
	                         ? "cuFile's compatibility (posix) path"
	                         : "allow_compat_mode is false, cuFile fails";

	p->status = GPUFILE_CHECK_FAIL;
	p->path = "posix";
	if (gpufile__cufile_forced_compat()) {
		snprintf(p->why, sizeof(p->why),
		         "CUFILE_FORCE_COMPAT_MODE=%s: cuFile's compatibility "
		         "path",
		         getenv("CUFILE_FORCE_COMPAT_MODE"));
	} else if (!f->nvfs_loaded && !f->cufile_p2pdma) {
		snprintf(p->why, sizeof(p->why),
		         "%s and cuFile reports no PCI P2PDMA support (%s): %s",
		         f->nvfs_why, f->p2pdma_why, compat);
	} else if (ff->fs_ok == 0) {
		snprintf(p->why, sizeof(p->why), "%s%s: %s", ff->m.fstype,
		         ff->denied ? " (denylisted)" : "", compat);
	} else if (!f->nvfs_loaded) {
		p->status = GPUFILE_CHECK_PASS;
		p->path = "p2p";
		snprintf(p->why, sizeof(p->why),
		         "cuFile reports PCI P2PDMA support");
	} else if (S_ISBLK(ff->st.st_mode)) {
		p->status = GPUFILE_CHECK_UNKNOWN;
		p->path = "nvfs?";
		snprintf(p->why, sizeof(p->why),
		         "a raw block device: nvfs where cuFile registers "
		         "the device, else posix; confirm with gpufile stats "
		         "PID");
	} else if (ff->fs_ok < 0) {
		p->status = GPUFILE_CHECK_UNKNOWN;
		p->path = "nvfs?";
		snprintf(p->why, sizeof(p->why),
		         "%s: nvfs when its RDMA client is configured, else "
		         "posix; confirm with gpufile stats PID",
		         ff->m.fstype);
	} else {
		p->status = GPUFILE_CHECK_PASS;
		p->path = "nvfs";
		snprintf(p->why, sizeof(p->why),
		         "nvidia-fs is loaded and %s is supported: the GDS "
		         "path; confirm with gpufile stats PID (cuFile's "
		         "nvfs/posix counters)",
		         ff->m.fstype);
	}
}

/* cuFile's facts for the file ff holds, gathered the way file.c gathers
 * them for a handle: the driver (check_cufile opened it through
 * cufile_shim), an O_DIRECT descriptor, and a registration of the file,
 * undone at once. */
static void cufile_facts(const struct file_facts *ff,
                         const struct cufile_probe *cp,
                         struct gpufile__facts *f, char *why, size_t len)
{
	CUfileHandle_t fh;
	void *ctx = NULL;
	int fd, status;

	f->cufile_known = 1;
	f->cufile_why = why;
	if (!cp->found || !cp->driver_ok) {
		f->cufile_error = cp->error ? cp->error : GPUFILE_ECUFILE;
		snprintf(why, len, "%s", cp->message);
		return;
	}
	f->cufile_p2pdma = gpufile__cufile_p2pdma();
	fd = open_direct(ff);
	if (fd < 0) {
		f->cufile_error = fd;
		snprintf(why, len, "O_DIRECT refused (%s); cuFile needs it",
		         strerror(-fd));
		return;
	}
	if (gpufile__cuda_if_loaded() && gpufile__current_or_primary(&ctx))
		ctx = NULL;
	if (gpufile__cufile_handle_register(ctx, fd, &fh, &status)) {
		f->cufile_error = GPUFILE_ECUFILE;
		snprintf(why, len, "cuFileHandleRegister failed: %s (%d)",
		         gpufile__cufile_status_name(status), status);
	} else {
		gpufile__cufile_handle_deregister(fh);
		f->cufile_registered = 1;
	}
	close(fd);
	gpufile__clear_error();
}

/* gpufile's layer for a request of size bytes into memory of kind kind,
 * by the decision function (decide.c), given the facts in f. */
static void predict_gpufile(const struct file_facts *ff,
                            const struct cufile_probe *cp,
                            const struct gpufile__settings *s, int settings_ok,
                            gpufile_mem_t kind, size_t size,
                            struct gpufile__facts *f, char *cufile_why,
                            size_t why_len, struct prediction *p)
{
	struct gpufile__decision d;

	p->status = GPUFILE_CHECK_FAIL;
	p->path = "posix";
	if (!settings_ok) {
		p->status = GPUFILE_CHECK_UNKNOWN;
		p->path = "error";
		snprintf(p->why, sizeof(p->why),
		         "a gpufile setting is invalid (see gpufile.*)");
		return;
	}
	f->cfg = s;
	f->kind = kind;
	f->size = size;
	gpufile__decide(f, &d);
	if (d.need_cufile) {
		if (!f->cufile_known)
			cufile_facts(ff, cp, f, cufile_why, why_len);
		gpufile__decide(f, &d);
	}
	if (d.error) {
		p->path = "error";
		snprintf(p->why, sizeof(p->why), "the read FAILS: %s",
		         d.reason);
		return;
	}
	p->path = gpufile_path_name(d.path);
	if (d.path == GPUFILE_PATH_CUFILE || d.path == GPUFILE_PATH_HOST)
		p->status = GPUFILE_CHECK_PASS;
	else if (d.path == GPUFILE_PATH_SMALL)
		p->status = GPUFILE_CHECK_UNKNOWN;
	snprintf(p->why, sizeof(p->why), "%s", d.reason);
}

static void check_file(struct list *l, const char *path,
                       const struct cufile_probe *cp,
                       const gpufile_cufile_config_t *cfg,
                       const struct gpufile__settings *s, int settings_ok,
                       const struct pci_dev *gpus, int ngpus)
{
	/* The predictions other than predict.gpufile (a device read of at
	 * least gds_threshold bytes), as "predict.gpufile KIND". */
	static const struct {
		const char *name;
		gpufile_mem_t kind;
		int small;
	} other[] = {
	    {"predict.gpufile small", GPUFILE_MEM_DEVICE, 1},
	    {"predict.gpufile managed", GPUFILE_MEM_MANAGED, 0},
	    {"predict.gpufile host", GPUFILE_MEM_HOST, 0},
	};
	struct file_facts ff = {.fd = -1, .fs_ok = -1};
	struct gpufile__facts f = {0};
	struct prediction gf, cu, o;
	char cufile_why[320];

	if (check_file_access(l, path, &ff))
		return;
	check_file_fs(l, cfg, &ff);
	check_file_block_device(l, &ff.st, gpus, ngpus);
	ff.direct_ok = check_file_o_direct(l, &ff);
	check_file_cache_visible(l, &ff, s, &f);

	gpufile__platform_facts(&f, &ff.st);
	predict_gpufile(&ff, cp, s, settings_ok, GPUFILE_MEM_DEVICE,
	                s->gds_threshold, &f, cufile_why, sizeof(cufile_why),
	                &gf);
	if (!f.cufile_known && cp->driver_ok)
		f.cufile_p2pdma = gpufile__cufile_p2pdma();
	predict_cufile(&ff, &f, cfg, &cu);
	add(l, "predict.gpufile", gf.status, gf.path, "%s", gf.why);
	if (strcmp(gf.path, "cufile") != 0)
		add(l, "predict.cufile", GPUFILE_CHECK_UNKNOWN, "none",
		    "cuFile does not receive the read (gpufile's layer does "
		    "not choose it); if it did: %s: %s",
		    cu.path, cu.why);
	else
		add(l, "predict.cufile", cu.status, cu.path, "%s", cu.why);
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		size_t size = s->gds_threshold;

		if (other[i].small && size == 0)
			continue; /* no read is below a threshold of 0 */
		predict_gpufile(&ff, cp, s, settings_ok, other[i].kind,
		                other[i].small ? size - 1 : size, &f,
		                cufile_why, sizeof(cufile_why), &o);
		add(l, other[i].name, o.status, o.path, "%s", o.why);
	}
	close(ff.fd);
}

/* A URL (remote.c): endpoint, kind, credentials (present or not, never
 * their values), region, the HEAD (or bytes 0-0) result and the size: one
 * item per line of gpufile_remote_info()'s report; then, for a URL that
 * opens, the prediction. */
static void check_remote(struct list *l, const char *url)
{
	char *report = NULL, *shown, *save = NULL;
	int rc = gpufile__remote_report(url, &report), stream = 0;

	for (char *line = report ? strtok_r(report, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), name[48];
		int failed;

		if (!colon)
			continue;
		*colon = '\0';
		stream |= strcmp(line, "ranges") == 0 &&
		          strncmp(colon + 2, "ignored", 7) == 0;
		failed = rc && (strcmp(line, "HEAD") == 0 ||
		                strcmp(line, "GET bytes 0-0") == 0 ||
		                strcmp(line, "GETFILESTATUS") == 0);
		snprintf(name, sizeof(name), "remote.%s",
		         strcmp(line, "GET bytes 0-0") == 0 ? "get_0_0"
		         : strcmp(line, "HEAD") == 0        ? "head"
		                                            : line);
		add(l, name, failed ? GPUFILE_CHECK_FAIL : GPUFILE_CHECK_PASS,
		    failed ? "failed" : colon + 2, "%s",
		    failed ? colon + 2 : "");
	}
	shown = gpufile__remote_redact(url);
	if (rc)
		add(l, "file", GPUFILE_CHECK_FAIL,
		    shown ? shown : GPUFILE__URL_NOT_SHOWN, "%s",
		    report ? "cannot be opened (see the remote.* checks)"
		           : gpufile_errmsg());
	else
		add(l, "file", GPUFILE_CHECK_PASS,
		    shown ? shown : GPUFILE__URL_NOT_SHOWN,
		    "a remote object, read with HTTP range requests");
	free(shown);
	free(report);
	/* Every buffer takes the remote path: one prediction, as
	 * gpufile_path_info() and the request itself decide it. */
	if (rc == 0) {
		struct gpufile__decision d;

		gpufile__decide_source(stream ? GPUFILE__SOURCE_REMOTE_STREAM
		                              : GPUFILE__SOURCE_REMOTE,
		                       &d);
		add(l, "predict.gpufile", GPUFILE_CHECK_PASS,
		    gpufile_path_name(d.path), "%s", d.reason);
	}
}

int gpufile_check(const char *path, gpufile_check_item_t *items, int max)
{
	struct list l = {items, max > 0 && items ? max : 0, 0};
	struct cufile_probe cp;
	struct gpufile__settings s;
	gpufile_cufile_config_t cfg;
	struct pci_dev gpus[MAX_PCI];
	int ngpus, settings_ok;

	memset(&s, 0, sizeof(s));
	check_cufile(&l, &cp);
	check_nvidia_fs(&l);
	check_gpus(&l, gpus, &ngpus);
	check_nvme_placement(&l, gpus, ngpus);
	check_iommu(&l);
	check_cufile_json(&l, &cfg);
	check_cufile_env(&l);
	check_settings(&l, &s, &settings_ok);
	if (path && gpufile__is_url(path))
		check_remote(&l, path);
	else if (path)
		check_file(&l, path, &cp, &cfg, &s, settings_ok, gpus, ngpus);
	gpufile__clear_error();
	return l.n;
}
