"""kvikio.buffer: cuFile buffer registration and the bounce buffers."""

from .. import _buffers
from .. import _info
from .. import _page_cache
from .cufile import _call

__all__ = ["memory_register", "memory_deregister", "bounce_buffer_free"]


def _device(buf, what):
    b = _buffers.as_buffer(buf, False, what)
    try:
        return b.device
    finally:
        b.release()


def memory_register(buf):
    """Registers device memory buf with cuFile (gpufile.buf_register: buf's
    own range, where KvikIO registers the whole allocation that holds it).
    A no-op for host memory and where cuFile is not used (compatibility
    mode), as KvikIO."""
    if _device(buf, "memory_register"):
        _call(_info.buf_register, buf)


def memory_deregister(buf):
    """Undoes memory_register(buf); a no-op where it registered nothing."""
    if _device(buf, "memory_deregister"):
        _call(_info.buf_deregister, buf)


def bounce_buffer_free():
    """Frees the pinned bounce buffers and returns the bytes freed
    (gpufile's: bounce_buffers per worker, each bounce_buffer_size
    rounded up to 4 KiB plus 4 KiB)."""
    return _page_cache.bounce_buffer_free()
