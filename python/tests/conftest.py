"""Shared fixtures. Run from the repo root:

    GPUFILE_LIBRARY=$PWD/build/libgpufile.so /usr/bin/python3 -m pytest -q python/tests

The package is imported from python/ of this checkout (not an installed
copy) unless GPUFILE_TEST_INSTALLED=1.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
if os.environ.get("GPUFILE_TEST_INSTALLED") != "1" and PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

import gpufile  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Every test starts from the environment's settings."""
    gpufile.defaults.reset()
    yield
    gpufile.defaults.reset()


@pytest.fixture
def data_file(tmp_path):
    """A 5 MiB + 123 bytes file of known bytes; returns (path, bytes)."""
    import numpy as np

    data = np.random.default_rng(7).integers(0, 256, (5 << 20) + 123, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(data.tobytes())
    return str(path), data


def have_gpu():
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    try:
        return gpufile.cuda_device_count() > 0
    except Exception:
        return False


needs_gpu = pytest.mark.skipif(not have_gpu(), reason="needs CuPy and a CUDA GPU")


def in_ci():
    """Whether this runs under CI (CI set, and not "", "0" or "false";
    .ci/run runs with CI=true)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def missing(what):
    """A test needs what (a program, module or build product) that
    scripts/deps.sh or scripts/test.sh installs or builds, and it is
    missing: a skip, or under CI, where it must be there, a failure."""
    if in_ci():
        pytest.fail("%s: missing under CI (CI=%s), where scripts/deps.sh or "
                    "scripts/test.sh installs it" % (what, os.environ["CI"]),
                    pytrace=False)
    pytest.skip(what)
