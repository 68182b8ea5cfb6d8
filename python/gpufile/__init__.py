"""gpufile: read files into GPU (and host) memory through NVIDIA cuFile
(GPUDirect Storage) or gpufile's own pinned-bounce path, and tell which
path carried each byte. A ctypes binding of libgpufile.so; no compile step.

    import cupy, gpufile
    a = cupy.empty(1 << 30, dtype=cupy.uint8)
    with gpufile.File("data.bin") as f:
        n = f.read(a)                 # bytes read
        print(f.path_info())          # PathInfo(path='cufile', reason=...)
    print(gpufile.stats()["gpufile"]["read"]["cufile"])

The library is found through $GPUFILE_LIBRARY (a path to the .so), next to
this package, on the dynamic linker's path, or in a checkout's build/.
"""

from ._lib import ConfigError, Error, LibraryNotFoundError, library_path
from ._file import File, Future, PathInfo
from . import defaults
from .defaults import CompatMode
from ._info import (buf_deregister, buf_register, check, cli_path,
                    cuda_device_count, cufile_info, explain, features,
                    processes, registered, release, stats, version, warmup)

# KvikIO parity (issue 13): page cache, bounce buffers, mmap, cuFile driver.
from ._page_cache import (bounce_buffer_free, drop_file_page_cache,
                          drop_system_page_cache, page_cache_info)
from ._mmap import Mmap
from . import cufile_driver
# Stream-ordered requests (issue 13 item 2): File.read_async/write_async.
from ._stream import StreamFuture
from ._batch import BatchRead, batch_read

try:
    # Written by CMake from include/gpufile.h, the one place the version is.
    from ._version import __version__
except ImportError:  # a source tree CMake has not configured yet
    def __getattr__(name):
        if name == "__version__":
            return version()  # the loaded C library's
        raise AttributeError("module 'gpufile' has no attribute %r" % name)

__all__ = [
    "File", "Future", "PathInfo", "defaults", "CompatMode",
    "stats", "processes", "check", "explain", "cufile_info",
    "buf_register", "buf_deregister", "registered",
    "version", "features", "cuda_device_count", "warmup", "release",
    "library_path", "cli_path",
    "Error", "ConfigError", "LibraryNotFoundError",
]
__all__ += ["page_cache_info", "drop_file_page_cache", "drop_system_page_cache",
            "bounce_buffer_free", "Mmap", "cufile_driver"]
__all__ += ["StreamFuture"]
__all__ += ["batch_read", "BatchRead"]
