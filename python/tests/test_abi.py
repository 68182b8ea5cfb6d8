"""The ctypes structs match include/gpufile.h: a C program compiled against
the header prints every struct's size and field offsets (skipped when no C
compiler or header is at hand, e.g. in an installed copy)."""
import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import missing
from gpufile import _structs as S

HEADER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "include")

STRUCTS = {
    "gpufile_counter_t": S.Counter,
    "gpufile_cufile_gpu_t": S.CufileGpu,
    "gpufile_setting_value_t": S.SettingValue,
    "gpufile_stats_t": S.Stats,
    "gpufile_file_stat_t": S.FileStat,
    "gpufile_file_counters_t": S.FileCounters,
    "gpufile_process_t": S.Process,
    "gpufile_cufile_info_t": S.CufileInfo,
    "gpufile_cufile_value_t": S.CufileValue,
    "gpufile_cufile_config_t": S.CufileConfig,
    "gpufile_plan_entry_t": S.PlanEntry,
    "gpufile_plan_t": S.Plan,
    "gpufile_check_item_t": S.CheckItem,
    "gpufile_remote_opts_t": S.RemoteOpts,
    "gpufile_remote_file_info_t": S.RemoteFileInfo,
}

CONSTANTS = {
    "GPUFILE_PATH_COUNT": S.PATH_COUNT, "GPUFILE_HIST_BUCKETS": S.HIST_BUCKETS,
    "GPUFILE_MAX_GPUS": S.MAX_GPUS, "GPUFILE_MAX_SETTINGS": S.MAX_SETTINGS,
    "GPUFILE_MAX_FILE_STATS": S.MAX_FILE_STATS, "GPUFILE_CUFILE_NKEYS": S.CUFILE_NKEYS,
    "GPUFILE_MAX_FILE_COUNTERS": S.MAX_FILE_COUNTERS,
}


def test_structs_match_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not os.path.exists(os.path.join(HEADER_DIR, "gpufile.h")):
        missing("needs a C compiler and include/gpufile.h")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "gpufile.h"',
             "int main(void) {"]
    want = []
    for cname, cls in STRUCTS.items():
        lines.append('printf("%%zu\\n", sizeof(%s));' % cname)
        want.append(("sizeof(%s)" % cname, ctypes.sizeof(cls)))
        for field, _ in cls._fields_:
            lines.append('printf("%%zu\\n", offsetof(%s, %s));' % (cname, field))
            want.append(("%s.%s" % (cname, field), getattr(cls, field).offset))
    for name, value in CONSTANTS.items():
        lines.append('printf("%%d\\n", (int)%s);' % name)
        want.append((name, value))
    lines.append("return 0; }")
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    exe = str(tmp_path / "abi")
    subprocess.run([cc, "-I", HEADER_DIR, "-o", exe, str(src)], check=True)
    got = subprocess.run([exe], stdout=subprocess.PIPE, check=True,
                         universal_newlines=True).stdout.split()
    mismatches = [(what, w, int(g)) for (what, w), g in zip(want, got) if w != int(g)]
    assert len(got) == len(want)
    assert not mismatches, "ctypes layout differs from gpufile.h: %s" % mismatches


# The structs that grow (include/gpufile.h, "Structs that grow"): a leading
# uint32_t size that the caller sets; the ctypes classes set it on creation.
SIZED = {
    "gpufile_stats_t": S.Stats,
    "gpufile_cufile_info_t": S.CufileInfo,
    "gpufile_cufile_config_t": S.CufileConfig,
    "gpufile_plan_t": S.Plan,
    "gpufile_remote_opts_t": S.RemoteOpts,
    "gpufile_remote_file_info_t": S.RemoteFileInfo,
}


@pytest.mark.parametrize("cname", sorted(SIZED))
def test_sized_struct_starts_with_size(cname):
    cls = SIZED[cname]
    assert cls._fields_[0] == ("size", ctypes.c_uint32)
    assert cls.size.offset == 0
    assert cls().size == ctypes.sizeof(cls)


def test_library_rejects_size_zero():
    from gpufile import _lib
    lib = _lib.lib()
    for cname, call in (
            ("gpufile_stats_t", lambda s: lib.gpufile_stats_self(ctypes.byref(s))),
            ("gpufile_cufile_info_t", lambda s: lib.gpufile_cufile_info(ctypes.byref(s)))):
        s = SIZED[cname]()
        s.size = 0
        assert call(s) == -22  # EINVAL
        assert ("%s.size is 0" % cname) in _lib.errmsg()
        s.size = ctypes.sizeof(s)
        assert call(s) == 0
        assert s.size == ctypes.sizeof(s)
