"""kvikio.defaults on gpufile's settings.

    gpufile.kvikio.defaults.get("num_threads")
    with gpufile.kvikio.defaults.set({"task_size": 1 << 20, "num_threads": 8}):
        ...

KvikIO's names and value types: num_threads (also thread_pool_nthreads)
is gpufile's nthreads; compat_mode comes back as gpufile.kvikio.CompatMode
(an IntEnum, as KvikIO's); http_status_codes as a list of ints;
auto_direct_io_read is gpufile's direct_io (True: "auto", gpufile's
opportunistic O_DIRECT for cold ranges; False: "off"); auto_direct_io_write
is kept here only (gpufile's writes take O_DIRECT only under direct_io=on,
whatever it says). Values are
checked as KvikIO's Cython layer checks them: a negative count is an
OverflowError, a zero where KvikIO wants a positive integer a ValueError.
"""

import builtins
import enum
import warnings

from .. import defaults as _gdefaults
from ._errors import set_args, size_t

__all__ = ["set", "get", "is_compat_mode_preferred", "CompatMode",
           "ConfigContextManager"]


class CompatMode(enum.IntEnum):
    """KvikIO's compatibility mode (kvikio.CompatMode): OFF uses cuFile or
    fails, ON never loads cuFile, AUTO tries cuFile and falls back."""
    OFF = 0
    ON = 1
    AUTO = 2


_TO_WORD = {CompatMode.OFF: "off", CompatMode.ON: "on",
            CompatMode.AUTO: "auto"}
_FROM_WORD = {w: m for m, w in _TO_WORD.items()}

# What gpufile does not keep (its direct_io covers both directions):
# KvikIO's default (POSIX writes with opportunistic O_DIRECT), reported
# back; gpufile's writes are not affected by it.
_local = {"auto_direct_io_write": True}


def _compat(value):
    if isinstance(value, CompatMode):
        return _TO_WORD[value]
    if isinstance(value, enum.Enum):  # gpufile.CompatMode
        value = value.value
    if isinstance(value, str):
        word = value.strip().lower()
        for w, mode in (("true", "on"), ("yes", "on"), ("1", "on"),
                        ("false", "off"), ("no", "off"), ("0", "off")):
            if word == w:
                word = mode
        if word in _FROM_WORD:
            return word
        raise ValueError("compat_mode: %r is not one of ON, OFF, AUTO"
                         % value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return _TO_WORD[CompatMode(value)]
        except ValueError:
            pass
    raise TypeError("compat_mode must be a kvikio.CompatMode, not %r"
                    % (value,))


def _positive(name):
    def convert(value):
        v = size_t(value, name, "kvikio.defaults.set")
        if v == 0:
            raise ValueError("%s must be a positive integer, not 0" % name)
        return v
    return convert


def _nonnegative(name):
    return lambda value: size_t(value, name, "kvikio.defaults.set")


def _status_codes(value):
    if not isinstance(value, (list, tuple)):
        raise TypeError("http_status_codes must be a list of int, not %s"
                        % type(value).__name__)
    out = []
    for code in value:
        if isinstance(code, bool) or not hasattr(code, "__index__"):
            raise TypeError("http_status_codes must be a list of int: %r is "
                            "a %s" % (code, type(code).__name__))
        out.append(str(code.__index__()))
    if not out:
        raise ValueError("http_status_codes must not be empty")
    return ",".join(out)


def _flag(value):
    return bool(value)


# KvikIO name -> (gpufile setting or None, to gpufile's value, from it).
_PROPS = {
    "compat_mode": ("compat_mode", _compat, lambda v: _FROM_WORD[v]),
    "thread_pool_nthreads": ("nthreads", _positive("num_threads"), int),
    "task_size": ("task_size", _positive("task_size"), int),
    "gds_threshold": ("gds_threshold", _nonnegative("gds_threshold"), int),
    "bounce_buffer_size": ("bounce_buffer_size",
                           _positive("bounce_buffer_size"), int),
    "http_max_attempts": ("http_max_attempts",
                          _positive("http_max_attempts"), int),
    "http_status_codes": ("http_status_codes", _status_codes,
                          lambda v: [int(c) for c in str(v).split(",") if c]),
    "http_timeout": ("http_timeout", _positive("http_timeout"), int),
    "auto_direct_io_read": ("direct_io",
                            lambda v: "auto" if _flag(v) else "off",
                            lambda v: v != "off"),
    "auto_direct_io_write": (None, _flag, None),
}
_ALIASES = {"num_threads": "thread_pool_nthreads"}


def _prop(name):
    if not isinstance(name, str):
        raise KeyError(name)
    key = _ALIASES.get(name, name)
    if key not in _PROPS:
        import difflib
        known = sorted(builtins.set(_PROPS) | builtins.set(_ALIASES))
        near = difflib.get_close_matches(name, known, n=1)
        raise KeyError("%r is not a KvikIO setting%s; the settings are: %s"
                       % (name, " (did you mean %r?)" % near[0] if near else "",
                          ", ".join(known)))
    return key


def _get(name):
    key = _prop(name)
    gname, _, back = _PROPS[key]
    if gname is None:
        return _local[key]
    return back(_gdefaults.get(gname))


class ConfigContextManager:
    """What set() returns: the settings are set at once; leaving a with
    block puts back the values (and where they came from) they had."""

    def __init__(self, config):
        given, local = {}, {}
        for name, value in config.items():
            key = _prop(name)
            gname, convert, _ = _PROPS[key]
            if gname is None:
                local[key] = convert(value)
            else:
                given[gname] = convert(value)
        self._local_old = {k: _local[k] for k in local}
        self._restore = _gdefaults.set(given) if given else None
        _local.update(local)

    def __enter__(self):
        return None

    def __exit__(self, type_unused, value, traceback_unused):
        if self._restore is not None:
            self._restore.restore()
        _local.update(self._local_old)
        return False


_ERR = ("Valid arguments are kvikio.defaults.set(config: dict) or "
        "kvikio.defaults.set(key: str, value: Any)")


def set(*config):
    """set({name: value, ...}) or set(name, value): sets them (all or
    none); as a context manager, restores them on exit."""
    return ConfigContextManager(set_args(config, _ERR))


def get(config_name):
    """The value of a KvikIO setting (KeyError for an unknown name)."""
    return _get(config_name)


def is_compat_mode_preferred():
    """True when I/O will not use cuFile: compat_mode ON, or AUTO where
    gpufile would not hand a file to cuFile (no usable libcufile, no
    GPU)."""
    mode = get("compat_mode")
    if mode == CompatMode.ON:
        return True
    if mode == CompatMode.OFF:
        return False
    import ctypes

    from .. import _info
    try:
        if _info.cuda_device_count() <= 0:
            return True
        ctypes.CDLL(_gdefaults.get("cufile_library"))
    except Exception:
        return True
    return False


# ---- the getters and setters KvikIO deprecated in 25.04 (and removed in
# 26.04): kept, with KvikIO's FutureWarning, for programs written
# before. ----

def _deprecated_getter(name):
    def getter():
        warnings.warn("Use :meth:`kvikio.defaults.get()` instead.",
                      FutureWarning, stacklevel=2)
        return get(name)
    getter.__name__ = name
    getter.__doc__ = "Deprecated since KvikIO 25.04: get(%r)." % name
    return getter


def _deprecated_setter(fname, name):
    def setter(value):
        warnings.warn("Use :meth:`kvikio.defaults.set()` instead.",
                      FutureWarning, stacklevel=2)
        set(name, value)
    setter.__name__ = fname
    setter.__doc__ = "Deprecated since KvikIO 25.04: set(%r, value)." % name
    return setter


for _n in ("compat_mode", "num_threads", "task_size", "gds_threshold",
           "bounce_buffer_size", "http_max_attempts", "http_status_codes",
           "http_timeout"):
    globals()[_n] = _deprecated_getter(_n)
    globals()[_n + "_reset"] = _deprecated_setter(_n + "_reset", _n)
    globals()["set_" + _n] = _deprecated_setter("set_" + _n, _n)
del _n
