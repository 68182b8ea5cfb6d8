"""gpufile.Mmap: KvikIO's Mmap API over gpufile_mmap_*."""
import numpy as np
import pytest

import gpufile
from conftest import needs_gpu


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
