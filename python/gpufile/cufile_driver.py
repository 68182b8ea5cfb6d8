"""cuFile's driver: open and close it explicitly, and read or tune its
properties, as KvikIO's kvikio.cufile_driver.

    gpufile.cufile_driver.get("max_direct_io_size")      # KiB
    gpufile.cufile_driver.get()                          # every property
    with gpufile.cufile_driver.set("poll_mode", True, poll_thresh_size=64):
        ...                                              # restored on exit

Writable: poll_mode, poll_thresh_size, max_direct_io_size,
max_device_cache_size, max_pinned_memory_size (sizes in KiB, as cuFile's).
Read-only: major_version, minor_version, is_gds_available, p2pdma,
allow_compat_mode, per_buffer_cache_size, max_batch_io_size,
max_batch_io_timeout_msecs, status_flags, feature_flags. Reading or
setting opens the driver when it is not open. A value cuFile refuses raises
gpufile.Error naming the property and cuFile's status.
"""

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_uint64

from . import _args
from . import _lib
from ._page_cache import fn as _fn

_DECLS = {
    "gpufile_cufile_driver_open": (c_int, []),
    "gpufile_cufile_driver_close": (c_int, []),
    "gpufile_cufile_driver_get": (c_int, [c_char_p, POINTER(c_uint64)]),
    "gpufile_cufile_driver_set": (c_int, [c_char_p, c_uint64]),
    "gpufile_cufile_driver_prop_name": (c_char_p, [c_int, POINTER(c_int)]),
}

_BOOLS = {"poll_mode", "is_gds_available", "p2pdma", "allow_compat_mode"}
_UINT64_MAX = (1 << 64) - 1  # the C value's type


def _f(name):
    return _fn(name, _DECLS)


def properties():
    """{name: writable} for every property, in the library's order."""
    out = {}
    i = 0
    while True:
        w = c_int(0)
        name = _f("gpufile_cufile_driver_prop_name")(i, ctypes.byref(w))
        if name is None:
            return out
        out[name.decode()] = bool(w.value)
        i += 1


def driver_open():
    """Loads libcufile and opens its driver now (else the first device
    request that needs it does)."""
    _lib.check(_f("gpufile_cufile_driver_open")())


def driver_close():
    """Closes the driver; OSError (EBUSY) while files or buffers are
    registered with cuFile."""
    _lib.check(_f("gpufile_cufile_driver_close")())


def _get_one(name):
    v = c_uint64()
    _lib.check(_f("gpufile_cufile_driver_get")(name.encode(), ctypes.byref(v)))
    return bool(v.value) if name in _BOOLS else int(v.value)


def get(name=None):
    """The value of property name, or a dict of every property."""
    if name is None:
        return {n: _get_one(n) for n in properties()}
    return _get_one(_name(name))


def _name(name):
    """name checked for the C string: "poll_mode\0junk" read poll_mode."""
    if not isinstance(name, str):
        raise TypeError("a property name is a str, not %s" % type(name).__name__)
    return _args.c_text(name, "name", "cuFile driver property")


def _checked(name, value):
    """value as the int the C call takes, checked (and name)."""
    _name(name)
    if isinstance(value, bool):
        value = int(value)
    try:
        value = value.__index__()
    except AttributeError:
        raise TypeError("cuFile driver property %s: value must be an int or "
                        "bool, not %s" % (name, type(value).__name__)) from None
    if value < 0:
        raise ValueError("cuFile driver property %s: %d is negative" % (name, value))
    if value > _UINT64_MAX:
        # ctypes would pass it modulo 2**64: 2**64 + 8192 set 8192.
        raise OverflowError("cuFile driver property %s: %d is larger than "
                            "2**64 - 1" % (name, value))
    return value


def _set_one(name, value):
    _lib.check(_f("gpufile_cufile_driver_set")(name.encode(),
                                               _checked(name, value)))


def set(*args, **values):
    """set(name, value), set({name: value, ...}) or set(name=value, ...):
    sets each (all or none: a refusal puts back the ones already set).
    Usable as a context manager that restores the previous values."""
    if len(args) == 1 and isinstance(args[0], dict):
        values = dict(args[0], **values)
    elif len(args) == 2:
        values = dict(values)
        values[args[0]] = args[1]
    elif args:
        raise TypeError("set() takes (name, value), a dict, or keywords")
    if not values:
        raise TypeError("set() needs at least one property")
    for name, value in values.items():
        _checked(name, value)  # before the driver is opened
    return _lib.set_all(values, _get_one, _set_one,
                        "gpufile.cufile_driver.set")
