"""An fsspec filesystem over gpufile: protocol "gpufile".

    import fsspec, gpufile.fsspec
    fs = fsspec.filesystem("gpufile")
    fs.cat_ranges(["/data/a.bin"] * 3, [0, 4096, 8192], [64, 4160, 8256])
    with fsspec.open("gpufile:///data/a.bin") as f: ...
    fs.cat_file("s3://bucket/key", 0, 1 << 20)   # through gpufile's sources
    zarr.open("gpufile:///data/a.zarr")          # FSStore over it
    pandas.read_parquet("gpufile:///data/t.parquet")

Paths: a local path (absolute, relative to the working folder, or
file:///...), or a URL gpufile reads itself (http://, https://, s3://),
each with or without "gpufile://" in front ("gpufile://s3://bucket/key").
Every read goes through gpufile handles, so it is counted in this
process's statistics (`gpufile stats PID`) per file and path:
cat_file, cat and cat_ranges through one gpufile batch (every range of
every file in one submit), open() in "rb" through gpufile reads with
fsspec's readahead cache in front (cache_type="readahead", block_size
bytes ahead), "wb" and pipe_file through gpufile writes.

info, ls, glob, mkdir, rm and the rest of the namespace are the local
filesystem's (os calls; LocalFileSystem does them). gpufile's remote
sources read objects and ask their size: info() of a URL works, listing
(ls, glob, find) and writing a URL raise naming it.

Registered with fsspec when this module is imported, and through the
package's "fsspec.specs" entry point when gpufile is installed, so that
fsspec.filesystem("gpufile") and storage_options work unchanged.
"""

import errno
import re

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import stringify_path

from . import _ranges
from ._file import File

PROTOCOL = "gpufile"
_PREFIX = PROTOCOL + "://"
_GLOB = re.compile(r"[*?\[]")  # what makes a path a pattern, as for glob


def _no_remote(what, path):
    return NotImplementedError(
        "gpufile.fsspec: %s is not possible on %s: gpufile's remote sources "
        "read objects and their size; they do not list or change them"
        % (what, _shown(path)))


def _shown(path):
    from ._lib import shown_name
    return shown_name(path)


def _read_only(path):
    return PermissionError(errno.EROFS, "gpufile.fsspec: remote objects are "
                           "read-only", _shown(path))


class GpufileFileSystem(AbstractFileSystem):
    """fsspec filesystem reading and writing through gpufile (see the
    module's documentation). Takes no options; storage_options={} works."""

    protocol = (PROTOCOL,)
    root_marker = "/"
    # A thread's gpufile handles are independent; nothing to share.
    cachable = True

    def __init__(self, **storage_options):
        super().__init__(**storage_options)
        self._local = LocalFileSystem()

    # ---- names ----

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        if path.startswith(_PREFIX):
            path = path[len(_PREFIX):]
        elif path.startswith(PROTOCOL + "::"):
            path = path[len(PROTOCOL) + 2:]
        if _ranges.is_url(path):
            return path
        return LocalFileSystem._strip_protocol(path)

    @classmethod
    def _parent(cls, path):
        path = cls._strip_protocol(path)
        if _ranges.is_url(path):
            return path.rstrip("/").rsplit("/", 1)[0]
        return LocalFileSystem._parent(path)

    def unstrip_protocol(self, name):
        return _PREFIX + self._strip_protocol(name)

    # ---- namespace (local: the local filesystem's; remote: size only) ----

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if not _ranges.is_url(path):
            return self._local.info(path, **kwargs)
        with File(path) as f:  # 404 and the like: FileNotFoundError
            return {"name": path, "size": f.size(), "type": "file"}

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        if _ranges.is_url(path):
            raise _no_remote("listing", path)
        return self._local.ls(path, detail=detail, **kwargs)

    def _local_only(self, what, path):
        """path stripped; a URL raises: what (mkdir, rm, ...) changes the
        namespace, which gpufile's remote sources only read."""
        path = self._strip_protocol(path)
        if _ranges.is_url(path):
            raise _no_remote(what, path)
        return path

    def mkdir(self, path, create_parents=True, **kwargs):
        self._local.mkdir(self._local_only("mkdir", path), create_parents,
                          **kwargs)

    def makedirs(self, path, exist_ok=False):
        self._local.makedirs(self._local_only("makedirs", path), exist_ok)

    def rmdir(self, path):
        self._local.rmdir(self._local_only("rmdir", path))

    def rm_file(self, path):
        self._local.rm_file(self._local_only("rm", path))

    def rm(self, path, recursive=False, maxdepth=None):
        paths = path if isinstance(path, list) else [path]
        self._local.rm([self._local_only("rm", p) for p in paths],
                       recursive=recursive, maxdepth=maxdepth)

    def mv_file(self, path1, path2, **kwargs):
        self._local.mv_file(self._local_only("mv", path1),
                            self._local_only("mv", path2), **kwargs)

    def modified(self, path):
        return self._local.modified(self._local_only("modified", path))

    def created(self, path):
        return self._local.created(self._local_only("created", path))

    # ---- reads: one batch ----

    def cat_file(self, path, start=None, end=None, **kwargs):
        out = self.cat_ranges([path], [start], [end], on_error="raise")
        return out[0]

    def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return",
                   **kwargs):
        """The bytes of each (path, start, end), read as one gpufile batch:
        each file opened once, every range one entry. start and end as for
        cat_file (None: the file's start or end; negative: from its end).
        on_error="return" puts a range's exception in its place (as
        fsspec's own cat_ranges does since 2023), anything else raises the
        first one."""
        if max_gap is not None:
            raise NotImplementedError("gpufile.fsspec.cat_ranges: max_gap "
                                      "(ranges are never merged: each is "
                                      "one batch entry)")
        if not isinstance(paths, list):
            raise TypeError("cat_ranges: paths must be a list, not %s"
                            % type(paths).__name__)
        n = len(paths)
        starts = starts if isinstance(starts, list) else [starts] * n
        ends = ends if isinstance(ends, list) else [ends] * n
        if len(starts) != n or len(ends) != n:
            raise ValueError("cat_ranges: %d paths, %d starts and %d ends; "
                             "they must be as many" % (n, len(starts), len(ends)))
        paths = self._strip_all(paths)
        out = self._read(paths, starts, ends)
        if on_error != "return":
            for v in out:
                if isinstance(v, BaseException):
                    raise v
        return out

    def _strip_all(self, paths):
        """Each path stripped, each distinct one once: a cat_ranges of
        10,000 ranges of one file stripped it 10,000 times."""
        done = {}
        out = []
        for p in paths:
            q = done.get(p) if type(p) is str else None
            if q is None:
                q = self._strip_protocol(p)
                if type(p) is str:
                    done[p] = q
            out.append(q)
        return out

    def _read(self, paths, starts, ends):
        """[bytes or exception] of each (path, start, end) (stripped paths)."""
        files = _ranges.open_files(paths)
        try:
            out = [None] * len(paths)
            rows, where = [], []
            sizes = {}
            new_bytes, resolve = _ranges.new_bytes, _ranges.resolve
            for i, (p, s, e) in enumerate(zip(paths, starts, ends)):
                f = files[p]
                if isinstance(f, BaseException):
                    out[i] = f
                    continue
                size = sizes.get(p)
                if size is None:
                    size = sizes[p] = f.size()
                off, n = resolve(size, s, e)
                if n == 0:
                    out[i] = b""
                    continue
                out[i], ptr = new_bytes(n)
                rows.append((f, ptr, n, off))
                where.append(i)
            # out holds the new bytes objects until the batch is done.
            for i, r in zip(where, _ranges.read_rows(rows, out)):
                out[i] = r if isinstance(r, BaseException) else \
                    _ranges.shrink(out[i], r)
            return out
        finally:
            _ranges.close_files(files)

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        """As fsspec's cat, with every file read in one batch."""
        if isinstance(path, list) and not recursive and \
                not any(_GLOB.search(p) for p in path):
            paths = list(dict.fromkeys(self._strip_protocol(path)))
            single = False
        else:
            paths = self.expand_path(path, recursive=recursive)
            single = (isinstance(path, str) and len(paths) == 1 and
                      paths[0] == self._strip_protocol(path))
        got = self._read(paths, [None] * len(paths), [None] * len(paths))
        if single:
            if isinstance(got[0], BaseException):
                raise got[0]
            return got[0]
        out = {}
        for p, v in zip(paths, got):
            if isinstance(v, BaseException):
                if on_error == "raise":
                    raise v
                if on_error == "omit":
                    continue
            out[p] = v
        return out

    # ---- writes ----

    def pipe_file(self, path, value, **kwargs):
        path = self._strip_protocol(path)
        if _ranges.is_url(path):
            raise _read_only(path)
        with File(path, "w") as f:
            if len(value):
                f.write(value)

    def _open(self, path, mode="rb", block_size=None, autocommit=True,
              cache_options=None, cache_type="readahead", **kwargs):
        path = self._strip_protocol(path)
        if not autocommit:
            raise NotImplementedError("gpufile.fsspec: autocommit=False "
                                      "(transactions) for %s" % _shown(path))
        return GpufileFile(self, path, mode, block_size or "default",
                           cache_type=cache_type, cache_options=cache_options,
                           **kwargs)


class GpufileFile(AbstractBufferedFile):
    """What GpufileFileSystem.open() returns: "rb" reads through a gpufile
    handle behind fsspec's cache (readahead by default); "wb" writes
    through one, block_size bytes at a time."""

    def __init__(self, fs, path, mode="rb", block_size="default",
                 cache_type="readahead", cache_options=None, **kwargs):
        self._gf = None
        if mode == "rb":
            gf = File(path)
            size = gf.size()
        elif mode == "wb":
            if _ranges.is_url(path):
                raise _read_only(path)
            gf = File(path, "w")
            size = None
        else:
            raise ValueError("gpufile.fsspec: mode %r for %s: \"rb\" or "
                             "\"wb\"" % (mode, _shown(path)))
        try:
            super().__init__(fs, path, mode, block_size, cache_type=cache_type,
                             cache_options=cache_options, size=size, **kwargs)
        except BaseException:
            gf.close()
            raise
        self._gf = gf
        if mode == "wb":
            self.offset = 0  # the file is open: nothing to initiate

    def _fetch_range(self, start, end):
        off, n = _ranges.resolve(self.size, start, end)
        if n == 0:
            return b""
        b, ptr = _ranges.new_bytes(n)
        return _ranges.shrink(b, self._gf.read(_ranges.into(b, ptr), n, off))

    def _initiate_upload(self):
        pass

    def _upload_chunk(self, final=False):
        data = self.buffer.getbuffer()
        try:
            if len(data):
                self._gf.write(data, len(data), self.offset)
        finally:
            data.release()
        return True

    def close(self):
        try:
            super().close()
        finally:
            if self._gf is not None:
                self._gf.close()

    def discard(self):
        super().discard()
        if self._gf is not None:
            self._gf.close()


fsspec.register_implementation(PROTOCOL, GpufileFileSystem, clobber=True)
