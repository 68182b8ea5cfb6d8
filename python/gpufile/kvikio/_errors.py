"""The exception types KvikIO raises, made from gpufile's.

KvikIO's Python API turns its C++ exceptions into Python ones: a failed
open, read or write (kvikio::CUfileException, std::runtime_error) is a
RuntimeError, an argument out of range (std::out_of_range) an IndexError,
a bad argument (std::invalid_argument) a ValueError, and a negative count
given to a size_t an OverflowError. gpufile raises OSError subclasses
that carry errno, gpufile's code and, for cuFile, cuFile's status:
RuntimeOSError is both, so that ``except RuntimeError`` (KvikIO code)
and ``except OSError`` (gpufile code) each catch it, and the details stay.
"""

import errno as _errno
import os
import re


class RuntimeOSError(OSError, RuntimeError):
    """A failed open, read or write, as KvikIO raises it (RuntimeError),
    keeping gpufile's errno, filename, code and cuFile status."""


class RangeOverflowError(OSError, OverflowError):
    """A server that answered a range request with the whole object:
    KvikIO raises OverflowError ("maybe the server doesn't support file
    ranges?"), gpufile EIO."""


_EXHAUSTED = re.compile(r"retries exhausted \(attempt \d+ of (\d+)\)")
_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


def _remote_words(detail):
    """KvikIO's wording for what gpufile's message about a remote object
    says, which KvikIO users match on ("KvikIO: HTTP request reached
    maximum number of attempts (N)", "Got HTTP code 503"), or None."""
    m = _EXHAUSTED.search(detail)
    if not m:
        return None
    words = ["KvikIO: HTTP request reached maximum number of attempts (%s)"
             % m.group(1)]
    status = _HTTP_STATUS.search(detail)
    if status:
        words.append("Got HTTP code %s" % status.group(1))
    return ", ".join(words)


def _copy_details(src, dst):
    for name in ("code", "code_name", "cufile_status", "cufile_status_name"):
        if hasattr(src, name):
            setattr(dst, name, getattr(src, name))
    dst.__cause__ = src
    return dst


def runtime(exc, prefix=None):
    """exc (an OSError of gpufile's) as a RuntimeOSError whose message
    starts with prefix (KvikIO's wording, such as "Unable to open file")
    and names the system error ("No such file or directory") and gpufile's
    own message."""
    if isinstance(exc, RuntimeError):
        return exc
    err = exc.errno if exc.errno is not None else _errno.EIO
    detail = exc.strerror or str(exc)
    # remote.c's words for a server that ignored a range request after
    # its HEAD said it honours ranges ("ignored the Range request"); one
    # found to ignore Range at open is read by streaming its body.
    if "ignores Range requests" in detail or "ignored the Range request" in detail:
        out = RangeOverflowError(err, "%s (maybe the server doesn't support "
                                 "file ranges?)" % detail)
        return _copy_details(exc, out)
    parts = []
    if prefix:
        parts.append(prefix)
    remote = _remote_words(detail)
    if remote:
        parts.append(remote)
    system = os.strerror(err)
    if system not in detail:
        parts.append(system)
    parts.append(detail)
    msg = ": ".join(parts)
    out = (RuntimeOSError(err, msg) if exc.filename is None
           else RuntimeOSError(err, msg, exc.filename))
    return _copy_details(exc, out)


def not_permitted(name, flags, doing):
    """KvikIO's error for a read of a file opened write-only, or a write
    of one opened read-only (EBADF in POSIX terms; KvikIO says "Operation
    not permitted")."""
    return RuntimeOSError(_errno.EPERM,
                          "Operation not permitted: cannot %s %r, opened "
                          "with flags %r" % (doing, name, flags), name)


def size_t(value, name, what):
    """value as a size_t the way KvikIO's Cython layer converts it:
    TypeError for what is no integer, OverflowError ("can't convert
    negative value to size_t") for a negative one."""
    if isinstance(value, bool):
        value = int(value)
    try:
        v = value.__index__()
    except AttributeError:
        raise TypeError("%s: %s must be an integer, not %s"
                        % (what, name, type(value).__name__)) from None
    if v < 0:
        raise OverflowError("can't convert negative value to size_t "
                            "(%s: %s=%d)" % (what, name, v))
    if v >= 1 << 64:
        raise OverflowError("value too large to convert to size_t "
                            "(%s: %s=%d)" % (what, name, v))
    return v


def set_args(config, usage):
    """The settings a KvikIO set() call names: set({name: value, ...}) or
    set(name, value), as a dict; ValueError(usage) for any other form."""
    if len(config) == 1 and isinstance(config[0], dict):
        return config[0]
    if len(config) == 2 and isinstance(config[0], str):
        return {config[0]: config[1]}
    raise ValueError(usage)
