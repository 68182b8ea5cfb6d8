"""gpufile.stats() of this process and of another one, explain() against
the CLI's --json, and check()."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from conftest import PKG_ROOT, missing

PATHS = {"host", "posix", "cufile", "small", "mmap", "remote"}


def _host_read(path, n):
    out = np.empty(n, dtype=np.uint8)
    with gpufile.File(path) as f:
        return f.read(out)


def test_stats_self_shape_and_counts(data_file):
    path, data = data_file
    before = gpufile.stats()
    assert set(before["gpufile"]["read"]) == PATHS
    assert set(before["gpufile"]["write"]) == PATHS
    assert before["pid"] == os.getpid()
    assert "cufile" in before and "gpus" in before["cufile"]
    with gpufile.defaults.set(task_size=1 << 20):
        assert _host_read(path, data.size) == data.size
    after = gpufile.stats(histograms=True)
    r0, r1 = before["gpufile"]["read"]["host"], after["gpufile"]["read"]["host"]
    assert r1["ops"] - r0["ops"] == 1
    assert r1["tasks"] - r0["tasks"] == 6
    assert r1["bytes"] - r0["bytes"] == data.size
    assert r1["errors"] == r0["errors"]
    for p in ("posix", "cufile", "small"):
        assert after["gpufile"]["read"][p] == before["gpufile"]["read"][p]
    assert sum(after["histograms"]["size_bytes"]["read"]["host"]) >= 1
    assert len(after["histograms"]["latency_ns"]["read"]["host"]) == 48
    json.dumps(after)  # plain data
    assert gpufile.stats(os.getpid())["gpufile"]["read"]["host"]["ops"] >= r1["ops"]


def test_stats_of_another_process(data_file):
    path, data = data_file
    code = ("import sys, gpufile, numpy as np\n"
            "with gpufile.defaults.set(task_size=1 << 20, host_map_copy='on'):\n"
            "    f = gpufile.File(sys.argv[1]); f.read(np.empty(%d, np.uint8))\n"
            "print('ready', gpufile.stats()['gpufile']['map_copy_bytes'], flush=True)\n"
            "sys.stdin.read()\n" % data.size)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    p = subprocess.Popen([sys.executable, "-c", code, path], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env, universal_newlines=True)
    try:
        word, mapped = p.stdout.readline().split()
        assert word == "ready"
        s = gpufile.stats(p.pid)
        assert s["pid"] == p.pid
        assert s["gpufile"]["read"]["host"] == {"ops": 1, "tasks": 6,
                                                "bytes": data.size, "errors": 0}
        # What the child counted of its map copies, seen from here: whole
        # 1 MiB tasks (where this CPU and the page cache allow the copy),
        # never the last 123 bytes (below 256 KiB).
        assert s["gpufile"]["map_copy_bytes"] == int(mapped)
        assert int(mapped) % (1 << 20) == 0 and int(mapped) <= data.size - 123
        assert s["gpufile"]["map_copy_faults"] == 0
        assert s["settings"]["task_size"]["value"] == str(1 << 20)
        assert any(q["pid"] == p.pid for q in gpufile.processes())
    finally:
        p.stdin.close()
        p.wait(timeout=30)


def test_stats_errors():
    with pytest.raises(ProcessLookupError) as ei:
        gpufile.stats(2 ** 22 + 12345)  # above pid_max's usual limit
    assert str(2 ** 22 + 12345) in str(ei.value)
    # PID 1 runs but does not use gpufile (or belongs to another user).
    with pytest.raises((FileNotFoundError, PermissionError)):
        gpufile.stats(1)


def test_explain_matches_cli():
    try:
        cli = gpufile.cli_path()
    except FileNotFoundError as e:
        missing(str(e))
    for args, kw in [
        (["--size", str(1 << 30)], dict(size=1 << 30)),
        (["--size", str(16 << 20), "--task-size", str(16 << 20)],
         dict(size=16 << 20, task_size=16 << 20)),
        (["--size", "10000", "--offset", "4096", "--registered"],
         dict(size=10000, offset=4096, registered=True)),
    ]:
        p = subprocess.run([cli, "explain"] + args + ["--json"], stdout=subprocess.PIPE,
                           universal_newlines=True)
        assert p.returncode == 0
        assert gpufile.explain(**kw) == json.loads(p.stdout)


def test_explain_tutorial_numbers(tmp_path):
    cfg = tmp_path / "cufile.json"
    cfg.write_text('{"execution": {"max_io_threads": 4, "max_request_parallelism": 4,'
                   ' "min_io_threshold_size_kb": 8192, "parallel_io": true}}')
    import warnings
    with warnings.catch_warnings():
        # Without a JSON parser compiled in, the defaults are used (warned).
        warnings.simplefilter("ignore")
        first = gpufile.explain(1 << 30, cufile_json=str(cfg))
        plan = gpufile.explain(1 << 30, task_size=1 << 30, cufile_json=str(cfg))
        small = gpufile.explain(16 << 20, task_size=16 << 20, cufile_json=str(cfg))
    assert first["tasks"] == 256 and first["cufile_requests"] == 256
    assert plan["tasks"] == 1
    if plan["cufile_config"]["parsed"]:
        e = plan["cufile_plan"][0]
        assert (e["parts"], e["part_size"]) == (4, 256 << 20)
        assert (small["cufile_plan"][0]["parts"],
                small["cufile_plan"][0]["part_size"]) == (2, 8 << 20)
    with gpufile.defaults.set(task_size=1 << 30):  # the setting is used
        assert gpufile.explain(1 << 30)["tasks"] == 1


def test_explain_errors(tmp_path):
    with pytest.raises(OSError):
        gpufile.explain(1 << 20, cufile_json=str(tmp_path / "missing.json"))
    with pytest.raises(ValueError):
        gpufile.explain(1 << 20, task_size=0)


def test_check_runs_the_cli(data_file):
    path, data = data_file
    try:
        gpufile.cli_path()
    except FileNotFoundError as e:
        missing(str(e))
    out = gpufile.check(path)
    assert out["path"] == path
    checks = {c["name"]: c for c in out["checks"]}
    assert len(checks) == len(out["checks"])  # names are unique
    for c in out["checks"]:
        assert c["status"] in ("pass", "fail", "unknown"), c
        assert c["why"], c
    # The platform items are there; so is the file's, with its size.
    for name in ("libcufile", "nvidia-fs", "cuda.devices", "cufile.json",
                 "gpufile.compat_mode", "gpufile.features"):
        assert name in checks, name
    assert checks["file"]["status"] == "pass"
    assert "(%d bytes)" % len(data) in checks["file"]["value"]
    assert checks["predict.gpufile"]["value"] in ("cufile", "posix")
    assert checks["predict.gpufile host"]["value"] == "host"
    assert sum(out["summary"].values()) == len(out["checks"])
    assert out["summary"] == {
        s: sum(c["status"] == s for c in out["checks"])
        for s in ("pass", "fail", "unknown")}


def test_check_a_path_that_starts_with_a_dash(tmp_path, monkeypatch):
    """gpufile.check("-odd.bin") handed the path to the tool as it is,
    which read it as options: "unknown option -o"."""
    try:
        gpufile.cli_path()
    except FileNotFoundError as e:
        missing(str(e))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-odd.bin").write_bytes(b"hi")
    assert gpufile.check("-odd.bin")["path"] == "-odd.bin"
    assert gpufile.check()["path"] is None


def test_stats_watch_json_is_one_object_per_line(data_file):
    """`gpufile stats PID --watch S --json` streams JSON Lines: each line one
    whole object, the ones after the first with the interval's rates; and
    the in-flight and collective counters are there for an exporter."""
    path, data = data_file
    assert _host_read(path, data.size) == data.size  # a segment to watch
    cli = gpufile.cli_path()
    p = subprocess.Popen([cli, "stats", str(os.getpid()), "--watch", "0.01", "--json"],
                         stdout=subprocess.PIPE, universal_newlines=True)
    try:
        lines = [p.stdout.readline() for _ in range(4)]
    finally:
        p.kill()  # the watch would last as long as this process
        p.communicate()
    objs = [json.loads(line) for line in lines]
    for i, o in enumerate(objs):
        assert lines[i].endswith("}\n") and lines[i].count("\n") == 1
        assert o["pid"] == os.getpid()
        assert o["read_bytes"] >= data.size
        assert set(o["inflight"]) == {"requests", "tasks", "pending_bytes"}
        assert set(o["collectives"]) >= {"calls", "bytes_received", "bytes_sent"}
        assert ("interval_s" in o) == (i > 0)
        if i:
            assert o["interval_s"] > 0 and o["read_gbps"] >= 0
            assert "read_gbps" in o["paths"]["host"]
