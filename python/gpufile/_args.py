"""Checks of the integers and strings a call hands to C, made before any
I/O. ctypes converts a Python int to a C integer modulo 2**N without a
word, so an offset of 2**64 + 100 reached the library as 100 (issue 10
item 12); and a C string ends at its first NUL, so "/tmp/x\\0junk" opened
/tmp/x. Every value is checked against the range of the C type it becomes.
"""

import ctypes
import numbers
import os

OFF_MAX = (1 << 63) - 1  # int64_t file offsets (off_t)
# Sizes go in as size_t, but a count of bytes comes back as ssize_t: a size
# above SSIZE_MAX could not be reported.
SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_ssize_t) - 1)) - 1
INT_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_int) - 1)) - 1


def integer(value, name, what):
    """value as an int (anything with __index__); TypeError otherwise,
    so 2.5 or "7" are refused rather than truncated."""
    try:
        return value.__index__()
    except AttributeError:
        raise TypeError("%s: %s must be an integer, not %s"
                        % (what, name, type(value).__name__)) from None


def in_range(value, name, what, high, high_text):
    """integer(value) in [0, high]: ValueError when negative, OverflowError
    when above high (described as high_text)."""
    v = integer(value, name, what)
    if v < 0:
        raise ValueError("%s: %s %d is negative" % (what, name, v))
    if v > high:
        raise OverflowError("%s: %s %d is larger than %s"
                            % (what, name, v, high_text))
    return v


def offset(value, what, name="file_offset"):
    return in_range(value, name, what, OFF_MAX,
                    "the largest file offset (2**63 - 1)")


def size(value, what, name="size"):
    return in_range(value, name, what, SIZE_MAX,
                    "the largest request (2**63 - 1 bytes)")


def span(size_, offset_, what):
    """Checks that the range [offset, offset + size) is within the largest
    file offset, so that the library never computes past it."""
    if size_ + offset_ > OFF_MAX + 1:
        raise OverflowError("%s: file_offset %d + size %d ends beyond the "
                            "largest file offset (2**63 - 1)" % (what, offset_, size_))


# A timeout this long (about 35 years) is waited for without one, so that
# the milliseconds always fit the C long of the library's timed waits.
WAIT_FOREVER_MS = 1 << 40


def wait_ms(timeout, what="wait"):
    """timeout (seconds; None: no limit) as the milliseconds of a timed
    wait in C (0 at least), or None for no limit. int(timeout * 1000)
    alone wraps the C long: 2**64 ms became 0, no wait at all. what names
    the wait in the errors for what is no number of seconds."""
    if timeout is None:
        return None
    if not isinstance(timeout, numbers.Real):
        # "1" * 1000 is a string: TypeError "'>=' not supported".
        raise TypeError("%s: timeout must be a number of seconds or None, "
                        "not %s" % (what, type(timeout).__name__))
    if timeout != timeout:
        # int() of it: ValueError "cannot convert float NaN to integer".
        raise ValueError("%s: timeout is NaN, not a number of seconds"
                         % what)
    ms = timeout * 1000
    if ms >= WAIT_FOREVER_MS:  # also inf, which int() refuses
        return None
    return max(0, int(ms))


def c_text(value, name, what):
    """A str for a C string: ValueError on an embedded NUL, as open() does."""
    if not isinstance(value, str):
        raise TypeError("%s: %s must be a str, not %s"
                        % (what, name, type(value).__name__))
    if "\0" in value:
        raise ValueError("%s: embedded null byte in %s %r" % (what, name, value))
    return value


def c_path(path, what):
    """os.fsencode(path) for a C string: ValueError on an embedded NUL, as
    open() does; TypeError for what is no path."""
    try:
        raw = os.fsencode(path)
    except TypeError:
        raise TypeError("%s: a path is a str, bytes or os.PathLike, not %s"
                        % (what, type(path).__name__)) from None
    if b"\0" in raw:
        shown = path
        if b"://" in raw:  # a URL: named as the library names it
            from . import _lib
            shown = _lib.shown_name(os.fsdecode(raw.replace(b"\0", b"%00")))
        raise ValueError("%s: embedded null byte in path %r" % (what, shown))
    return raw
