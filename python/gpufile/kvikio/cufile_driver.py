"""kvikio.cufile_driver on gpufile.cufile_driver: cuFile's driver
properties, opening and closing the driver, libcufile's version.

KvikIO's property names and units (sizes in KiB, as cuFile's). Reading or
setting a property opens the driver when it is not open (gpufile's rule).
Without a usable cuFile, every call but libcufile_version() raises
RuntimeError saying why.
"""

import atexit

from .. import _info
from .. import cufile_driver as _gdriver
from ._errors import set_args
from .cufile import _call

__all__ = ["properties", "set", "get", "libcufile_version", "driver_open",
           "driver_close", "initialize", "ConfigContextManager"]

_SETTABLE = ("poll_mode", "poll_thresh_size", "max_device_cache_size",
             "max_pinned_memory_size")
_READONLY = ("is_gds_available", "major_version", "minor_version",
             "allow_compat_mode", "per_buffer_cache_size")


def _check_name(name, setting=False):
    if name in _READONLY:
        if setting:
            raise KeyError("This property is read-only.")
        return name
    if name not in _SETTABLE:
        raise KeyError(name)
    return name


def _get(name):
    return _call(_gdriver.get, _check_name(name))


def _set(name, value):
    _check_name(name, True)
    _call(_gdriver.set, name, value)


class DriverProperties:
    """cuFile's driver properties as attributes (kvikio.cufile_driver.
    properties): settable ones may be assigned."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return _get(name)
        except KeyError:
            raise AttributeError("cuFile driver property %r does not exist"
                                 % name) from None

    def __setattr__(self, name, value):
        try:
            _set(name, value)
        except KeyError as e:
            raise AttributeError(e.args[0] if e.args else name) from None


properties = DriverProperties()


class ConfigContextManager:
    """What set() returns: the properties are set at once; leaving a with
    block puts back their previous values."""

    def __init__(self, config):
        for key in config:
            _check_name(key, True)
        self._old = {}
        try:
            for key, value in config.items():
                old = _get(key)
                _set(key, value)
                self._old[key] = old
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __enter__(self):
        return None

    def __exit__(self, type_unused, value, traceback_unused):
        old, self._old = self._old, {}
        for key, value in old.items():
            _set(key, value)
        return False


_ERR = ("Valid arguments are kvikio.cufile_driver.set(config: dict) or "
        "kvikio.cufile_driver.set(key: str, value: Any)")


def set(*config):
    """set({name: value, ...}) or set(name, value); as a context manager,
    restores the previous values on exit."""
    return ConfigContextManager(set_args(config, _ERR))


def get(config_name):
    """The value of a driver property (KeyError for an unknown name)."""
    return _get(config_name)


def libcufile_version():
    """libcufile's version as (major, minor), once gpufile has loaded it
    (a device request, driver_open(), a property); (0, 0) before, or for
    a libcufile older than 1.8 (as KvikIO)."""
    try:
        info = _info.cufile_info()
    except OSError:
        return (0, 0)
    v = int(info.get("version") or 0) if info.get("loaded") else 0
    if v <= 0:
        return (0, 0)
    major, minor = divmod(v, 1000)
    return (major, minor // 10)


def driver_open():
    """Opens cuFile's driver (RuntimeError when cuFile is not usable)."""
    _call(_gdriver.driver_open)


def driver_close():
    """Closes cuFile's driver (RuntimeError while files or buffers are
    still registered with it)."""
    _call(_gdriver.driver_close)


def initialize():
    """Opens the driver now and closes it at exit."""
    driver_open()
    atexit.register(driver_close)
