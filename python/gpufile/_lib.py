"""Finding and loading libgpufile.so with ctypes, and turning its negative
return codes into Python exceptions.

The library is loaded on first use, not at import, so that ``import gpufile``
always works and the error about a missing library comes with the list of
places that were searched.

Search order (the first that loads wins):

1. ``$GPUFILE_LIBRARY``, a path to the .so. When it is set, nothing else is
   tried: a wrong path is an error, never a silent switch to another copy.
2. Next to this package (``gpufile/libgpufile.so*``), for wheels that ship
   the library inside.
3. The dynamic linker's search path (``LD_LIBRARY_PATH``, ``ld.so.cache``):
   ``libgpufile.so.0``, then ``libgpufile.so``.
4. Running from a checkout: ``<repo>/build/libgpufile.so``.
"""

import ctypes
import errno as _errno
import glob
import os
import re
import threading

from . import _structs as S

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_BUILD = os.path.join(os.path.dirname(os.path.dirname(_PKG_DIR)), "build")

# The library's own codes (include/gpufile.h, GPUFILE_ERRORS): name and the
# errno the Python exception carries.
LIBRARY_CODES = {
    -5001: ("GPUFILE_ECONFIG", _errno.EINVAL),
    -5002: ("GPUFILE_ENOCUDA", _errno.ENODEV),
    -5003: ("GPUFILE_ECUDA", _errno.EIO),
    -5004: ("GPUFILE_ENOCUFILE", _errno.ENODEV),
    -5005: ("GPUFILE_ECUFILE", _errno.EIO),
    -5006: ("GPUFILE_EBADPTR", _errno.EFAULT),
    -5007: ("GPUFILE_EFLAGS", _errno.EINVAL),
}

_CUFILE_STATUS = re.compile(r"\b(CU_FILE_[A-Z0-9_]+) \((\d+)\)")


class LibraryNotFoundError(OSError):
    """libgpufile.so could not be loaded; the message lists every place
    that was tried and why each failed."""


class Error(OSError):
    """A failure reported by libgpufile with one of its own codes (below
    -4095). ``errno`` is the closest system errno (EINVAL for an invalid
    setting or flags, ENODEV when CUDA or cuFile is missing, EIO when a
    CUDA or cuFile call failed, EFAULT for unusable memory); ``code`` and
    ``code_name`` are gpufile's. System errors are raised as the usual
    OSError subclasses (FileNotFoundError, ...), with the same extra
    attributes."""


class ConfigError(Error, ValueError):
    """An invalid setting value (GPUFILE_ECONFIG). Also a ValueError."""


def _candidates():
    """[(where, path_or_name)] in search order."""
    env = os.environ.get("GPUFILE_LIBRARY")
    if env:
        return [("$GPUFILE_LIBRARY", env)]
    out = []
    for path in sorted(glob.glob(os.path.join(_PKG_DIR, "libgpufile.so*"))):
        out.append(("next to the package", path))
    if not out:
        out.append(("next to the package", os.path.join(_PKG_DIR, "libgpufile.so")))
    out.append(("the library path", "libgpufile.so.0"))
    out.append(("the library path", "libgpufile.so"))
    out.append(("the checkout's build folder", os.path.join(_REPO_BUILD, "libgpufile.so")))
    return out


_lock = threading.Lock()
_lib = None
_lib_path = None


def _load():
    tried = []
    for where, name in _candidates():
        if os.sep in name and not os.path.exists(name):
            tried.append("  %s: %s (no such file)" % (where, name))
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            tried.append("  %s: %s (%s)" % (where, name, e))
            continue
        try:
            S.declare(lib)
        except AttributeError as e:
            tried.append("  %s: %s (not a usable libgpufile: %s)" % (where, name, e))
            continue
        return lib, _loaded_path(name)
    raise LibraryNotFoundError(
        _errno.ENOENT,
        "libgpufile.so not found; set GPUFILE_LIBRARY to its path "
        "(e.g. build/libgpufile.so) or add its folder to LD_LIBRARY_PATH. "
        "Tried:\n" + "\n".join(tried))


def _loaded_path(name):
    """The file the dynamic linker actually mapped for name."""
    if os.sep in name:
        return os.path.realpath(name)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and "libgpufile.so" in os.path.basename(parts[5]):
                    return parts[5].strip()
    except OSError:
        pass
    return name


def lib():
    """The loaded library (ctypes.CDLL), loading it on first call."""
    global _lib, _lib_path
    if _lib is None:
        with _lock:
            if _lib is None:
                loaded, _lib_path = _load()
                _lib = loaded
    return _lib


def library_path():
    """The path of the loaded libgpufile.so."""
    lib()
    return _lib_path


def fn(name, decls):
    """The C function name with its prototype from decls ({name: (restype,
    argtypes)}) set; a clear error when the loaded library is too old to
    have it. For functions that are not in every libgpufile (_structs
    declares those that are)."""
    f = getattr(lib(), name, None)
    if f is None:
        raise Error(95, "%s is not in %s (an older libgpufile)"
                    % (name, library_path()))
    f.restype, f.argtypes = decls[name]
    return f


def errmsg():
    return lib().gpufile_errmsg().decode("utf-8", "replace")


def strerror(code):
    return lib().gpufile_strerror(int(code)).decode("utf-8", "replace")


def warn_dropped(what, err):
    """Warns (RuntimeWarning) that what ended in err and was dropped before
    anyone read its outcome: a finaliser cannot raise, and a failed read
    must not go unseen."""
    import warnings
    warnings.warn("gpufile: %s was dropped without reading its outcome, "
                  "and it failed: %s" % (what, err), RuntimeWarning,
                  stacklevel=2)


def make_error(code, message=None, filename=None):
    """The exception for a negative return code; message defaults to this
    thread's gpufile_errmsg(), else gpufile_strerror(code)."""
    code = int(code)
    if message is None:
        message = errmsg()
    if not message:
        message = strerror(code)
    if code < -4095:
        name, err = LIBRARY_CODES.get(code, ("GPUFILE_E%d" % -code, _errno.EIO))
        cls = ConfigError if name == "GPUFILE_ECONFIG" else Error
        exc = cls(err, message) if filename is None else cls(err, message, filename)
    else:
        name = _errno.errorcode.get(-code, "E%d" % -code)
        # OSError(...) picks the subclass for the errno (FileNotFoundError...).
        exc = OSError(-code, message) if filename is None else OSError(-code, message, filename)
    exc.code = code
    exc.code_name = name
    m = _CUFILE_STATUS.search(message)
    exc.cufile_status = int(m.group(2)) if m else None
    exc.cufile_status_name = m.group(1) if m else None
    return exc


def shown_name(name):
    """name as gpufile shows it in messages and exceptions: a URL without
    its user information, query and fragment (user:password, a presigned
    signature), through the library's one redaction, gpufile_redact_url;
    anything else unchanged."""
    if "://" not in name:
        return name
    f = lib().gpufile_redact_url
    f.restype = ctypes.c_ssize_t
    f.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    raw = os.fsencode(name)
    n = f(raw, None, 0)
    if n < 0:
        return "(a URL, not shown: %s)" % strerror(n)
    buf = ctypes.create_string_buffer(n + 1)
    f(raw, buf, n + 1)
    return os.fsdecode(buf.value)


def check(rc, filename=None):
    """Returns rc when it is >= 0, else raises the matching exception."""
    if rc < 0:
        raise make_error(rc, filename=filename)
    return rc


class Restore:
    """What a set() of several values returns: as a context manager (or
    through restore()), puts back the values they had before. what names
    them in repr() ("gpufile.defaults.set")."""

    def __init__(self, previous, setter, what):
        self._previous = previous
        self._setter = setter
        self._what = what

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.restore()
        return False

    def restore(self):
        previous, self._previous = self._previous, {}
        for name, value in previous.items():
            self._setter(name, value)

    def __repr__(self):
        return "<%s: restores %r>" % (self._what, self._previous)


def set_all(values, getter, setter, what):
    """Sets every name -> value of values with setter, all or none: a
    refusal puts back (with setter) the ones already set, then raises.
    Returns a Restore of the values getter gave before."""
    previous = {name: getter(name) for name in values}
    done = {}
    try:
        for name, value in values.items():
            setter(name, value)
            done[name] = previous[name]
    except BaseException:
        Restore(done, setter, what).restore()
        raise
    return Restore(previous, setter, what)
