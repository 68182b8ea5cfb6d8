"""ctypes mirrors of include/gpufile.h: the structs and the prototypes.

Keep in step with the header; python/tests/test_abi.py compiles a small C
program against the header (when a C compiler is present) and compares
every struct's size and field offsets with these.
"""

import ctypes
from ctypes import (POINTER, Structure, c_char, c_char_p, c_int, c_int32,
                    c_int64, c_long, c_size_t, c_ssize_t, c_uint, c_uint32,
                    c_uint64, c_void_p)

PATH_COUNT = 6
HIST_BUCKETS = 48
MAX_GPUS = 16
MAX_SETTINGS = 24
MAX_FILE_STATS = 64
MAX_FILE_COUNTERS = 128
CUFILE_NKEYS = 10

PATH_NAMES = ("host", "posix", "cufile", "small", "mmap", "remote")
COMPAT_MODES = {"auto": 0, "on": 1, "off": 2}


class _Sized(Structure):
    """A struct that grows (include/gpufile.h, "Structs that grow"): its
    first field, size, is set to the struct's size on creation, as C
    callers do with GPUFILE_INIT; the library rejects 0 with EINVAL."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.size = ctypes.sizeof(self)


class Counter(Structure):
    _fields_ = [("ops", c_uint64), ("tasks", c_uint64), ("bytes", c_uint64),
                ("errors", c_uint64)]


class CufileGpu(Structure):
    _fields_ = [("gpu", c_int),
                ("nvfs_reads", c_uint64), ("posix_reads", c_uint64),
                ("p2p_reads", c_uint64), ("unaligned_reads", c_uint64),
                ("nvfs_writes", c_uint64), ("posix_writes", c_uint64),
                ("p2p_writes", c_uint64), ("unaligned_writes", c_uint64)]


class SettingValue(Structure):
    _fields_ = [("name", c_char * 32), ("value", c_char * 96),
                ("source", c_char * 40)]


class Stats(_Sized):
    _fields_ = [
        ("size", c_uint32),
        ("path", (Counter * 2) * PATH_COUNT),
        ("direct_io_fallbacks", c_uint64),
        ("pid", c_int32),
        ("uid", c_uint32),
        ("command", c_char * 64),
        ("start_time_ns", c_uint64),
        ("files_opened", c_uint64),
        ("latency_hist", ((c_uint64 * HIST_BUCKETS) * 2) * PATH_COUNT),
        ("size_hist", ((c_uint64 * HIST_BUCKETS) * 2) * PATH_COUNT),
        ("cufile_ngpus", c_int),
        ("cufile", CufileGpu * MAX_GPUS),
        ("nsettings", c_int),
        ("settings", SettingValue * MAX_SETTINGS),
        ("map_copy_bytes", c_uint64),
        ("map_copy_faults", c_uint64),
        ("inflight_requests", c_uint64),
        ("inflight_tasks", c_uint64),
        ("pending_bytes", c_uint64),
        ("collective_calls", c_uint64),
        ("collective_bytes_received", c_uint64),
        ("collective_bytes_sent", c_uint64),
        ("file_counters_dropped", c_uint64),
        ("file_counters_untracked", c_uint64),
    ]


class RemoteOpts(_Sized):
    """gpufile_remote_opts_t (gpufile_open_remote's options)."""
    _fields_ = [("size", c_uint32), ("flags", c_uint32),
                ("aws_access_key_id", c_char_p),
                ("aws_secret_access_key", c_char_p),
                ("aws_session_token", c_char_p), ("aws_region", c_char_p),
                ("aws_endpoint_url", c_char_p), ("aws_profile", c_char_p),
                ("ca_file", c_char_p), ("ca_path", c_char_p),
                ("known_size", c_uint64), ("timeout_s", c_uint32),
                ("max_in_flight", c_uint32), ("max_attempts", c_uint32)]


REMOTE_KNOWN_SIZE = 1 << 0
REMOTE_UNSIGNED = 1 << 1
REMOTE_S3 = 1 << 2


class RemoteFileInfo(_Sized):
    """gpufile_remote_file_info_t."""
    _fields_ = [("size", c_uint32), ("signed_requests", c_int32),
                ("url", c_char_p), ("kind", c_char_p), ("etag", c_char_p),
                ("region", c_char_p), ("credentials", c_char_p),
                ("object_size", c_int64), ("requests", c_uint64),
                ("retries", c_uint64), ("ranges", c_uint64),
                ("bytes", c_uint64), ("failures", c_uint64),
                ("redirects", c_uint64), ("connects", c_uint64)]


class FileStat(Structure):
    _fields_ = [("path", c_char * 256), ("chosen", c_int),
                ("reason", c_char * 256)]


class FileCounters(Structure):
    """gpufile_file_counters_t (gpufile_stats_file_counters)."""
    _fields_ = [("name", c_char * 256), ("name_len", c_uint32),
                ("handles", c_uint32), ("id", c_uint64),
                ("last_used_ns", c_uint64),
                ("path", (Counter * 2) * PATH_COUNT),
                ("inflight_requests", c_uint64),
                ("inflight_tasks", c_uint64), ("pending_bytes", c_uint64)]


class Process(Structure):
    _fields_ = [("pid", c_int32), ("command", c_char * 64),
                ("bytes", c_uint64), ("stale", c_int)]


class CufileInfo(_Sized):
    _fields_ = [
        ("size", c_uint32),
        ("loaded", c_int), ("driver_open", c_int), ("status", c_int),
        ("version", c_int), ("optional", c_uint), ("nvfs_loaded", c_int),
        ("p2pdma", c_int), ("stats_level", c_int),
        ("stats_layout_verified", c_int), ("ngpus", c_int),
        ("gpu", CufileGpu * MAX_GPUS),
        ("library", c_char * 256), ("message", c_char * 256),
    ]


class CufileValue(Structure):
    _fields_ = [("key", c_char_p), ("value", c_int64), ("is_bool", c_int),
                ("from_file", c_int)]


class CufileConfig(_Sized):
    _fields_ = [
        ("size", c_uint32),
        ("path", c_char * 1024), ("path_source", c_char * 64),
        ("parsed", c_int), ("v", CufileValue * CUFILE_NKEYS),
        ("denied_filesystems", c_char * 256),
    ]


class PlanEntry(Structure):
    _fields_ = [("request_size", c_uint64), ("count", c_uint64),
                ("parts", c_uint64), ("part_size", c_uint64),
                ("max_transfer", c_uint64), ("transfers_per_part", c_uint64),
                ("why", c_char * 256)]


class Plan(_Sized):
    _fields_ = [
        ("size", c_uint32),
        ("read_size", c_uint64), ("offset", c_uint64), ("task_size", c_uint64),
        ("gds_threshold", c_uint64),
        ("registered", c_int),
        ("tasks", c_uint64), ("cufile_requests", c_uint64),
        ("below_threshold", c_int),
        ("ntask_sizes", c_int),
        ("task_sizes", c_uint64 * 3), ("task_counts", c_uint64 * 3),
        ("nentries", c_int),
        ("entries", PlanEntry * 3),
        ("whole_task_size", c_uint64),
        ("nthreads", c_uint),
        ("parts_in_flight", c_uint64),
        ("cufile", CufileConfig),
        ("model_note", c_char * 256),
    ]


class CheckItem(Structure):
    _fields_ = [("name", c_char * 48), ("status", c_int),
                ("value", c_char * 256), ("why", c_char * 512)]


# name: (restype, argtypes). Every one of these must exist.
_REQUIRED = {
    "gpufile_strerror": (c_char_p, [c_int]),
    "gpufile_errmsg": (c_char_p, []),
    "gpufile_version": (c_char_p, []),
    "gpufile_features": (c_char_p, []),
    "gpufile_source_name": (c_char_p, [c_int]),
    "gpufile_config_count": (c_int, []),
    "gpufile_config_name": (c_char_p, [c_int]),
    "gpufile_config_help": (c_char_p, [c_int]),
    "gpufile_config_check": (c_int, []),
    "gpufile_config_get": (c_int, [c_char_p, c_char_p, c_size_t, POINTER(c_int),
                                   c_char_p, c_size_t]),
    "gpufile_config_set": (c_int, [c_char_p, c_char_p]),
    "gpufile_config_reset": (None, []),
    "gpufile_open": (c_int, [POINTER(c_void_p), c_char_p, c_char_p]),
    "gpufile_close": (c_int, [c_void_p]),
    "gpufile_size": (c_int64, [c_void_p]),
    "gpufile_filename": (c_char_p, [c_void_p]),
    "gpufile_pread": (c_ssize_t, [c_void_p, c_void_p, c_size_t, c_int64]),
    "gpufile_pwrite": (c_ssize_t, [c_void_p, c_void_p, c_size_t, c_int64]),
    "gpufile_sync": (c_int, [c_void_p]),
    "gpufile_pread_async": (c_int, [c_void_p, c_void_p, c_size_t, c_int64,
                                    POINTER(c_void_p)]),
    "gpufile_pwrite_async": (c_int, [c_void_p, c_void_p, c_size_t, c_int64,
                                     POINTER(c_void_p)]),
    "gpufile_future_done": (c_int, [c_void_p]),
    "gpufile_future_wait": (c_ssize_t, [c_void_p]),
    "gpufile_future_wait_for": (c_ssize_t, [c_void_p, c_long]),
    "gpufile_future_free": (None, [c_void_p]),
    "gpufile_path_name": (c_char_p, [c_int]),
    "gpufile_path_info": (c_int, [c_void_p, POINTER(c_int), c_char_p, c_size_t]),
    "gpufile_stats_self": (c_int, [POINTER(Stats)]),
    "gpufile_cuda_device_count": (c_int, []),
    "gpufile_mem_kind": (c_int, [c_void_p, POINTER(c_int), POINTER(c_int)]),
    "gpufile_mem_name": (c_char_p, [c_int]),
    "gpufile_warmup": (c_int, []),
    "gpufile_release": (None, []),
}

# Parts of the API added later; the binding works without them and says so
# when one is needed.
_OPTIONAL = {
    "gpufile_stats_read": (c_int, [c_int, POINTER(Stats)]),
    "gpufile_stats_files": (c_int, [c_int, POINTER(FileStat), c_int]),
    "gpufile_stats_file_counters": (c_int, [c_int, POINTER(FileCounters), c_int]),
    "gpufile_stats_list": (c_int, [POINTER(Process), c_int]),
    "gpufile_stats_clean": (c_int, []),
    "gpufile_stats_segment_path": (c_int, [c_int, c_char_p, c_size_t]),
    "gpufile_cufile_info": (c_int, [POINTER(CufileInfo)]),
    "gpufile_cufile_status_name": (c_char_p, [c_int]),
    "gpufile_buf_register": (c_int, [c_void_p, c_size_t, c_int]),
    "gpufile_buf_deregister": (c_int, [c_void_p]),
    "gpufile_cufile_config_load": (c_int, [c_char_p, POINTER(CufileConfig)]),
    "gpufile_explain": (c_int, [c_uint64, c_uint64, c_uint64, c_int,
                                POINTER(CufileConfig), POINTER(Plan)]),
    "gpufile_check": (c_int, [c_char_p, POINTER(CheckItem), c_int]),
    "gpufile_check_status_name": (c_char_p, [c_int]),
    "gpufile_pinned_bytes_max": (c_size_t, []),
    "gpufile_open_remote": (c_int, [POINTER(c_void_p), c_char_p, c_char_p,
                                    POINTER(RemoteOpts)]),
    "gpufile_remote_file_info": (c_int, [c_void_p, POINTER(RemoteFileInfo)]),
    "gpufile_stats_add_collective": (c_int, [c_uint64, c_uint64]),
}


def declare(lib):
    """Sets restype/argtypes of every function; AttributeError when a
    required one is missing."""
    for name, (res, args) in _REQUIRED.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for name, (res, args) in _OPTIONAL.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args


def has(lib, name):
    return getattr(lib, name, None) is not None


def text(raw):
    """A fixed char array or c_char_p value as str."""
    if raw is None:
        return None
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")


__all__ = [n for n in dir() if not n.startswith("_")] + ["ctypes"]
