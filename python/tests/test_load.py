"""Finding libgpufile.so."""
import os
import subprocess
import sys

import gpufile
from conftest import PKG_ROOT, missing


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    e["PYTHONPATH"] = PKG_ROOT
    return subprocess.run([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def test_loaded_from_env():
    want = os.environ.get("GPUFILE_LIBRARY")
    path = gpufile.library_path()
    assert "libgpufile.so" in path
    if want:
        assert os.path.realpath(path) == os.path.realpath(want)
    assert gpufile.version().count(".") == 2


def test_import_works_without_library_and_error_names_places():
    p = _run("import gpufile\n"
             "try:\n"
             "    gpufile.version()\n"
             "except gpufile.LibraryNotFoundError as e:\n"
             "    assert isinstance(e, OSError)\n"
             "    print(e)\n",
             GPUFILE_LIBRARY="/nonexistent/libgpufile.so")
    assert p.returncode == 0, p.stderr
    assert "$GPUFILE_LIBRARY: /nonexistent/libgpufile.so (no such file)" in p.stdout
    assert "GPUFILE_LIBRARY" in p.stdout


def test_not_a_gpufile_library():
    p = _run("import gpufile\n"
             "try:\n"
             "    gpufile.version()\n"
             "except OSError as e:\n"
             "    print(e)\n",
             GPUFILE_LIBRARY="libc.so.6")
    assert p.returncode == 0, p.stderr
    assert "not a usable libgpufile" in p.stdout


def test_search_without_env_lists_every_place():
    # Without GPUFILE_LIBRARY the package tries next to itself, the library
    # path, then the checkout's build/; either it loads one or names them.
    env = {k: v for k, v in os.environ.items() if k != "GPUFILE_LIBRARY"}
    env["PYTHONPATH"] = PKG_ROOT
    env["LD_LIBRARY_PATH"] = ""
    p = subprocess.run([sys.executable, "-c",
                        "import gpufile\n"
                        "try:\n    print('loaded', gpufile.library_path())\n"
                        "except OSError as e:\n    print(e)\n"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    assert p.returncode == 0, p.stderr
    if not p.stdout.startswith("loaded"):
        for where in ("next to the package", "the library path", "build folder"):
            assert where in p.stdout


import pytest  # noqa: E402


@pytest.mark.parametrize("libdir", ["lib", "lib64", "lib/x86_64-linux-gnu"])
def test_cli_found_in_bin_beside_lib(tmp_path, libdir):
    """The installed layout PREFIX/lib*/libgpufile.so + PREFIX/bin/gpufile:
    check() finds the tool without $GPUFILE_CLI or PATH (issue 11 item 11)."""
    import shutil

    try:
        cli = gpufile.cli_path()
    except OSError:
        missing("no gpufile tool built")
    prefix = tmp_path / "prefix"
    (prefix / libdir).mkdir(parents=True)
    (prefix / "bin").mkdir()
    lib = prefix / libdir / "libgpufile.so"
    shutil.copy(os.path.realpath(gpufile.library_path()), lib)
    shutil.copy(cli, prefix / "bin" / "gpufile")
    env = {k: v for k, v in os.environ.items() if k != "GPUFILE_CLI"}
    env.update(GPUFILE_LIBRARY=str(lib), PATH="/usr/bin:/bin", PYTHONPATH=PKG_ROOT)
    p = subprocess.run([sys.executable, "-c",
                        "import gpufile\n"
                        "print(gpufile.cli_path())\n"
                        "d = gpufile.check()\n"
                        "assert isinstance(d, dict) and d, d\n"],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == str(prefix / "bin" / "gpufile")
