"""gpufile.Mmap: KvikIO's Mmap API over gpufile_mmap_*."""
import errno
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from conftest import PKG_ROOT, needs_gpu


def test_read_host(data_file):
    path, data = data_file
    with gpufile.Mmap(path) as m:
        assert m.file_size() == len(data)
        assert m.initial_map_offset() == 0
        assert m.initial_map_size() == len(data)
        out = np.zeros(len(data), dtype=np.uint8)
        assert m.read(out) == len(data)
        assert (out == data).all()
        part = np.zeros(1000, dtype=np.uint8)
        assert m.read(part, 1000, 4000) == 1000
        assert (part == data[4000:5000]).all()
        fut = m.pread(out, 3 << 20, 123)
        assert fut.get() == 3 << 20
        assert (out[:3 << 20] == data[123:123 + (3 << 20)]).all()
        assert m.path_info().path == "mmap"


def test_window_and_errors(data_file, tmp_path):
    path, data = data_file
    before = gpufile.stats()["gpufile"]["read"]["mmap"]["ops"]
    with gpufile.Mmap(path, "r", initial_map_size=10000,
                      initial_map_offset=5000) as m:
        out = bytearray(20000)
        # size None: to the end of the map.
        assert m.read(out, offset=6000) == 9000
        assert bytes(out[:9000]) == data[6000:15000].tobytes()
        with pytest.raises(OSError) as e:
            m.read(out, 10, 4999)
        assert "outside the mapped range" in str(e.value)
        with pytest.raises(OSError):
            m.read(out, 2, 14999)
    assert gpufile.stats()["gpufile"]["read"]["mmap"]["ops"] == before + 1
    with pytest.raises(gpufile.Error) as e:
        gpufile.Mmap(path, "w")
    assert '"w"' in str(e.value)
    with pytest.raises(FileNotFoundError):
        gpufile.Mmap(str(tmp_path / "absent"))
    with pytest.raises(OSError):
        gpufile.Mmap(path, initial_map_offset=len(data) + 1)
    m = gpufile.Mmap(path)
    m.close()
    m.close()
    with pytest.raises(ValueError) as e:
        m.read(bytearray(10))
    assert "closed" in str(e.value)


@needs_gpu
def test_read_device(data_file):
    import cupy
    path, data = data_file
    a = cupy.zeros(len(data), dtype=cupy.uint8)
    with gpufile.Mmap(path) as m:
        assert m.read(a) == len(data)
        assert (cupy.asnumpy(a) == data).all()
        a[:] = 0
        assert m.pread(a, len(data) - 7, 7).get() == len(data) - 7
        assert (cupy.asnumpy(a[:len(data) - 7]) == data[7:]).all()


def _run(code, *args):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    return subprocess.run([sys.executable, "-c", code] + list(args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


# The recipe: faulthandler (which pytest enables) installed after
# gpufile's SIGBUS handler, then the file cut short under the map. Run in a
# child, so that a crash is its exit status, not pytest's.
_CUT_UNDER_FAULTHANDLER = """
import faulthandler, os, sys
import numpy as np
import gpufile
p = sys.argv[1]
m = gpufile.Mmap(p)
b = np.zeros(m.initial_map_size(), dtype=np.uint8)
m.read(b)
faulthandler.enable()
os.truncate(p, 4096)
faults = gpufile.stats()["gpufile"]["map_copy_faults"]
# The whole map (large tasks: the streaming copy) and 64 KiB past the new
# end (memcpy under the guard, which faults).
for size, offset in ((len(b), 0), (65536, 1 << 20)):
    try:
        m.read(b, size, offset)
        print("read", flush=True)
    except OSError as e:
        print("error", e.errno, "shrank" in str(e), flush=True)
print("faults", gpufile.stats()["gpufile"]["map_copy_faults"] - faults)
"""


def test_cut_short_under_faulthandler(data_file):
    path, _ = data_file
    r = _run(_CUT_UNDER_FAULTHANDLER, path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[:2] == ["error %d True" % errno.EIO] * 2, r.stdout
    # The guarded copy ran, faulthandler's handler in place or not.
    assert lines[2].startswith("faults ") and int(lines[2].split()[1]) >= 1


# A SIGBUS that is not gpufile's, once gpufile's handler went back over
# faulthandler's: faulthandler reports it, once, and the process ends as
# it would without gpufile.
_FOREIGN_UNDER_FAULTHANDLER = """
import faulthandler, mmap, os, sys
import numpy as np
import gpufile
p, q = sys.argv[1:]
m = gpufile.Mmap(p)
b = np.zeros(65536, dtype=np.uint8)
m.read(b)
faulthandler.enable()
m.read(b)
with open(q, "wb") as f:
    f.write(b"x" * 8192)
with open(q, "rb") as f:
    mm = mmap.mmap(f.fileno(), 8192, prot=mmap.PROT_READ)
os.truncate(q, 0)
print("touching", flush=True)
mm[4096]
print("survived", flush=True)
"""


def test_foreign_sigbus_reaches_faulthandler(data_file, tmp_path):
    path, _ = data_file
    r = _run(_FOREIGN_UNDER_FAULTHANDLER, path, str(tmp_path / "foreign.bin"))
    assert r.stdout == "touching\n"
    assert r.stderr.count("Fatal Python error: Bus error") == 1, r.stderr
    # Then the default disposition (or, in the sanitizer stage, the
    # sanitizer's handler, which was there before gpufile's).
    if "Sanitizer" in r.stderr:
        assert r.returncode != 0
    else:
        assert r.returncode == -signal.SIGBUS
