"""Statistics, platform checks and plans: gpufile.stats(), check(),
explain(), and the small module-level functions.

Sources: stats() and explain() call the C API (gpufile_stats_read,
gpufile_stats_files, gpufile_cufile_info, gpufile_explain) in this process.
check() runs the ``gpufile check --json`` command-line tool, so that its
answer is the CLI's by construction (the tool is found through
$GPUFILE_CLI, next to the loaded library, on PATH, or in the checkout's
build folder); this process's setter values are passed to it as GPUFILE_*
variables.
"""

import ctypes
import errno
import json
import os
import shutil
import subprocess
import warnings

from . import _args
from . import _buffers
from . import _lib
from . import _structs as S
from .defaults import items as _settings_items


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.lib().gpufile_version().decode()


def features():
    """What the library was built with and found, as a list of words."""
    return _lib.lib().gpufile_features().decode().split()


def cuda_device_count():
    """Usable CUDA devices; 0 when there is no usable driver or GPU."""
    n = _lib.lib().gpufile_cuda_device_count()
    return n if n > 0 else 0


def warmup():
    """Starts the worker pool and, with a GPU, allocates the pinned bounce
    buffers, so that the first request does not pay for them."""
    _lib.check(_lib.lib().gpufile_warmup())


def release():
    """Stops the worker pool and frees the bounce buffers (no request may
    be in flight)."""
    _lib.lib().gpufile_release()


def _need(name):
    lib = _lib.lib()
    if not S.has(lib, name):
        raise _lib.Error(errno.ENOSYS, "%s is not in %s (a library older than "
                         "this binding)" % (name, _lib.library_path()))
    return getattr(lib, name)


def buf_register(buf, flags=0):
    """Registers a device buffer with cuFile (cuFileBufRegister); a no-op
    where cuFile is not used. Pair with buf_deregister(), or use
    ``with gpufile.registered(buf):``."""
    flags = _args.in_range(flags, "flags", "buf_register", _args.INT_MAX,
                           "the largest C int")
    b = _buffers.as_buffer(buf, False, "buf_register")
    try:
        _lib.check(_need("gpufile_buf_register")(b.ptr, b.nbytes, int(flags)))
    finally:
        b.release()


def buf_deregister(buf):
    b = _buffers.as_buffer(buf, False, "buf_deregister")
    try:
        _lib.check(_need("gpufile_buf_deregister")(b.ptr))
    finally:
        b.release()


class registered:
    """``with gpufile.registered(cupy_array): ...`` registers the buffer
    with cuFile for the block. The array must outlive the block."""

    def __init__(self, buf, flags=0):
        self._buf = buf
        self._flags = flags

    def __enter__(self):
        buf_register(self._buf, self._flags)
        return self._buf

    def __exit__(self, *exc):
        buf_deregister(self._buf)
        return False


# ---- statistics ----

def _counter(c):
    return {"ops": c.ops, "tasks": c.tasks, "bytes": c.bytes, "errors": c.errors}


def _gpu(g):
    return {k: getattr(g, k) for k, _ in S.CufileGpu._fields_}


def _cufile_info():
    lib = _lib.lib()
    if not S.has(lib, "gpufile_cufile_info"):
        return None
    info = S.CufileInfo()
    _lib.check(lib.gpufile_cufile_info(ctypes.byref(info)))
    return info


def cufile_info():
    """cuFile's state in this process (never loads cuFile) as a dict, with
    its per-GPU counters when the stats level is 3."""
    info = _cufile_info()
    if info is None:
        _need("gpufile_cufile_info")
    out = {k: getattr(info, k) for k, _ in S.CufileInfo._fields_
           if k not in ("size", "gpu", "library", "message")}
    out["library"] = S.text(info.library)
    out["message"] = S.text(info.message)
    out["gpus"] = [_gpu(info.gpu[i]) for i in range(max(0, min(info.ngpus, S.MAX_GPUS)))]
    return out


def _files(pid):
    lib = _lib.lib()
    if not S.has(lib, "gpufile_stats_files"):
        return []
    arr = (S.FileStat * S.MAX_FILE_STATS)()
    n = lib.gpufile_stats_files(pid, arr, S.MAX_FILE_STATS)
    if n < 0:
        if pid == 0:
            return []  # no segment yet (no I/O), or counters compiled out
        _lib.check(n)
    return [{"path": S.text(f.path),
             "chosen": S.PATH_NAMES[f.chosen] if 0 <= f.chosen < S.PATH_COUNT else str(f.chosen),
             "reason": S.text(f.reason)} for f in arr[:min(n, S.MAX_FILE_STATS)]]


def stats(pid=None, histograms=False):
    """The path counters of this process (pid None or 0) or of process pid
    while it runs, as a plain dict with the two layers:

    - "gpufile": gpufile's choice, per direction and path:
      stats()["gpufile"]["read"]["cufile"] == {"ops", "tasks", "bytes",
      "errors"}; paths "host", "posix", "cufile", "small".
    - "cufile": cuFile's own per-GPU counters (nvfs_reads, posix_reads,
      p2p_reads, ...) as gpufile last read them: {"ngpus": n or None when
      cuFile never reported, "gpus": [...]}; for this process also cuFile's
      state ("loaded", "stats_level", "message", ...).

    Bytes and tasks count as each task ends, requests when they end;
    "inflight" has the requests, tasks and bytes not yet ended or moved;
    "collectives" the torch.distributed calls and bytes that
    load_distributed credited (add_collective).

    Plus "pid", "command", "files" (each handle's chosen path and reason),
    "settings", and with histograms=True the latency and size histograms.
    Another process's counters raise ProcessLookupError (no such process),
    PermissionError (another user's), FileNotFoundError (it does not use
    gpufile), or OSError EBADF (it closed the descriptor of its counters) /
    ESTALE / EPROTO.
    """
    if pid is not None:
        # pid_t is a C int: 2**32 + pid would read another process.
        pid = _args.in_range(pid, "pid", "stats", _args.INT_MAX, "the largest pid")
    lib = _lib.lib()
    st = S.Stats()
    self_ = not pid or pid == os.getpid()
    if self_:
        _lib.check(lib.gpufile_stats_self(ctypes.byref(st)))
    else:
        _lib.check(_need("gpufile_stats_read")(int(pid), ctypes.byref(st)))
    out = {
        "pid": st.pid or os.getpid(),
        "uid": st.uid,
        "command": S.text(st.command),
        "start_time_ns": st.start_time_ns,
        "files_opened": st.files_opened,
        "gpufile": {
            d: {S.PATH_NAMES[p]: _counter(st.path[p][i]) for p in range(S.PATH_COUNT)}
            for i, d in enumerate(("read", "write"))
        },
    }
    out["gpufile"]["direct_io_fallbacks"] = st.direct_io_fallbacks
    out["gpufile"]["map_copy_bytes"] = st.map_copy_bytes
    out["gpufile"]["map_copy_faults"] = st.map_copy_faults
    out["inflight"] = {"requests": st.inflight_requests, "tasks": st.inflight_tasks,
                       "pending_bytes": st.pending_bytes}
    out["collectives"] = {"calls": st.collective_calls,
                          "bytes_received": st.collective_bytes_received,
                          "bytes_sent": st.collective_bytes_sent}
    ngpus = st.cufile_ngpus
    cufile = {"ngpus": ngpus if ngpus >= 0 else None,
              "gpus": [_gpu(st.cufile[i]) for i in range(max(0, min(ngpus, S.MAX_GPUS)))]}
    if self_:
        info = _cufile_info()
        if info is not None:
            live = [_gpu(info.gpu[i]) for i in range(max(0, min(info.ngpus, S.MAX_GPUS)))]
            if live:
                cufile["ngpus"] = len(live)
                cufile["gpus"] = live
            cufile.update(loaded=bool(info.loaded), driver_open=bool(info.driver_open),
                          version=info.version, stats_level=info.stats_level,
                          status=info.status, message=S.text(info.message))
    out["cufile"] = cufile
    out["files"] = _files(0 if self_ else int(pid))
    out["settings"] = {S.text(s.name): {"value": S.text(s.value), "source": S.text(s.source)}
                       for s in st.settings[:max(0, min(st.nsettings, S.MAX_SETTINGS))]}
    if histograms:
        out["histograms"] = {
            key: {d: {S.PATH_NAMES[p]: list(getattr(st, field)[p][i])
                      for p in range(S.PATH_COUNT)}
                  for i, d in enumerate(("read", "write"))}
            for key, field in (("latency_ns", "latency_hist"), ("size_bytes", "size_hist"))
        }
    return out


def add_collective(bytes_received, bytes_sent=0):
    """Credits one collective call (a torch.distributed broadcast, scatter,
    ...) that delivered bytes_received bytes to this process and sent
    bytes_sent from it, in this process's counters (stats()["collectives"],
    ``gpufile stats PID``). A library without the function (an older one)
    counts nothing: returns False then, True when counted."""
    received = _args.in_range(bytes_received, "bytes_received", "add_collective",
                              2**64 - 1, "2**64 - 1")
    sent = _args.in_range(bytes_sent, "bytes_sent", "add_collective", 2**64 - 1, "2**64 - 1")
    fn = getattr(_lib.lib(), "gpufile_stats_add_collective", None)
    if fn is None:
        return False
    rc = fn(received, sent)
    if rc == -errno.ENOTSUP:
        return False  # counters compiled out
    _lib.check(rc)
    return True


def processes():
    """This user's processes with gpufile counters: [{"pid", "command",
    "bytes", "stale"}]."""
    fn = _need("gpufile_stats_list")
    n = _lib.check(fn(None, 0))
    arr = (S.Process * max(n, 1))()
    n = _lib.check(fn(arr, len(arr)))
    return [{"pid": p.pid, "command": S.text(p.command), "bytes": p.bytes,
             "stale": bool(p.stale)} for p in arr[:min(n, len(arr))]]


# ---- explain (C API, shaped as `gpufile explain --json`) ----

def explain(size, offset=0, task_size=None, registered=False, cufile_json=None):
    """The plan of a read of size bytes at offset, before it runs: gpufile's
    split into tasks and cuFile's schedule of each request, as
    ``gpufile explain --size SIZE [--task-size N] [--offset N]
    [--registered] [--cufile-json F] --json`` prints it (the same keys and
    values). task_size None uses the task_size setting."""
    size = _args.size(size, "explain")
    offset = _args.offset(offset, "explain", "offset")
    _args.span(size, offset, "explain")
    if task_size is not None:
        task_size = _args.size(task_size, "explain", "task_size")
    cfg = S.CufileConfig()
    rc = _need("gpufile_cufile_config_load")(
        _args.c_path(cufile_json, "explain: cufile_json") if cufile_json is not None
        else None, ctypes.byref(cfg))
    if rc == -errno.ENOTSUP:
        warnings.warn("gpufile.explain: " + _lib.errmsg())
    else:
        _lib.check(rc)
    if task_size is not None and task_size < 1:
        raise ValueError("explain: task_size must be at least 1")
    plan = S.Plan()
    _lib.check(_need("gpufile_explain")(size, offset, task_size or 0,
                                        1 if registered else 0, ctypes.byref(cfg),
                                        ctypes.byref(plan)))
    c = plan.cufile
    values = {}
    for i in range(S.CUFILE_NKEYS):
        v = c.v[i]
        values[S.text(v.key)] = {"value": bool(v.value) if v.is_bool else v.value,
                                 "source": "file" if v.from_file else "default"}
    return {
        "size": plan.read_size,
        "offset": plan.offset,
        "task_size": plan.task_size,
        "task_size_source": "--task-size" if task_size else "setting",
        "gds_threshold": plan.gds_threshold,
        "registered": bool(plan.registered),
        "tasks": plan.tasks,
        "task_sizes": [{"size": plan.task_sizes[i], "count": plan.task_counts[i]}
                       for i in range(min(plan.ntask_sizes, 3))],
        "below_threshold": bool(plan.below_threshold),
        "cufile_requests": plan.cufile_requests,
        "whole_task_size": plan.whole_task_size,
        "cufile_plan": [{
            "request_size": e.request_size, "count": e.count, "parts": e.parts,
            "part_size": e.part_size, "max_transfer": e.max_transfer,
            "transfers_per_part": e.transfers_per_part, "why": S.text(e.why),
        } for e in plan.entries[:min(plan.nentries, 3)]],
        "nthreads": plan.nthreads,
        "parts_in_flight": plan.parts_in_flight,
        "cufile_config": {
            "path": S.text(c.path) or None,
            "path_source": S.text(c.path_source),
            "parsed": bool(c.parsed),
            "values": values,
        },
        "model": S.text(plan.model_note),
    }


# ---- the command-line tool ----

def _near_library(lib_path):
    """Where the tool sits relative to the library: in the same folder (a
    build folder), or in bin/ beside the lib/ of an installed prefix
    (PREFIX/lib, PREFIX/lib64 or PREFIX/lib/<multiarch triplet>)."""
    lib_dir = os.path.dirname(lib_path)
    out = [os.path.join(lib_dir, "gpufile")]
    d = lib_dir
    for _ in range(2):  # lib/ or lib/x86_64-linux-gnu/
        parent, base = os.path.split(d)
        if base in ("lib", "lib64", "lib32"):
            out.append(os.path.join(parent, "bin", "gpufile"))
            break
        d = parent
    return out


def cli_path():
    """The gpufile tool: $GPUFILE_CLI, else next to the loaded library (in
    its folder, or in bin/ beside its lib/ when installed), else on PATH,
    else the checkout's build folder. FileNotFoundError naming each place
    when none is found."""
    tried = []
    env = os.environ.get("GPUFILE_CLI")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise FileNotFoundError(errno.ENOENT, "$GPUFILE_CLI is not an executable "
                                "file", env)
    try:
        near = _near_library(_lib.library_path())
    except OSError:
        near = []
    for path in near:
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path
        tried.append("next to the library: " + path)
    found = shutil.which("gpufile")
    if found:
        return found
    tried.append("PATH: no gpufile")
    build = os.path.join(_lib._REPO_BUILD, "gpufile")
    if os.access(build, os.X_OK) and os.path.isfile(build):
        return build
    tried.append("the checkout's build folder: " + build)
    raise FileNotFoundError(errno.ENOENT, "the gpufile command-line tool was not "
                            "found; set GPUFILE_CLI to its path. Tried $GPUFILE_CLI "
                            "(unset); " + "; ".join(tried))


def _cli_env():
    """The environment for the tool: this process's, plus every setting
    made through a setter here, so that the tool sees the same values."""
    env = dict(os.environ)
    for name, s in _settings_items().items():
        if s["source"] == "setter":
            env["GPUFILE_" + name.upper()] = s["value"]
    return env


def run_cli(command, *operands):
    """Runs ``gpufile COMMAND --json -- OPERANDS...`` and returns its parsed
    JSON. OSError with the tool's message when it prints no JSON. The
    "--" ends the options, so that an operand such as the path "-odd.bin"
    is never read as one (it was: "unknown option -o")."""
    what = "gpufile " + command
    for a in operands:
        _args.c_path(a, what)  # NUL: ValueError
    argv = ([cli_path(), command, "--json", "--"]
            + [os.fsdecode(a) for a in operands])
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=_cli_env())
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace").strip()
    try:
        return json.loads(out)
    except ValueError:
        code = errno.EINVAL if p.returncode == 2 else errno.EIO
        # The operands as the tool shows them: a URL without its secrets.
        shown = argv[:4] + [_lib.shown_name(a) for a in argv[4:]]
        raise OSError(code, "%s exited with status %d and no JSON: %s"
                      % (" ".join(shown), p.returncode, err or out.strip())) from None


def check(path=None):
    """The platform checks and, for path, the prediction of each layer's
    path for a device read: ``gpufile check [PATH] --json``, parsed."""
    return run_cli("check", *([path] if path is not None else []))
