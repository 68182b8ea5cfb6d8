"""Many ranges of many files read as one batch, for the integrations
(gpufile.fsspec, gpufile.zarr): the files opened once each (remote ones
together, on threads: each open of a URL asks the server for the size),
every range one entry of one gpufile batch, the results as bytes.

A range read into host memory lands in a new bytes object, filled in
place before anyone else sees it (the C API's PyBytes_FromStringAndSize
with NULL, "the contents are uninitialized"), so that a cat_ranges of
10,000 x 64 KiB does not copy 640 MiB a second time.
"""

import concurrent.futures
import ctypes

from . import _buffers
from ._batch import BatchRead
from ._file import File

URL_SCHEMES = ("http://", "https://", "s3://")

_bytes_new = ctypes.pythonapi.PyBytes_FromStringAndSize
_bytes_new.restype = ctypes.py_object
_bytes_new.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_bytes_ptr = ctypes.pythonapi.PyBytes_AsString
_bytes_ptr.restype = ctypes.c_void_p
_bytes_ptr.argtypes = [ctypes.py_object]

# Opens of URLs at once: each is a request to the server (its size).
REMOTE_OPENS = 16


def is_url(path):
    return isinstance(path, str) and path.startswith(URL_SCHEMES)


def new_bytes(n):
    """(bytes of n bytes, the address of its bytes, to read into). n > 0:
    the empty bytes object is shared by the interpreter and must never be
    written."""
    assert n > 0
    b = _bytes_new(None, n)
    return b, _bytes_ptr(b)


def into(b, ptr):
    """A Buffer of the new bytes object b at ptr (new_bytes), for one
    File.read into it."""
    return _buffers.Buffer(ptr, len(b), False, b)


def shrink(b, n):
    """b cut to its first n bytes (a read that met the end of the file)."""
    return b if n == len(b) else bytes(memoryview(b)[:n])


def open_files(paths):
    """{path: File or the exception its open raised} for the distinct
    paths; URLs opened on threads, local files in turn (an open is a
    system call or two)."""
    out = {}
    urls = []
    for p in dict.fromkeys(paths):
        if is_url(p):
            urls.append(p)
            continue
        try:
            out[p] = File._reader(p) if type(p) is str else File(p)
        except Exception as e:
            out[p] = e
    if len(urls) == 1:
        try:
            out[urls[0]] = File(urls[0])
        except Exception as e:
            out[urls[0]] = e
    elif urls:
        with concurrent.futures.ThreadPoolExecutor(
                min(REMOTE_OPENS, len(urls))) as pool:
            futures = {p: pool.submit(File, p) for p in urls}
            for p, fut in futures.items():
                try:
                    out[p] = fut.result()
                except Exception as e:
                    out[p] = e
    return out


def close_files(files):
    for f in files.values():
        if isinstance(f, File):
            f.close()


def resolve(size, start, end):
    """fsspec's range rules: None is the start or the end of the file, a
    negative value counts from the end; the range is cut at the end of the
    file. Returns (offset, length)."""
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    if start < 0:
        start = max(0, size + start)
    if end < 0:
        end = max(0, size + end)
    end = min(end, size)
    return start, max(0, end - start)


def read_rows(rows, keep):
    """rows: [(File, address, size, offset)], each a read into memory that
    keep holds (new bytes objects, parts of a result array), with size and
    offset in range (resolve() made them). Reads them as one batch;
    returns each row's count or the exception of the row (an OSError
    naming the file), never raising for one row.

    The integrations' form of BatchRead (the same checks of the files, the
    same batch), without its checks of each buffer and range, which cost
    more than the read of a 64 KiB range (issue 38's cat_ranges)."""
    if not rows:
        return []
    b = BatchRead(keep, _rows=rows)
    results = b.results()
    return [b._error_of(i) if r < 0 else r for i, r in enumerate(results)]
