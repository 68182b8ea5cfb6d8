"""The Python package's version is the C library's: both come from the
one place it is written (include/gpufile.h), never from pyproject.toml."""
import os
import re

import gpufile

PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "pyproject.toml")


def test_package_version_is_the_library_version():
    assert re.match(r"^\d+\.\d+\.\d+$", gpufile.__version__)
    assert gpufile.__version__ == gpufile.version()


def test_pyproject_does_not_write_the_version():
    if not os.path.exists(PYPROJECT):
        return  # an installed copy
    with open(PYPROJECT) as f:
        text = f.read()
    assert not re.search(r"^version\s*=\s*[\"']", text, flags=re.M), \
        "pyproject.toml hard-codes the version; it comes from gpufile/_version.py"
    assert 'dynamic = ["version"]' in text
