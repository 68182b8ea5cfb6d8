"""SafetensorError, as safetensors has it (issue 34 item 3), and the
errors gpufile.safetensors raises where safetensors raises it.

safetensors raises its SafetensorError (an Exception) for a malformed
file, a tensor name the file lacks, a closed file, an unknown framework
or device and a bad slice; gpufile raised OSError, KeyError, ValueError
and IndexError there. Each error below is both: code written for
safetensors catches SafetensorError, code written for gpufile (or for
Python's conventions) keeps catching what it caught. Anywhere else
(a missing file: FileNotFoundError; a failed read: OSError) safetensors
raises Python's own errors too, and so does gpufile.
"""


class SafetensorError(Exception):
    """What safetensors.SafetensorError is: a malformed file, a tensor the
    file lacks, a closed file, an unknown framework or device, a bad
    slice. gpufile raises subclasses that are also OSError (a malformed
    file, with errno, filename and gpufile's code), KeyError (no such
    tensor), ValueError (closed file, framework, device, dtype) or
    IndexError (slice out of bounds)."""


class HeaderError(SafetensorError, OSError):
    """The file is not a valid safetensors file (the library's message
    names the file, the tensor and the field)."""


class TensorNotFoundError(SafetensorError, KeyError):
    """The file has no tensor of that name."""

    def __str__(self):
        # KeyError's str() is the repr of its argument: quotes around
        # the whole message.
        return str(self.args[0]) if self.args else ""


class ClosedFileError(SafetensorError, ValueError):
    """A call on a safe_open once close() has begun."""


class UsageError(SafetensorError, ValueError):
    """A framework, device or dtype that cannot be used."""


class UsageTypeError(SafetensorError, TypeError):
    """A device of the wrong type (a bool)."""


class SliceError(SafetensorError, IndexError):
    """An index out of bounds, or too many indices, for get_slice."""


def header_error(exc):
    """The HeaderError for an OSError of the library about the file's
    contents (its errno, message, filename and gpufile's code kept)."""
    new = HeaderError(exc.errno, exc.strerror, exc.filename)
    for attr in ("code", "code_name", "cufile_status", "cufile_status_name"):
        if hasattr(exc, attr):
            setattr(new, attr, getattr(exc, attr))
    return new
