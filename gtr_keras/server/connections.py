"""Bounded HTTP connections: uvicorn's HTTP/1.1 protocol (httptools', else h11's) with deadlines of its own.

uvicorn bounds an idle keep-alive connection only (`timeout_keep_alive`). The
protocol of `bounded_protocol` also closes a connection

- whose request head (request line and headers) has not arrived whole within
  `header_timeout` seconds of the connection's opening, or of the first byte of
  a later request on it (a 408 in OpenAI's error shape first), or is larger
  than `MAX_HEAD_BYTES` (431);
- that has read nothing of an answer the server is writing for `write_timeout`
  seconds (its socket's buffer full all along).

A request's body is bounded where it is read (`app`, `--body-timeout`). A
request that is not HTTP (`Content-Length: -5`, `abc`, a bad request line) is
answered with a 400 in OpenAI's error shape, not uvicorn's plain text, and closed.
"""

import json

from gtr_keras.server.api_error import ApiError

MAX_HEAD_BYTES = 64 << 10
_PHRASES = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _base_protocol():
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:  # uvicorn without its C parser: h11's protocol
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


class _Bounded:
    """The deadlines `bounded_protocol` adds to a uvicorn HTTP protocol (a mixin before it)."""

    header_timeout = 10.0
    write_timeout = 30.0

    def connection_made(self, transport):
        super().connection_made(transport)
        self._head_timer = self._write_timer = None
        self._head_bytes = 0
        self._start_head()

    def connection_lost(self, exc):
        for timer in (self._head_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data):
        cycle = self.cycle
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self.cycle is not cycle:  # a request's head came whole
            self._end_head()
        elif self.cycle is None or self.cycle.response_complete:  # bytes of a head not yet whole
            if self._head_timer is None:
                self._start_head()
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, f"the request head is over {MAX_HEAD_BYTES:,} bytes", "request_head_too_large")

    def pause_writing(self):
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self.transport.abort)  # drops what waits

    def resume_writing(self):
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def send_400_response(self, msg):
        self._refuse(400, f"not a valid HTTP/1.1 request ({msg.rstrip('.')})", "invalid_http")

    def _start_head(self):
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _head_timed_out(self):
        self._head_timer = None
        if self.cycle is None or self.cycle.response_complete:  # no request of it running
            message = f"the request head did not arrive within {self.header_timeout:g} s"
            self._refuse(408, message, "header_timeout")

    def _end_head(self):
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status, message, code):
        """Answers `status` in OpenAI's error shape and closes the connection (no request of it is running)."""
        self._end_head()
        if self.transport.is_closing():
            return
        body = json.dumps(ApiError(status, message, None, code).body(), separators=(",", ":")).encode("utf-8")
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _PHRASES[status])]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body)]
        self.transport.write(b"".join(head) + b"connection: close\r\n\r\n" + body)
        self.transport.close()


def bounded_protocol(header_timeout=10.0, write_timeout=30.0):
    """The HTTP protocol class for `uvicorn.Config(http=...)`: uvicorn's, with the deadlines above.

    Args:
        header_timeout: seconds a request's head may take to arrive (from the connection's opening, or from
            the first byte of a later request on it).
        write_timeout: seconds an answer may wait for its client to read any of it.

    Example:
    >>> config = uvicorn.Config(app, http=bounded_protocol(header_timeout=10.0), timeout_keep_alive=5)
    """
    base = _base_protocol()
    fields = {"header_timeout": header_timeout, "write_timeout": write_timeout, "__doc__": _Bounded.__doc__}
    return type(f"Bounded{base.__name__}", (_Bounded, base), fields)
