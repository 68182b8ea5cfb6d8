"""gpufile.fsspec: fsspec's contract for what it implements (what is
written reads back, ranges as fsspec cuts them, missing files raise
FileNotFoundError), one batch per cat_ranges, and remote objects read
through gpufile's sources (tests/remote/fault_server.py)."""
import errno
import os

import numpy as np
import pytest

import gpufile
from conftest import in_ci, missing, remote_server

try:
    import fsspec
    import gpufile.fsspec as gfs
except ImportError as e:  # python3-fsspec (scripts/deps.sh)
    fsspec = None
    _why = str(e)

REMOTE_SIZE = (1 << 20) + 4097


@pytest.fixture(scope="module", autouse=True)
def _fsspec():
    if fsspec is None:
        missing("python3-fsspec (%s)" % _why)


@pytest.fixture(scope="module")
def fs():
    return fsspec.filesystem("gpufile")


@pytest.fixture(scope="module")
def blob(tmp_path_factory):
    data = np.random.default_rng(3).integers(0, 256, (3 << 20) + 77,
                                             dtype=np.uint8).tobytes()
    path = tmp_path_factory.mktemp("fsspec") / "blob.bin"
    path.write_bytes(data)
    return str(path), data


def host_reads():
    return gpufile.stats()["gpufile"]["read"]["host"]


def test_registered_for_the_protocol(blob):
    path, data = blob
    assert isinstance(fsspec.filesystem("gpufile"), gfs.GpufileFileSystem)
    fs, p = fsspec.core.url_to_fs("gpufile://" + path)
    assert isinstance(fs, gfs.GpufileFileSystem) and p == path
    with fsspec.open("gpufile://" + path, "rb") as f:
        assert f.read() == data
    # storage_options reach the filesystem (it takes none, and says so
    # by accepting the empty set as fsspec passes it).
    with fsspec.open("gpufile://" + path, "rb", **{}) as f:
        assert f.read(10) == data[:10]


def test_strip_protocol():
    s = gfs.GpufileFileSystem._strip_protocol
    assert s("gpufile:///tmp/x.bin") == "/tmp/x.bin"
    assert s("gpufile://file:///tmp/x.bin") == "/tmp/x.bin"
    assert s("gpufile://s3://bucket/a/b") == "s3://bucket/a/b"
    assert s("https://host/a/b") == "https://host/a/b"
    assert s("rel.bin") == os.path.join(os.getcwd(), "rel.bin")
    assert gfs.GpufileFileSystem._parent("s3://bucket/a/b") == "s3://bucket/a"
    assert gfs.GpufileFileSystem._parent("/tmp/x/y") == "/tmp/x"


@pytest.mark.parametrize("size", [0, 1, 4097, (1 << 20) + 3])
def test_written_reads_back(fs, tmp_path, size):
    data = os.urandom(size)
    p = str(tmp_path / "w.bin")
    fs.pipe_file(p, data)
    assert fs.cat_file(p) == data
    assert fs.info(p)["size"] == size
    assert open(p, "rb").read() == data
    q = str(tmp_path / "o.bin")
    with fs.open(q, "wb", block_size=1000) as f:
        for i in range(0, size, 777):
            f.write(data[i:i + 777])
    assert open(q, "rb").read() == data
    with fs.open(q, "rb") as f:
        assert f.read() == data


def test_cat_file_ranges_as_fsspec_cuts_them(fs, blob):
    path, data = blob
    n = len(data)
    for start, end in [(None, None), (0, 10), (10, 20), (-100, None),
                       (None, -100), (-100, -10), (n - 5, n + 100),
                       (n + 5, n + 10), (20, 10), (0, 0), (-n - 50, 10)]:
        want = data[slice(start, end)] if (start or 0) >= -n else data[:end]
        assert fs.cat_file(path, start, end) == want, (start, end)


def test_cat_ranges_are_one_batch(fs, blob, tmp_path):
    path, data = blob
    other = str(tmp_path / "other.bin")
    small = os.urandom(5000)
    with open(other, "wb") as f:
        f.write(small)
    rng = np.random.default_rng(11)
    starts = [int(s) for s in rng.integers(0, len(data), 300)]
    ends = [s + int(k) for s, k in zip(starts, rng.integers(1, 70000, 300))]
    paths = [path] * 300 + [other, other]
    starts += [4000, 0]
    ends += [9000, 5000]
    before = host_reads()
    got = fs.cat_ranges(paths, starts, ends)
    after = host_reads()
    want = [data[s:e] for s, e in zip(starts[:300], ends[:300])]
    want += [small[4000:], small]
    assert got == want
    assert all(type(b) is bytes for b in got)
    # One submit: one request of the host path whose tasks are the ranges.
    assert after["ops"] - before["ops"] == 1
    assert after["tasks"] - before["tasks"] == 302
    assert after["bytes"] - before["bytes"] == sum(map(len, want))


def test_cat_ranges_arguments(fs, blob):
    path, data = blob
    assert fs.cat_ranges([path, path], 5, 9) == [data[5:9]] * 2
    with pytest.raises(ValueError, match="2 paths, 1 starts"):
        fs.cat_ranges([path, path], [0], [1, 2])
    with pytest.raises(TypeError, match="paths must be a list"):
        fs.cat_ranges(path, [0], [1])


def test_missing_files_raise_file_not_found(fs, tmp_path, blob):
    nope = str(tmp_path / "nope.bin")
    for call in (lambda: fs.cat_file(nope), lambda: fs.open(nope, "rb"),
                 lambda: fs.info(nope), lambda: fs.cat(nope),
                 lambda: fs.ls(nope),
                 lambda: fs.cat_ranges([nope], [0], [5], on_error="raise"),
                 lambda: fs.open(str(tmp_path / "no" / "dir.bin"), "wb")):
        with pytest.raises(FileNotFoundError):
            call()
    assert not fs.exists(nope)
    got = fs.cat_ranges([blob[0], nope], [0, 0], [3, 3])
    assert got[0] == blob[1][:3] and isinstance(got[1], FileNotFoundError)
    assert nope in str(got[1])
    out = fs.cat([blob[0], nope], on_error="omit")
    assert list(out) == [blob[0]]
    out = fs.cat([blob[0], nope], on_error="return")
    assert isinstance(out[nope], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat([blob[0], nope])
    # FSMap (zarr's FSStore, dask) turns them into KeyError.
    m = fs.get_mapper(str(tmp_path))
    with pytest.raises(KeyError):
        m["nope.bin"]


def test_open_reads_with_readahead(fs, blob):
    path, data = blob
    rng = np.random.default_rng(5)
    before = host_reads()
    with fs.open(path, "rb", block_size=256 << 10) as f:
        assert f.size == len(data)
        for _ in range(200):
            off = int(rng.integers(0, len(data)))
            n = int(rng.integers(0, 5000))
            f.seek(off)
            assert f.read(n) == data[off:off + n]
        f.seek(0)
        for i in range(0, 1 << 20, 999):  # sequential small reads
            assert f.read(999) == data[i:i + 999]
    after = host_reads()
    # Sequential 999-byte reads over 1 MiB with 256 KiB of readahead:
    # a handful of gpufile reads, not a thousand.
    assert 0 < after["ops"] - before["ops"] < 250


def test_ls_glob_info(fs, tmp_path):
    (tmp_path / "d").mkdir()
    for name in ("a.bin", "b.bin", "c.txt"):
        fs.pipe_file(str(tmp_path / "d" / name), name.encode())
    fs.makedirs(str(tmp_path / "d" / "sub" / "deep"))
    d = str(tmp_path / "d")
    assert sorted(fs.ls(d, detail=False)) == [
        d + "/a.bin", d + "/b.bin", d + "/c.txt", d + "/sub"]
    assert sorted(fs.glob(d + "/*.bin")) == [d + "/a.bin", d + "/b.bin"]
    assert sorted(fs.glob("gpufile://" + d + "/*.txt")) == [d + "/c.txt"]
    info = fs.info(d + "/a.bin")
    assert info["type"] == "file" and info["size"] == 5
    assert fs.info(d)["type"] == "directory"
    assert fs.cat(d + "/*.bin") == {d + "/a.bin": b"a.bin",
                                    d + "/b.bin": b"b.bin"}
    fs.rm(d + "/c.txt")
    assert not fs.exists(d + "/c.txt")


def test_remote_namespace_refused_clearly(fs):
    url = "s3://bucket/some/key"
    with pytest.raises(NotImplementedError, match="listing.*s3://bucket/some"):
        fs.ls("s3://bucket/some")
    with pytest.raises(PermissionError) as e:
        fs.pipe_file(url, b"x")
    assert e.value.errno == errno.EROFS and url in str(e.value)
    with pytest.raises(PermissionError):
        fs.open("gpufile://" + url, "wb")
    with pytest.raises(NotImplementedError, match="rm"):
        fs.rm(url)
    with pytest.raises(ValueError, match="mode 'ab'"):
        fs.open("/tmp/x", "ab")


@pytest.fixture(scope="module")
def server():
    if "remote" not in gpufile.features():
        if in_ci():
            pytest.fail("built without libcurl under CI")
        pytest.skip("built without libcurl")
    with remote_server("fault_server.py", REMOTE_SIZE, 3) as port:
        yield "http://127.0.0.1:%d" % port


def remote_expected(off, n):
    i = np.arange(off, off + n, dtype=np.uint64)
    return ((i * 131 + (i >> 9)) & 255).astype(np.uint8).tobytes()


def test_remote_ranges_info_and_open(fs, server):
    url = server + "/ok/o.bin"
    assert fs.info("gpufile://" + url) == {"name": url, "size": REMOTE_SIZE,
                                           "type": "file"}
    starts = [0, 1000, REMOTE_SIZE - 10, 70000]
    ends = [10, 300000, REMOTE_SIZE + 10, 70001]
    got = fs.cat_ranges([url] * 4, starts, ends)
    assert got == [remote_expected(s, min(e, REMOTE_SIZE) - s)
                   for s, e in zip(starts, ends)]
    with fsspec.open("gpufile://" + url, "rb", block_size=64 << 10) as f:
        f.seek(123456)
        assert f.read(100000) == remote_expected(123456, 100000)
    with pytest.raises(FileNotFoundError):
        fs.cat_file(server + "/e404/o.bin")
    assert not fs.exists(server + "/e404/o.bin")
