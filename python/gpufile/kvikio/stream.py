"""kvikio.stream: cuFileStreamRegister/Deregister. gpufile decides how a
stream-ordered request keeps its order (File.stream_info()) and registers
the streams it hands to cuFile itself: these check their arguments and
record nothing."""

from ._errors import size_t

__all__ = ["stream_register", "stream_deregister"]


def _stream(raw_stream, what):
    from .._stream import stream_handle
    return stream_handle(raw_stream, what)


def stream_register(raw_stream, flags):
    _stream(raw_stream, "stream_register")
    size_t(flags, "flags", "stream_register")


def stream_deregister(raw_stream):
    _stream(raw_stream, "stream_deregister")
