"""The index of a sharded checkpoint as load_checkpoint (and load_distributed,
through the same checkpoint_files) reads it: shards named by many tensors,
and index paths that are no regular file. The cases that could hang or eat
memory run in a child process under a CPU-time or memory limit, or a wall
timeout that only turns a hang into a failure (nothing is asserted about
how long anything takes)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile.safetensors as st
import gpufile.safetensors.numpy as stn
from gpufile.safetensors import _core

ENV = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
    os.path.dirname(st.__file__))))

# The child: limits first, then the call; prints what it raised.
_CHILD = r"""
import resource, sys
what, limit = sys.argv[1], int(sys.argv[2])
if what == "cpu":
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
else:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import gpufile.safetensors.numpy as stn
for where in sys.argv[3:]:
    try:
        stn.load_checkpoint(where)
        print("loaded")
    except (OSError, ValueError) as e:
        print(type(e).__name__, e)
"""


def _child(what, limit, *paths):
    """The child's lines; a wall timeout far past any honest run, so that
    a hang fails the test instead of stalling it."""
    p = subprocess.run([sys.executable, "-c", _CHILD, what, str(limit)] + list(paths),
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    return p.stdout.splitlines()


def test_index_of_many_shards_is_read_in_linear_time(tmp_path):
    """200000 tensors over 100000 shards: the shards were kept in a list
    searched once per tensor (10^10 string comparisons, minutes of CPU);
    now the index is read in about a second and load reaches the first
    missing shard, in the index's order. The child dies of SIGXCPU past
    60 s of CPU time (not wall time: the machine may be loaded)."""
    n = 200000
    wm = {"t%06d" % k: "s%06d.safetensors" % (99999 - k // 2) for k in range(n)}
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": wm}))
    lines = _child("cpu", 60, str(index))
    assert len(lines) == 1 and lines[0].startswith("FileNotFoundError"), lines
    assert str(tmp_path / "s099999.safetensors") in lines[0]


def test_shard_repeats_keep_first_appearance_order(tmp_path):
    wm = {"a": "y.safetensors", "b": "./x.safetensors", "c": "y.safetensors",
          "d": "x.safetensors", "e": "sub//z.safetensors", "f": "./y.safetensors"}
    index = tmp_path / "m.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": wm}))
    got, folder, shards = _core.checkpoint_files(str(index))
    assert got == {"weight_map": wm} and folder == str(tmp_path)
    assert shards == [str(tmp_path / n) for n in
                      ("y.safetensors", "x.safetensors", "sub/z.safetensors")]


def test_fifo_index_is_refused(tmp_path):
    """A FIFO named as an index (or as the index of a folder) blocked in
    open() for ever, waiting for a writer; now it is refused, named."""
    os.mkfifo(tmp_path / "a.safetensors.index.json")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "model.safetensors.index.json")
    named = [str(tmp_path / "a.safetensors.index.json"), str(tmp_path / "d")]
    lines = _child("cpu", 60, *named)
    assert len(lines) == 2, lines
    for line, path in zip(lines, [named[0], named[1] + "/model.safetensors.index.json"]):
        assert line == ("ValueError %s: not a regular file but a FIFO (named pipe) "
                        "(an index is a JSON file)" % path), lines


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="an address-space limit cannot bound a process "
                    "whose ASan runtime maps terabytes of shadow memory "
                    "(the plain python stage runs this test)")
def test_dev_zero_index_is_refused(tmp_path):
    """An index that is a symlink to /dev/zero was read until memory ran
    out (here: MemoryError under a 2 GiB address-space limit); now it is
    refused before any read."""
    link = tmp_path / "z.safetensors.index.json"
    os.symlink("/dev/zero", link)
    lines = _child("as", 2 << 30, str(link))
    assert lines == ["ValueError %s: not a regular file but a character device "
                     "(an index is a JSON file)" % link], lines


def test_index_errors_still_name_the_file(tmp_path):
    missing = tmp_path / "no.safetensors.index.json"
    with pytest.raises(FileNotFoundError) as e:
        stn.load_checkpoint(str(missing))
    assert e.value.filename == str(missing)
    bad = tmp_path / "bad.safetensors.index.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="bad.safetensors.index.json: not a valid JSON"):
        stn.load_checkpoint(str(bad))


_FIFO_FILE = r"""
import sys
import gpufile, gpufile.safetensors as st
p = sys.argv[1]
for f in (lambda: gpufile.File(p), lambda: st.safe_open(p, "numpy"),
          lambda: st.load_file(p, device="cpu", framework="numpy"),
          lambda: st.load_checkpoint(p, device="cpu", framework="numpy")):
    try:
        f()
        print("opened")
    except OSError as e:
        print(e.filename, "FIFO" in str(e))
"""


def test_fifo_shard_is_refused_without_blocking(tmp_path):
    """The shard itself is opened by the library, which refuses a FIFO
    (ESPIPE) without opening it for reading: File, safe_open, load_file
    and a one-file load_checkpoint all say so instead of hanging."""
    p = str(tmp_path / "f.safetensors")
    os.mkfifo(p)
    out = subprocess.run([sys.executable, "-c", _FIFO_FILE, p], env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["%s True" % p] * 4


def test_small_checkpoint_still_loads(tmp_path):
    stn.save_file({"a": np.arange(3, dtype=np.float32)}, str(tmp_path / "x.safetensors"))
    stn.save_file({"b": np.ones(2, np.int64)}, str(tmp_path / "y.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"b": "y.safetensors", "a": "./x.safetensors"}}))
    got = stn.load_checkpoint(str(tmp_path))
    assert sorted(got) == ["a", "b"] and got["a"].tolist() == [0, 1, 2]
