"""Zarr (2.x) stores and arrays that read chunks through gpufile.

    import cupy, gpufile.zarr
    z = gpufile.zarr.open_array("/data/a.zarr", mode="r",
                                meta_array=cupy.empty(()))
    a = z[:1000]            # a CuPy array: the chunks read into it
    z = gpufile.zarr.open_array("s3://bucket/a.zarr", mode="r")  # NumPy

Store(path) is zarr's DirectoryStore (the same layout on disk) whose
reads and writes go through gpufile handles, so they are counted in the
statistics per file and path; getitems() reads every key asked for in
one gpufile batch. RemoteStore(url) reads http(s):// and s3:// objects
through gpufile's sources (read-only: gpufile does not write, list or
delete remote objects). store(root) picks one.

Array is zarr.Array with the read of a selection done by gpufile: every
chunk the selection touches is one entry of one batch, submitted at
once. A chunk that is stored uncompressed and unfiltered and that the
selection takes whole is read straight into its place in the result, in
device memory for a CuPy-backed array (meta_array) and host memory
otherwise: no copy through a chunk buffer, which is what a store alone
can do (zarr copies each chunk a store returns into the result). Other
chunks (compressed, filtered, cut by the selection) are read into host
memory by the same batch and decoded by zarr, compressed ones of a host
result on threads, several at once (codecs release the GIL); for a
device result, the decoded part is then copied to the device.
open_array() returns an Array; pickling keeps it one (Dask sends it to
its workers so).

Zarr 3.x has another store interface (asynchronous); it is not covered
here: importing gpufile.zarr raises ImportError naming the version.
"""

import concurrent.futures
import os

import numpy as np
import zarr

if int(zarr.__version__.split(".")[0]) != 2:
    raise ImportError("gpufile.zarr works with zarr 2.x; this is zarr %s, "
                      "whose store interface is another" % zarr.__version__)

from zarr.storage import BaseStore, DirectoryStore  # noqa: E402
from zarr.indexing import check_fields  # noqa: E402
from zarr.util import check_array_shape  # noqa: E402

from . import _buffers, _ranges  # noqa: E402
from ._file import File  # noqa: E402

# Threads that decode the compressed chunks of one selection at most (one
# per core up to this): a pool made per selection, so that a forked
# child (Dask, multiprocessing) never inherits one whose threads it lacks.
DECODE_THREADS = 16
# Stored bytes below which a selection's chunks are decoded in turn on the
# caller's thread: starting the threads costs more than decoding a few
# small chunks (a Dask task reads one chunk).
DECODE_THREADS_MIN_BYTES = 1 << 20


class _BatchReads:
    """Reads of keys through gpufile, for a store whose _key_path(key)
    names a key's file or URL."""

    def _read_keys(self, keys):
        """{key: bytes} for the keys that exist, in one batch; a missing
        key is left out, any other failure raises."""
        paths = {k: self._key_path(k) for k in keys}
        files = _ranges.open_files(paths.values())
        try:
            out, rows, order = {}, [], []
            for k, p in paths.items():
                f = files[p]
                # DirectoryStore: a key that is no file is missing.
                if isinstance(f, (FileNotFoundError, IsADirectoryError)):
                    continue
                if isinstance(f, BaseException):
                    raise f
                n = f.size()
                if n == 0:
                    out[k] = b""
                    continue
                out[k], ptr = _ranges.new_bytes(n)
                rows.append((f, ptr, n, 0))
                order.append(k)
            # out holds the new bytes objects until the batch is done.
            for k, r in zip(order, _ranges.read_rows(rows, out)):
                if isinstance(r, BaseException):
                    raise r
                out[k] = _ranges.shrink(out[k], r)
            return out
        finally:
            _ranges.close_files(files)

    def getitems(self, keys, **kwargs):
        """{key: bytes} of the keys that exist, read as one batch (zarr
        2.x calls it with on_error="omit", for the chunks of a
        selection)."""
        return self._read_keys(list(keys))

    def __getitem__(self, key):
        got = self._read_keys([key])
        if key not in got:
            raise KeyError(key)
        return got[key]


class Store(_BatchReads, DirectoryStore):
    """zarr's DirectoryStore read and written through gpufile (see the
    module's documentation); the files on disk are DirectoryStore's."""

    def __init__(self, path, normalize_keys=False, dimension_separator=None):
        super().__init__(path, normalize_keys=normalize_keys,
                         dimension_separator=dimension_separator)

    def _key_path(self, key):
        import os
        return os.path.join(self.path, self._normalize_key(key))

    @staticmethod
    def _tofile(a, fn):
        # DirectoryStore writes a temporary file, then renames it: the
        # write goes through gpufile (a device array from a CuPy-backed
        # Array is written from device memory).
        with File(fn, "w") as f:
            if a.nbytes:
                f.write(a)


class RemoteStore(_BatchReads, BaseStore):
    """A read-only zarr store over http(s):// or s3:// objects read
    through gpufile's sources: root/key is each key's URL."""

    _readable = True
    _writeable = False
    _listable = False
    _erasable = False

    def __init__(self, root):
        if not _ranges.is_url(root):
            raise ValueError("gpufile.zarr.RemoteStore: %r is no http://, "
                             "https:// or s3:// URL" % (root,))
        self.root = root.rstrip("/")

    def _key_path(self, key):
        return self.root + "/" + key

    def __contains__(self, key):
        try:
            File(self._key_path(key)).close()
        except FileNotFoundError:
            return False
        return True

    def _refuse(self, what):
        from ._lib import shown_name
        return PermissionError(
            "gpufile.zarr.RemoteStore(%s): %s: gpufile's remote sources read "
            "objects; they do not write, delete or list them"
            % (shown_name(self.root), what))

    def __setitem__(self, key, value):
        raise self._refuse("writing %r" % key)

    def __delitem__(self, key):
        raise self._refuse("deleting %r" % key)

    def __iter__(self):
        raise self._refuse("listing")

    def __len__(self):
        raise self._refuse("listing")

    def __reduce__(self):
        return (RemoteStore, (self.root,))


def store(root, **kwargs):
    """RemoteStore for an http://, https:// or s3:// URL, else Store."""
    return RemoteStore(root) if _ranges.is_url(root) else Store(root, **kwargs)


def _is_total(chunk_selection, chunks):
    """Whether the selection of a chunk is all of it, in order."""
    for sel, n in zip(chunk_selection, chunks):
        if not (isinstance(sel, slice) and sel.step in (None, 1) and
                (sel.start or 0) == 0 and sel.stop is not None and
                sel.stop >= n):
            return False
    return len(chunk_selection) == len(chunks)


class _Parts:
    """Where the parts of a selection's result lie in its memory, found
    without cutting the result itself: for a CuPy result a slice and its
    __cuda_array_interface__ cost tens of microseconds and a wait for its
    stream, for each of thousands of chunks. A NumPy array of the result's
    shape, dtype and strides over one element (never read nor written: its
    geometry only) is cut instead, and a part's address is the result's
    plus the part's offset. Made for a result that is one writable
    contiguous block (what zarr allocates); None otherwise, and the
    chunks then go through chunk buffers, as compressed ones do."""

    def __init__(self, base, shadow, buf):
        self.base = base  # the result's address
        self.shadow = shadow
        self.origin = shadow.__array_interface__["data"][0]
        self.buf = buf  # a device result's Buffer (its stream waited for)

    @classmethod
    def of(cls, out, device, dtype):
        """The parts of out, a result of dtype; None where chunks cannot
        be read into it as stored: out of another dtype (zarr converts
        the values, and a chunk's bytes would not fit its part), or not
        one writable block."""
        if getattr(out, "dtype", None) != dtype:
            return None
        flags = getattr(out, "flags", None)
        if flags is None or not (flags.c_contiguous or flags.f_contiguous):
            return None
        if device:
            try:
                buf = _buffers.as_buffer(out, True, "the result")
            except (TypeError, ValueError):
                return None
            base = buf.ptr
        else:
            host = getattr(out, "__array_interface__", None)
            if host is None or host["data"][1] or \
                    not getattr(flags, "writeable", False):
                return None
            buf, base = None, host["data"][0]
        try:
            shadow = np.lib.stride_tricks.as_strided(
                np.empty(1, dtype=out.dtype), shape=out.shape,
                strides=out.strides)
        except Exception:
            if buf is not None:
                buf.release()
            return None
        return cls(base, shadow, buf)

    def address(self, selection, shape, order):
        """The address of result[selection] when that part has the given
        shape and is contiguous in order ("C" or "F"); else None. Only a
        selection of slices is a part of the result (an index array
        would cut a copy, of memory the view does not have)."""
        if not isinstance(selection, tuple):
            selection = (selection,)
        if not all(isinstance(s, slice) for s in selection):
            return None
        try:
            part = self.shadow[selection]
        except Exception:
            return None
        if part.shape != shape:
            return None
        contiguous = (part.flags.c_contiguous if order == "C"
                      else part.flags.f_contiguous)
        if not contiguous:
            return None
        return self.base + (part.__array_interface__["data"][0] - self.origin)

    def release(self):
        if self.buf is not None:
            self.buf.release()
            self.buf = None


class Array(zarr.Array):
    """zarr.Array whose selections are read by gpufile in one batch, whole
    uncompressed chunks straight into the result (see the module's
    documentation). Writes are zarr's, through the store."""

    def _direct(self, parts, chunk_selection, out_selection, fields):
        """The address of the part of the result a chunk's bytes are, when
        they can be read into it as they are stored; else None."""
        if (parts is None or fields or self._compressor or self._filters or
                self._dtype == object or
                not _is_total(chunk_selection, self._chunks)):
            return None
        return parts.address(out_selection, tuple(self._chunks), self._order)

    def _get_selection(self, indexer, out=None, fields=None):
        # An empty selection (z[5:5]) reads no chunk: zarr 2's own path
        # for a store with getitems() unpacks the chunks it finds and
        # raised "not enough values to unpack" where DirectoryStore
        # returns an empty array.
        shape = tuple(indexer.shape)
        if 0 not in shape:
            return super()._get_selection(indexer, out=out, fields=fields)
        if out is None:
            return np.empty_like(self._meta_array, shape=shape,
                                 dtype=check_fields(fields, self._dtype),
                                 order=self._order)
        check_array_shape("out", out, shape)
        check_fields(fields, self._dtype)
        return out

    def _chunk_getitems(self, lchunk_coords, lchunk_selection, out,
                        lout_selection, drop_axes=None, fields=None):
        store = self.chunk_store
        if not isinstance(store, _BatchReads) or self._dtype == object or \
                self._partial_decompress:
            return super()._chunk_getitems(lchunk_coords, lchunk_selection,
                                           out, lout_selection, drop_axes,
                                           fields)
        device = hasattr(out, "__cuda_array_interface__")
        # Compressed, filtered or structured chunks are never read in
        # place: no parts (and no wait for a device result's stream).
        parts = None if (fields or self._compressor or self._filters or
                         self._dtype == object) else \
            _Parts.of(out, device, self._dtype)
        try:
            jobs = []  # (key, path, chunk selection, out selection, address)
            for coords, csel, osel in zip(lchunk_coords, lchunk_selection,
                                          lout_selection):
                key = self._chunk_key(coords)
                jobs.append((key, store._key_path(key), csel, osel,
                             self._direct(parts, csel, osel, fields)))
            files = _ranges.open_files([j[1] for j in jobs])
            try:
                self._read_chunks(jobs, files, out, device, drop_axes,
                                  fields)
            finally:
                _ranges.close_files(files)
        finally:
            if parts is not None:
                parts.release()

    def _read_chunks(self, jobs, files, out, device, drop_axes, fields):
        rows, read, keep, bufs = [], [], [out], []
        try:
            self._chunk_rows(jobs, files, out, device, fields, rows, read,
                             keep, bufs)
            counts = _ranges.read_rows(rows, keep)
        finally:
            for buf in bufs:
                buf.release()
        del keep
        counts = iter(counts)
        decode = []  # (bytes, chunk selection, out selection)
        for key, name, b, csel, osel, n, row in read:
            got = next(counts) if row else 0
            if isinstance(got, BaseException):
                raise got
            if got != n:
                raise OSError("chunk %r of %s: %d of its %d bytes read (the "
                              "file shrank?)" % (key, name, got, n))
            if b is None:
                continue  # read in place
            if device:
                tmp = self._decode_chunk(b)
                if fields:
                    tmp = tmp[fields]
                tmp = tmp[csel]
                if drop_axes:
                    tmp = np.squeeze(tmp, axis=drop_axes)
                out[osel] = np.asarray(tmp, like=out)
            else:
                decode.append((b, csel, osel))
        self._decode_into(out, decode, drop_axes, fields)

    def _decode_into(self, out, chunks, drop_axes, fields):
        """Decodes each (bytes, chunk selection, out selection) of chunks
        into its part of the host array out, as zarr does (_process_chunk).
        Compressed or filtered chunks are decoded on threads, several at
        once: numcodecs' codecs (Blosc, Zstd, LZ4, Zlib) release the GIL
        while they decompress, and each chunk lands in a part of out of its
        own. The first chunk's error is raised (as zarr would), once every
        chunk has ended."""
        def one(chunk):
            b, csel, osel = chunk
            self._process_chunk(out, b, csel, drop_axes, True, fields, osel)
        workers = min(len(chunks), os.cpu_count() or 1, DECODE_THREADS)
        if workers < 2 or not (self._compressor or self._filters) or \
                sum(len(c[0]) for c in chunks) < DECODE_THREADS_MIN_BYTES:
            for chunk in chunks:
                one(chunk)
            return
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(one, chunk) for chunk in chunks]
        for f in futures:
            f.result()  # raises the chunk's error

    def _chunk_rows(self, jobs, files, out, device, fields, rows, read, keep,
                    bufs):
        """The batch's rows (_ranges.read_rows) of the chunks of jobs: each
        whole uncompressed chunk straight into its part of out (dest), the
        others into a new bytes object; read gets (key, file name, the
        bytes object or None, chunk and out selections, size, whether it
        has a row) per chunk read, keep what holds their memory, bufs the Buffers of device
        parts (released by the caller once the batch is done)."""
        for key, path, csel, osel, dest in jobs:
            f = files[path]
            # A directory where a chunk's file would be is a missing chunk,
            # as zarr's DirectoryStore and this Store's getitems() have it.
            if isinstance(f, (FileNotFoundError, IsADirectoryError)):
                if self._fill_value is not None:  # zarr: a missing chunk
                    fill = self._fill_value
                    out[osel] = fill[fields] if fields else fill
                continue
            if isinstance(f, BaseException):
                raise f
            n = f.size()
            if dest is not None:  # the part's address (_Parts)
                want = self._dtype.itemsize
                for c in self._chunks:
                    want *= c
                if n != want:
                    raise ValueError(
                        "chunk %r of %s holds %d bytes; an uncompressed chunk "
                        "of shape %s and dtype %s holds %d" %
                        (key, f.name, n, self._chunks, self._dtype, want))
                rows.append((f, dest, n, 0))
                read.append((key, f.name, None, csel, osel, n, True))
            elif n:
                b, ptr = _ranges.new_bytes(n)
                keep.append(b)
                rows.append((f, ptr, n, 0))
                read.append((key, f.name, b, csel, osel, n, True))
            else:
                read.append((key, f.name, b"", csel, osel, 0, False))


def open_array(root, mode="a", meta_array=None, **kwargs):
    """zarr.open_array over store(root) (root may be a store already),
    returned as an Array; meta_array=cupy.empty(()) gives CuPy results.
    kwargs are zarr.open_array's (shape, chunks, dtype, compressor, ...).
    """
    s = root if isinstance(root, BaseStore) else store(root)
    z = zarr.open_array(s, mode=mode, **kwargs)
    state = z.__getstate__()
    if meta_array is not None:
        state["meta_array"] = meta_array
    return Array(**state)
