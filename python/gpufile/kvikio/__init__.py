"""gpufile.kvikio: KvikIO's Python API (as documented for KvikIO 26.x) on
gpufile. Switch a KvikIO program with one line:

    import gpufile.kvikio as kvikio

and its reads and writes take gpufile's paths (cuFile, the staged
bounce-buffer path, the host path, remote objects) and are counted in
gpufile.stats(). A thin layer: argument forms, return types and the
exception types and wording of KvikIO (RuntimeError for a failed open or
I/O, IndexError for a range outside a map, ValueError, OverflowError);
the I/O is gpufile's own. docs/kvikio.md maps every KvikIO call to
gpufile's and lists the differences that remain.
"""

from . import defaults
from . import cufile_driver
from . import buffer
from . import utils
from .defaults import CompatMode
from ._errors import RuntimeOSError
from .buffer import bounce_buffer_free, memory_deregister, memory_register
from .cufile import (CuFile, IOFuture, IOFutureStream, clear_page_cache,
                     drop_file_page_cache, drop_system_page_cache,
                     get_page_cache_info)
from .mmap import Mmap
from .remote_file import (RemoteEndpointType, RemoteFile,
                          infer_remote_endpoint_type,
                          is_remote_file_available)
from .stream import stream_deregister, stream_register
from .utils import kvikio_deprecation_notice

# The KvikIO release whose API this follows.
__kvikio_version__ = "26.10.00"
__git_commit__ = ""


def __getattr__(name):
    if name == "__version__":  # gpufile's own
        from .. import __version__
        return __version__
    if name == "numpy":  # NumPy is imported only when asked for
        import importlib
        return importlib.import_module(__name__ + ".numpy")
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = [
    "__git_commit__", "__version__", "clear_page_cache", "CuFile",
    "CompatMode", "drop_file_page_cache", "drop_system_page_cache", "Mmap",
    "get_page_cache_info", "infer_remote_endpoint_type",
    "is_remote_file_available", "kvikio_deprecation_notice",
    "RemoteEndpointType", "RemoteFile", "stream_register",
    "stream_deregister", "memory_register", "memory_deregister",
    "bounce_buffer_free", "IOFuture", "IOFutureStream", "RuntimeOSError",
    "defaults", "cufile_driver", "buffer", "utils",
]
