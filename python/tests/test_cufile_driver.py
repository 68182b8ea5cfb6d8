"""gpufile.cufile_driver against the fake libcufile (tests/fake_cufile),
in a child process so that the cuFile library this process may already
have loaded does not matter."""
import os
import subprocess
import sys

import pytest

import gpufile
from conftest import missing

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import sys
sys.path.insert(0, %(pkg)r)
import gpufile
from gpufile import cufile_driver as d

props = d.properties()
assert len(props) == 15 and sum(props.values()) == 5, props
all_ = d.get()
assert all_["poll_mode"] is False and all_["allow_compat_mode"] is True, all_
assert all_["is_gds_available"] is False
with d.set("poll_mode", True, poll_thresh_size=64):
    assert d.get("poll_mode") is True
    assert d.get("poll_thresh_size") == 64
assert d.get("poll_mode") is False and d.get("poll_thresh_size") == 4
d.set({"max_direct_io_size": 8192, "max_pinned_memory_size": 65536})
assert d.get("max_direct_io_size") == 8192
try:
    d.set("major_version", 3)
    raise SystemExit("read-only property was set")
except PermissionError as e:
    assert "read-only" in str(e)
try:
    d.get("nope")
    raise SystemExit("unknown property was read")
except FileNotFoundError as e:
    assert "nope" in str(e)
import os
os.environ["FAKE_CUFILE_REFUSE"] = "cuFileDriverSetMaxCacheSize"
try:
    d.set("max_device_cache_size", 1)
    raise SystemExit("refused value was accepted")
except gpufile.Error as e:
    assert "max_device_cache_size=1" in str(e), str(e)
    assert e.cufile_status_name == "CU_FILE_DRIVER_UNSUPPORTED_LIMIT", str(e)
del os.environ["FAKE_CUFILE_REFUSE"]
d.driver_close()
d.driver_open()
print("ok")
"""


def fake_cufile():
    lib = gpufile.library_path()
    path = os.path.join(os.path.dirname(lib), "tests", "fake_cufile",
                        "libfake_cufile.so")
    return path if os.path.exists(path) else None


def test_driver_properties():
    fake = fake_cufile()
    if not fake:
        missing("libfake_cufile.so not built next to the library")
    env = dict(os.environ, GPUFILE_CUFILE_LIBRARY=fake,
               GPUFILE_LIBRARY=gpufile.library_path())
    out = subprocess.run([sys.executable, "-c",
                          CHILD % {"pkg": os.path.dirname(HERE)}],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok")


def test_missing_library(tmp_path):
    env = dict(os.environ, GPUFILE_CUFILE_LIBRARY=str(tmp_path / "none.so"),
               GPUFILE_LIBRARY=gpufile.library_path())
    code = ("import sys; sys.path.insert(0, %r); import gpufile\n"
            "try:\n    gpufile.cufile_driver.get('poll_mode')\n"
            "except gpufile.Error as e:\n    print('none.so' in str(e))\n"
            % os.path.dirname(HERE))
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stdout + out.stderr


def test_value_beyond_uint64_refused():
    # Checked before the driver is opened: ctypes passed the value modulo
    # 2**64, and 2**64 + 8192 KiB set 8192.
    for v in (1 << 64, (1 << 64) + 8192):
        with pytest.raises(OverflowError, match="max_direct_io_size: %d" % v):
            gpufile.cufile_driver.set("max_direct_io_size", v)


def test_property_name_checked_before_the_driver():
    # A C string ends at a NUL: get("poll_mode\0junk") read poll_mode;
    # set(3, 1) raised AttributeError ('int' object has no attribute
    # 'encode').
    d = gpufile.cufile_driver
    with pytest.raises(ValueError, match="embedded null byte"):
        d.get("poll_mode\0junk")
    with pytest.raises(ValueError, match="embedded null byte"):
        d.set("poll_thresh_size\0junk", 64)
    with pytest.raises(TypeError, match="property name is a str, not int"):
        d.set(3, 1)
    with pytest.raises(TypeError, match="property name is a str, not int"):
        d.set({3: 1})
