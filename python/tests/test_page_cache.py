"""Page-cache controls from Python: counts, per-file drop, and the
system-wide drop refused without root."""
import os

import pytest

import gpufile


def test_info_and_drop(data_file):
    path, data = data_file
    with gpufile.File(path) as f:
        buf = bytearray(len(data))
        assert f.read(buf) == len(data)
        assert gpufile.page_cache_info(path) == (len(data), len(data))
        assert gpufile.page_cache_info(f, 100, 5000) == (5000, 5000)
        gpufile.drop_file_page_cache(f)
        assert gpufile.page_cache_info(f) == (0, len(data))
    with open(path, "rb") as raw:
        raw.read()
    assert gpufile.page_cache_info(path)[0] == len(data)
    gpufile.drop_file_page_cache(path)
    assert gpufile.page_cache_info(path) == (0, len(data))


def test_errors(tmp_path):
    missing = str(tmp_path / "missing.bin")
    with pytest.raises(FileNotFoundError) as e:
        gpufile.page_cache_info(missing)
    assert "missing.bin" in str(e.value)
    with pytest.raises(FileNotFoundError):
        gpufile.drop_file_page_cache(missing)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may drop the caches")
def test_system_drop_needs_root():
    with pytest.raises(PermissionError) as e:
        gpufile.drop_system_page_cache()
    assert "needs root" in str(e.value)


def test_system_drop_refused_in_child_without_root():
    """As root, a child that gave up root is refused (never a real drop
    here: the parent does not call it)."""
    if os.geteuid() != 0:
        pytest.skip("not root: covered by test_system_drop_needs_root")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setresuid(65534, 65534, 65534)
            try:
                gpufile.drop_system_page_cache()
            except PermissionError as exc:
                code = 0 if "needs root" in str(exc) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
