"""gpufile.safetensors as a drop-in for safetensors (issue 34 item 3), the
parts NumPy shows: SafetensorError where safetensors raises it (still
the OSError, KeyError, ValueError, IndexError gpufile raised), keys() on
a closed file, get_tensors(), the 0-d big-endian save, a save that fails
part-way, get_slice with a bool index. Torch's part:
test_safetensors_torch.py."""
import errno
import os
import pickle
import stat
import struct
import subprocess
import sys

import numpy as np
import pytest

import gpufile.safetensors as st
import gpufile.safetensors.numpy as stn
from gpufile.safetensors import SafetensorError


@pytest.fixture
def small(tmp_path):
    p = str(tmp_path / "small.safetensors")
    stn.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3),
                   "s": np.array(7, dtype=np.int16)}, p)
    return p


def _raw(path, header, data=b""):
    h = header.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    return path


def test_safetensor_error_for_a_malformed_file(tmp_path):
    p = _raw(str(tmp_path / "bad.safetensors"),
             '{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1e400}}', b"x")
    for call in (lambda: st.safe_open(p, framework="numpy"), lambda: stn.load_file(p)):
        with pytest.raises(SafetensorError) as ei:
            call()
        e = ei.value
        # Still the OSError gpufile raised: errno, filename, gpufile's code.
        assert isinstance(e, OSError) and e.errno == errno.EBADMSG
        assert e.filename == p and e.code_name == "EBADMSG"
        assert "too large for a double" in str(e)
    # Picklable (safetensors' is), as the same class.
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is type(e) and e2.errno == errno.EBADMSG


def test_missing_file_is_file_not_found(tmp_path):
    """Not a SafetensorError: safetensors raises FileNotFoundError too."""
    with pytest.raises(FileNotFoundError) as ei:
        st.safe_open(str(tmp_path / "nope.safetensors"), framework="numpy")
    assert not isinstance(ei.value, SafetensorError)


def test_safetensor_error_for_a_missing_tensor(small):
    with st.safe_open(small, framework="numpy") as f:
        for call in (lambda: f.get_tensor("zz"), lambda: f.get_slice("zz")):
            with pytest.raises(SafetensorError) as ei:
                call()
            assert isinstance(ei.value, KeyError)
            assert str(ei.value) == "%s: no tensor named 'zz'" % small


def test_closed_file_raises_for_every_call(small):
    """keys() answered from the parsed header after close(); safetensors
    raises SafetensorError ("File is closed") there, as for every call."""
    f = st.safe_open(small, framework="numpy")
    sl = f.get_slice("a")
    f.close()
    calls = {"keys": f.keys, "offset_keys": f.offset_keys, "metadata": f.metadata,
             "get_tensor": lambda: f.get_tensor("a"),
             "get_slice": lambda: f.get_slice("a"), "get_tensors": f.get_tensors,
             "tensor_info": lambda: f.tensor_info("a"), "slice read": lambda: sl[0]}
    for what, call in calls.items():
        with pytest.raises(SafetensorError, match="closed safetensors file") as ei:
            call()
        assert isinstance(ei.value, ValueError), what
    # A with block closes it as well.
    with st.safe_open(small, framework="numpy") as g:
        pass
    with pytest.raises(SafetensorError):
        g.keys()


def test_safetensor_error_for_framework_device_and_slice(small):
    with pytest.raises(SafetensorError, match="framework 'tf'") as ei:
        st.safe_open(small, framework="tf")
    assert isinstance(ei.value, ValueError)
    with pytest.raises(SafetensorError, match="device 'gpu7'") as ei:
        st.safe_open(small, framework="numpy", device="gpu7")
    assert isinstance(ei.value, ValueError)
    with pytest.raises(SafetensorError) as ei:
        st.safe_open(small, framework="numpy", device=True)
    assert isinstance(ei.value, TypeError)
    # NumPy on a GPU: refused at open, where safetensors refuses it.
    with pytest.raises(SafetensorError, match="host memory"):
        st.safe_open(small, framework="numpy", device="cuda:0")
    with st.safe_open(small, framework="numpy") as f:
        with pytest.raises(SafetensorError, match="out of bounds") as ei:
            f.get_slice("a")[5]
        assert isinstance(ei.value, IndexError)


def test_get_tensors(small):
    with st.safe_open(small, framework="numpy") as f:
        got = f.get_tensors()
        assert sorted(got) == f.keys() == ["a", "s"]
        for k in got:
            np.testing.assert_array_equal(got[k], f.get_tensor(k))
            assert got[k].shape == f.get_tensor(k).shape


def test_numpy_0d_big_endian_keeps_shape(tmp_path):
    """np.ascontiguousarray made a 0-d big-endian array 1-d: the file
    said shape [1] where safetensors writes []."""
    p = str(tmp_path / "be.safetensors")
    d = {"be0": np.array(7, dtype=">i4"), "be1": np.array([1, 2], dtype=">f8"),
         "le0": np.array(3, dtype="<i4")}
    stn.save_file(d, p)
    raw = open(p, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert b'"be0":{"dtype":"I32","shape":[],' in raw[8:8 + n]
    got = stn.load_file(p)
    assert got["be0"].shape == () and got["be0"] == 7
    np.testing.assert_array_equal(got["be1"], [1.0, 2.0])
    assert d["be0"].dtype == np.dtype(">i4")  # the caller's array untouched


_FAIL_PART_WAY = r"""
import resource, signal, sys
import numpy as np
import gpufile.safetensors.numpy as stn
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
try:
    stn.save_file({"big": np.ones(1 << 18, dtype=np.float32)}, sys.argv[1])
except OSError as e:
    print("raised", e.errno)
else:
    print("saved")
"""


def test_save_failing_part_way_keeps_the_old_file(tmp_path):
    """A save_file that failed after its first write (here: past the
    process's file size limit, EFBIG) had truncated the file that was
    there. Now the new file is written beside it and renamed over it once
    whole: the old file is intact and no temporary file is left."""
    p = str(tmp_path / "keep.safetensors")
    old = {"w": np.arange(10, dtype=np.float32)}
    stn.save_file(old, p)
    before = open(p, "rb").read()
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
        os.path.dirname(st.__file__))))
    out = subprocess.run([sys.executable, "-c", _FAIL_PART_WAY, p], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["raised", str(errno.EFBIG)], out.stderr
    assert open(p, "rb").read() == before
    np.testing.assert_array_equal(stn.load_file(p)["w"], old["w"])
    assert sorted(os.listdir(tmp_path)) == ["keep.safetensors"]


def test_save_replaces_atomically_keeping_mode_and_links(tmp_path):
    p = str(tmp_path / "m.safetensors")
    stn.save_file({"a": np.zeros(3, np.float32)}, p)
    os.chmod(p, 0o640)
    ino = os.stat(p).st_ino
    stn.save_file({"a": np.ones(3, np.float32)}, p)
    assert os.stat(p).st_mode & 0o777 == 0o640
    assert os.stat(p).st_ino != ino  # a new file, renamed over the old
    np.testing.assert_array_equal(stn.load_file(p)["a"], np.ones(3))
    # Through a symbolic link: the file it names is replaced, the link kept.
    link = str(tmp_path / "link.safetensors")
    os.symlink(p, link)
    stn.save_file({"a": np.full(3, 2, np.float32)}, link)
    assert os.path.islink(link)
    np.testing.assert_array_equal(stn.load_file(p)["a"], np.full(3, 2))
    assert sorted(os.listdir(tmp_path)) == ["link.safetensors", "m.safetensors"]
    # Not a regular file: opened in place (a rename would replace it),
    # where gpufile refuses a character device.
    with pytest.raises(OSError, match="character device"):
        stn.save_file({"a": np.zeros(1)}, os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_save_into_a_missing_folder_names_the_file(tmp_path):
    p = str(tmp_path / "no" / "x.safetensors")
    with pytest.raises(FileNotFoundError) as ei:
        stn.save_file({"a": np.zeros(1)}, p)
    assert ei.value.filename == p


def test_failed_save_before_writing_leaves_nothing(tmp_path):
    p = str(tmp_path / "n.safetensors")
    with pytest.raises(ValueError):
        stn.save_file({"x": np.zeros(2, dtype=np.complex128)}, p)
    assert os.listdir(tmp_path) == []


def test_get_slice_bool_index_is_numpy_indexing(tmp_path):
    """[True] was counted as a dimension: on a 0-d tensor "too many
    indices"; NumPy gives shape (1,), [False] shape (0,)."""
    p = str(tmp_path / "b.safetensors")
    d = {"s": np.array(2.5, np.float32), "v": np.arange(4, dtype=np.int64)}
    stn.save_file(d, p)
    with st.safe_open(p, framework="numpy") as f:
        s, v = f.get_slice("s"), f.get_slice("v")
        for index in (True, False, (True,), (Ellipsis, True), (None, False)):
            np.testing.assert_array_equal(s[index], d["s"][index])
            assert s[index].shape == d["s"][index].shape
        for index in (True, (slice(1, 3), True), np.bool_(True)):
            np.testing.assert_array_equal(v[index], d["v"][index])
            assert v[index].shape == d["v"][index].shape
