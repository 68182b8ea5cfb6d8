"""kvikio.utils: the helpers KvikIO's API and tests use."""

import functools
import warnings

__all__ = ["LocalHttpServer", "call_once", "kvikio_deprecation_notice",
           "kvikio_deprecate_module"]


def call_once(func):
    """func, called once: later calls return the first call's result."""
    done = []

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not done:
            done.append(func(*args, **kwargs))
        return done[0]
    return wrapper


def kvikio_deprecation_notice(msg="This function is deprecated.", *, since):
    """A decorator: the function warns msg (FutureWarning) when called, and
    its docstring says since which version it is deprecated."""
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            warnings.warn(msg, category=FutureWarning, stacklevel=2)
            return func(*args, **kwargs)
        wrapper.__doc__ = ".. deprecated:: %s %s\n\n%s" % (
            since, msg, func.__doc__ or "")
        return wrapper
    return decorator


def kvikio_deprecate_module(msg="", *, since):
    """Warns (FutureWarning) that the calling module is deprecated."""
    warnings.warn("This module is deprecated since %s. %s" % (since, msg),
                  category=FutureWarning, stacklevel=2)


class LocalHttpServer:
    """A local HTTP server of root_path for tests, as KvikIO's:

        with LocalHttpServer(root_path=d) as server:
            RemoteFile.open_http(server.url + "/name")

    Range requests need RangeHTTPServer (range_support=True, the default),
    or a handler of one's own (handler, with handler_options). It serves
    from a thread of this process, at most max_lifetime seconds."""

    def __init__(self, root_path, range_support=True, max_lifetime=120,
                 handler=None, handler_options=None):
        self.root_path = root_path
        self.range_support = range_support
        self.max_lifetime = max_lifetime
        self.handler = handler
        self.handler_options = dict(handler_options or {})

    def __enter__(self):
        import http.server
        import threading

        if self.handler is not None:
            handler = self.handler
        elif self.range_support:
            try:
                from RangeHTTPServer import RangeRequestHandler as handler
            except ImportError:
                handler = _range_handler()
        else:
            handler = http.server.SimpleHTTPRequestHandler
        options = dict(self.handler_options, directory=str(self.root_path))
        self._httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, **options))
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime, self._httpd.shutdown)
        self._timer.daemon = True
        self._timer.start()
        self.ip, self.port = self._httpd.server_address[:2]
        self.url = "http://%s:%d" % (self.ip, self.port)
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _range_handler():
    """A SimpleHTTPRequestHandler that answers a single "Range: bytes="
    request with 206 and the range (416 past the end): LocalHttpServer's
    ranges where RangeHTTPServer is not installed."""
    import http.server
    import io
    import os
    import re

    class RangeHandler(http.server.SimpleHTTPRequestHandler):
        def send_head(self):
            wanted = self.headers.get("Range")
            if not wanted:
                return super().send_head()
            m = re.match(r"^bytes=(\d*)-(\d*)$", wanted.strip())
            path = self.translate_path(self.path)
            try:
                f = open(path, "rb")
            except OSError:
                self.send_error(404)
                return None
            with f:
                size = os.fstat(f.fileno()).st_size
                if not m or not (m.group(1) or m.group(2)):
                    self.send_error(400, "bad Range %r" % wanted)
                    return None
                if m.group(1):
                    start = int(m.group(1))
                    end = int(m.group(2)) if m.group(2) else size - 1
                else:
                    start, end = max(0, size - int(m.group(2))), size - 1
                end = min(end, size - 1)
                if start > end:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                f.seek(start)
                body = f.read(end - start + 1)
            self.send_response(206)
            self.send_header("Content-Type", self.guess_type(path))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Range",
                             "bytes %d-%d/%d" % (start, end, size))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return io.BytesIO(body)

    return RangeHandler
