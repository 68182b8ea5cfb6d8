"""gpufile.zarr (zarr 2.x): round trips of every dtype and chunk shapes
with ragged edges, written through the gpufile store and read back by
gpufile and by zarr's own DirectoryStore; a selection is one batch;
whole uncompressed chunks land in the result without a chunk buffer;
zarr through the fsspec protocol."""
import os

import numpy as np
import pytest

import gpufile
from conftest import missing

try:
    import zarr
    import numcodecs
except ImportError as e:  # python3-zarr (scripts/deps.sh)
    zarr = None
    _why = str(e)


@pytest.fixture(scope="module", autouse=True)
def _zarr():
    if zarr is None:
        missing("python3-zarr (%s)" % _why)
    if int(zarr.__version__.split(".")[0]) != 2:
        pytest.skip("zarr %s: gpufile.zarr covers zarr 2.x" % zarr.__version__)


@pytest.fixture(scope="module")
def gz():
    import gpufile.zarr
    return gpufile.zarr


DTYPES = ["bool", "i1", "i2", "<i4", ">i4", "i8", "u1", "u2", "u4", "<u8",
          "f2", "<f4", ">f8", "c8", "c16", "M8[ns]", "m8[s]", "S7", "<U5",
          [("a", "<i4"), ("b", ">f8"), ("c", "S3")]]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, int(np.prod(shape)) * dt.itemsize,
                       dtype=np.uint8)
    a = raw.view(dt).reshape(shape).copy()
    if dt.kind == "f" or dt.kind == "c":
        a[np.isnan(a)] = 0  # NaN != NaN: compare bytes anyway, but simply
    if dt.kind == "U":
        a = np.array(["".join(chr(97 + (i * 7 + j) % 26) for j in range(i % 6))
                      for i in range(a.size)], dtype=dt).reshape(shape)
    if dt.kind == "b":
        a = raw[:a.size].reshape(shape) % 2 == 1
    return a


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips(gz, tmp_path, dtype):
    shape, chunks = (37, 23), (8, 5)  # ragged edges on both axes
    a = sample(dtype, shape)
    root = str(tmp_path / "a.zarr")
    z = gz.open_array(root, mode="w", shape=shape, chunks=chunks, dtype=dtype,
                      compressor=None, fill_value=None)
    z[:] = a
    same(gz.open_array(root, mode="r")[:], a)
    same(zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")[:], a)
    r = gz.open_array(root, mode="r")
    same(r[3:30, 4:21], a[3:30, 4:21])
    same(r[-1], a[-1])
    same(r[5:36:3, ::4], a[5:36:3, ::4])
    same(r.oindex[[0, 9, 36], [22, 1]], a[np.ix_([0, 9, 36], [22, 1])])


@pytest.mark.parametrize("shape,chunks,order,compressor", [
    ((1000,), (64,), "C", None),
    ((1000,), (1000,), "C", "blosc"),
    ((9, 10, 11), (4, 4, 4), "C", None),
    ((9, 10, 11), (4, 3, 11), "F", None),
    ((9, 10, 11), (2, 10, 5), "C", "zlib"),
    ((64, 64), (16, 16), "F", "blosc"),
    ((5, 0, 3), (2, 2, 2), "C", None),
])
def test_chunk_shapes_round_trip(gz, tmp_path, shape, chunks, order,
                                 compressor):
    comp = {None: None, "blosc": numcodecs.Blosc(),
            "zlib": numcodecs.Zlib(1)}[compressor]
    # Delta on floats would round: integers under the filter.
    dtype = "<i8" if compressor == "zlib" else "<f8"
    a = sample(dtype, shape, seed=len(shape))
    root = str(tmp_path / "s.zarr")
    z = gz.open_array(root, mode="w", shape=shape, chunks=chunks, dtype=dtype,
                      order=order, compressor=comp,
                      filters=[numcodecs.Delta(dtype)] if compressor == "zlib"
                      else None)
    z[:] = a
    r = gz.open_array(root, mode="r")
    same(r[:], a)
    same(zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")[:], a)
    if a.size:
        sel = tuple(slice(1, max(2, n - 1)) for n in shape)
        same(r[sel], a[sel])


def test_missing_chunks_read_as_fill_value(gz, tmp_path):
    root = str(tmp_path / "m.zarr")
    z = gz.open_array(root, mode="w", shape=(20,), chunks=(4,), dtype="i2",
                      compressor=None, fill_value=-7)
    z[4:8] = np.arange(4, 8)
    want = np.full(20, -7, dtype="i2")
    want[4:8] = np.arange(4, 8)
    same(gz.open_array(root, mode="r")[:], want)
    same(zarr.open_array(gz.Store(root), mode="r")[:], want)


def test_empty_selections_and_directory_chunks_read_as_zarr_reads_them(
        gz, tmp_path):
    """An empty selection is an empty array, as zarr over DirectoryStore
    gives it (gpufile.zarr raised "not enough values to unpack": zarr 2
    unpacks the chunks found for a store with getitems()); a directory
    where a chunk's file would be is a missing chunk, its fill value (it
    failed the whole read with IsADirectoryError)."""
    root = str(tmp_path / "e.zarr")
    z = gz.open_array(root, mode="w", shape=(10,), chunks=(4,), dtype="i4",
                      compressor=None, fill_value=-1)
    z[...] = np.arange(10)
    ref = zarr.open_array(zarr.DirectoryStore(root), mode="r")
    a = gz.open_array(root, mode="r")
    for sel in [slice(5, 5), slice(10, None), slice(3, 1)]:
        same(a[sel], ref[sel])
    out = np.empty(0, dtype="i4")
    assert a.get_basic_selection(slice(5, 5), out=out) is out
    os.remove(os.path.join(root, "1"))
    os.mkdir(os.path.join(root, "1"))
    same(gz.open_array(root, mode="r")[:], ref[:])
    assert list(ref[4:8]) == [-1] * 4


def test_a_chunk_of_the_wrong_size_is_an_error(gz, tmp_path):
    root = str(tmp_path / "bad.zarr")
    z = gz.open_array(root, mode="w", shape=(8,), chunks=(4,), dtype="i4",
                      compressor=None)
    z[:] = np.arange(8)
    with open(os.path.join(root, "1"), "wb") as f:
        f.write(b"short")
    with pytest.raises(ValueError, match="chunk '1' .* holds 5 bytes"):
        gz.open_array(root, mode="r")[:]


def host_reads():
    return gpufile.stats()["gpufile"]["read"]["host"]


def rows_array(gz, root):
    """(the values, the array opened for reading): 64 x 48 uint32 in
    whole-row chunks of 8 rows, uncompressed."""
    a = np.arange(64 * 48, dtype="<u4").reshape(64, 48)
    z = gz.open_array(root, mode="w", shape=a.shape, chunks=(8, 48),
                      dtype=a.dtype, compressor=None)
    z[:] = a
    return a, gz.open_array(root, mode="r")


def count_chunk_buffers(monkeypatch):
    """The sizes of the chunk buffers (_ranges.new_bytes) made from now on,
    a list that grows."""
    from gpufile import _ranges
    buffers = []
    real = _ranges.new_bytes

    def counting(n):
        buffers.append(n)
        return real(n)
    monkeypatch.setattr(_ranges, "new_bytes", counting)
    return buffers


def test_a_selection_is_one_batch_read_in_place(gz, tmp_path, monkeypatch):
    a, r = rows_array(gz, str(tmp_path / "b.zarr"))
    buffers = count_chunk_buffers(monkeypatch)
    before = host_reads()
    same(r[8:40], a[8:40])  # 4 whole chunks, contiguous in the result
    after = host_reads()
    assert after["ops"] - before["ops"] == 1
    assert after["tasks"] - before["tasks"] == 4
    assert buffers == []  # straight into the result
    before = host_reads()
    same(r[3:41, 5:40], a[3:41, 5:40])  # 6 chunks, each cut
    after = host_reads()
    assert after["ops"] - before["ops"] == 1
    assert after["tasks"] - before["tasks"] == 6
    assert buffers == [8 * 48 * 4] * 6
    # A chunk whose rows are not contiguous in the result (here 16 of 48
    # columns) goes through a chunk buffer, in the same one batch.
    z2 = gz.open_array(str(tmp_path / "c.zarr"), mode="w", shape=a.shape,
                       chunks=(8, 16), dtype=a.dtype, compressor=None)
    z2[:] = a
    del buffers[:]
    before = host_reads()
    same(z2[:], a)
    assert host_reads()["ops"] - before["ops"] == 1
    assert len(buffers) == 8 * 3


def test_results_that_are_not_one_block_go_through_chunk_buffers(
        gz, tmp_path, monkeypatch):
    # Whole chunks are read in place where the result is one writable
    # block (its parts found from its shape and strides); any other result
    # gets them through chunk buffers, copied in by zarr.
    a, r = rows_array(gz, str(tmp_path / "o.zarr"))
    buffers = count_chunk_buffers(monkeypatch)
    block = np.zeros_like(a)
    r.get_basic_selection(Ellipsis, out=block)
    same(block, a)
    assert buffers == []
    strided = np.zeros((128, 48), dtype=a.dtype)[::2]  # every other row
    r.get_basic_selection(Ellipsis, out=strided)
    same(strided, a)
    assert buffers == [8 * 48 * 4] * 8
    del buffers[:]
    fortran = np.zeros(a.shape, dtype=a.dtype, order="F")
    r.get_basic_selection(Ellipsis, out=fortran)
    same(fortran, a)
    assert buffers == [8 * 48 * 4] * 8
    # A result of another dtype gets the values converted, as zarr
    # converts them: narrower (a chunk's bytes would overrun its part),
    # and as wide (its bits would be another number).
    del buffers[:]
    narrow = np.zeros(a.shape, dtype="<u2")
    r.get_basic_selection(Ellipsis, out=narrow)
    same(narrow, a.astype("<u2"))
    assert buffers == [8 * 48 * 4] * 8
    floats = np.zeros(a.shape, dtype="<f4")
    r.get_basic_selection(Ellipsis, out=floats)
    same(floats, a.astype("<f4"))
    frozen = np.zeros_like(a)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        r.get_basic_selection(Ellipsis, out=frozen)
    assert not frozen.any()


class _Recording(numcodecs.abc.Codec if zarr else object):
    """Zlib, recording which thread decoded each chunk (and failing on a
    chunk whose bytes are not zlib's, as Zlib does)."""
    codec_id = "gpufile-test-recording"
    threads = []

    def __init__(self, level=1):
        self.level = level
        self._zlib = numcodecs.Zlib(level)

    def encode(self, buf):
        return self._zlib.encode(buf)

    def decode(self, buf, out=None):
        import threading
        _Recording.threads.append(threading.get_ident())
        return self._zlib.decode(buf, out)


def _recording_array(gz, root):
    numcodecs.register_codec(_Recording)
    a = sample("<i4", (40, 30), seed=3)
    z = gz.open_array(root, mode="w", shape=a.shape, chunks=(8, 7),
                      dtype=a.dtype, compressor=_Recording())
    z[:] = a  # 5 x 5 chunks, ragged at both ends
    return a


def test_compressed_chunks_are_decoded_on_threads(gz, tmp_path,
                                                  monkeypatch):
    import threading
    # Small chunks: decoded in turn unless told otherwise.
    monkeypatch.setattr(gz, "DECODE_THREADS_MIN_BYTES", 0)
    root = str(tmp_path / "r.zarr")
    a = _recording_array(gz, root)
    r = gz.open_array(root, mode="r")
    del _Recording.threads[:]
    same(r[:], a)
    assert len(_Recording.threads) == 25
    if (os.cpu_count() or 1) >= 2:  # one core: decoded in turn
        assert threading.get_ident() not in _Recording.threads
    for sel in [(slice(3, 37), slice(6, 29)), (slice(None), slice(28, 30)),
                (5, slice(None)), (slice(39, 40), slice(0, 1))]:
        same(r[sel], a[sel])
    same(r.oindex[[0, 17, 39], [29, 3]], a[np.ix_([0, 17, 39], [29, 3])])
    same(zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")[:], a)
    monkeypatch.undo()  # small selections: on the caller's thread
    del _Recording.threads[:]
    same(gz.open_array(root, mode="r")[:], a)
    assert set(_Recording.threads) == {threading.get_ident()}


def test_a_chunk_that_does_not_decode_is_its_codec_error(gz, tmp_path,
                                                         monkeypatch):
    monkeypatch.setattr(gz, "DECODE_THREADS_MIN_BYTES", 0)
    root = str(tmp_path / "x.zarr")
    _recording_array(gz, root)
    with open(os.path.join(root, "2.3"), "wb") as f:
        f.write(b"not zlib")
    with pytest.raises(Exception) as theirs:
        zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")[:]
    with pytest.raises(type(theirs.value)):
        gz.open_array(root, mode="r")[:]
    r = gz.open_array(root, mode="r")
    same(r[:16], zarr.open_array(zarr.storage.DirectoryStore(root),
                                 mode="r")[:16])  # the others still read


def test_store_getitems_is_one_batch(gz, tmp_path):
    root = str(tmp_path / "g.zarr")
    z = zarr.open_array(zarr.storage.DirectoryStore(root), mode="w",
                        shape=(100,), chunks=(10,), dtype="i8")
    z[:] = np.arange(100)
    s = gz.Store(root)
    before = host_reads()
    got = s.getitems(["0", "5", "9", "nope"], on_error="omit")
    after = host_reads()
    assert sorted(got) == ["0", "5", "9"]
    raw = zarr.storage.DirectoryStore(root)
    assert all(got[k] == raw[k] for k in got)
    assert after["ops"] - before["ops"] == 1 and \
        after["tasks"] - before["tasks"] == 3
    assert s[".zarray"] == raw[".zarray"]
    os.mkdir(os.path.join(root, "sub"))
    for key in ("nope", "sub"):  # no such file; a folder
        with pytest.raises(KeyError):
            s[key]
    # zarr's own Array over the store reads through getitems too.
    same(zarr.open_array(s, mode="r")[:], np.arange(100))


def test_writes_go_through_gpufile(gz, tmp_path):
    root = str(tmp_path / "w.zarr")
    before = gpufile.stats()["gpufile"]["write"]["host"]["bytes"]
    z = gz.open_array(root, mode="w", shape=(1000,), chunks=(100,),
                      dtype="f8", compressor=None)
    z[:] = np.arange(1000.0)
    after = gpufile.stats()["gpufile"]["write"]["host"]["bytes"]
    assert after - before >= 8000
    assert sorted(os.listdir(root))[:3] == [".zarray", "0", "1"]
    assert not [n for n in os.listdir(root) if n.endswith(".partial")]


def test_pickled_array_stays_a_gpufile_array(gz, tmp_path):
    import pickle
    root = str(tmp_path / "p.zarr")
    z = gz.open_array(root, mode="w", shape=(10,), chunks=(3,), dtype="i4",
                      compressor=None)
    z[:] = np.arange(10)
    r = pickle.loads(pickle.dumps(gz.open_array(root, mode="r")))
    assert type(r) is gz.Array and isinstance(r.store, gz.Store)
    same(r[:], np.arange(10, dtype="i4"))


def test_zarr_through_the_fsspec_protocol(gz, tmp_path):
    pytest.importorskip("fsspec")
    import gpufile.fsspec  # noqa: F401  (registers "gpufile")
    url = "gpufile://" + str(tmp_path / "f.zarr")
    a = sample("<i8", (30, 7), seed=4)
    z = zarr.open_array(url, mode="w", shape=a.shape, chunks=(8, 3),
                        dtype=a.dtype)
    z[:] = a
    before = host_reads()
    same(zarr.open_array(url, mode="r")[:], a)
    assert host_reads()["ops"] > before["ops"]
    same(gz.open_array(str(tmp_path / "f.zarr"), mode="r")[:], a)


def test_remote_store_refuses_writes(gz):
    s = gz.RemoteStore("https://example.invalid/a.zarr")
    with pytest.raises(PermissionError, match="writing '0'"):
        s["0"] = b"x"
    with pytest.raises(ValueError, match="no http"):
        gz.RemoteStore("/local/path")
    assert isinstance(gz.store("s3://b/a.zarr"), gz.RemoteStore)
