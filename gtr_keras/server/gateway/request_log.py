"""Request ids (`X-Request-ID`) and the access log: one line per request, as text or as a JSON object.

A request's id is the one its `X-Request-ID` header brings, when that is 1 to
`MAX_ID_LENGTH` printable ASCII characters without spaces (what a proxy or a
client's tracing puts there), else a new one (32 hex digits); the answer
carries it back in `X-Request-ID`. A line of the access log holds the time,
the request's id, method, path (without its query), status, duration and
client: never a header (no key) nor a body.
"""

import datetime
import json
import logging
import uuid

logger = logging.getLogger(__name__)

MAX_ID_LENGTH = 128
FORMATS = ("text", "json")


def request_id(given):
    """`given` (an `X-Request-ID` value, or None) when it is a usable id, else a new one.

    Example:
    >>> request_id("checkout-7f3a")
    'checkout-7f3a'
    >>> len(request_id("two words")), len(request_id(None))
    (32, 32)
    """
    if given and len(given) <= MAX_ID_LENGTH and all("!" <= character <= "~" for character in given):
        return given
    return uuid.uuid4().hex


class AccessLog:
    """Writes one line per request on `stream`, as `text` or as a `json` object; without a stream, logs it (INFO,
    to this module's logger, which a program routes as it routes any log).

    Example:
    >>> AccessLog("json").write("4bf9", "POST", "/v1/embeddings", 200, 0.0123, "127.0.0.1:51234")  # doctest: +SKIP
    {"time": "2026-12-01T21:47:03.512Z", "request_id": "4bf9", "method": "POST", "path": "/v1/embeddings", ...}
    """

    def __init__(self, form="text", stream=None):
        if form not in FORMATS:
            raise ValueError(f"form must be one of {FORMATS}, got {form!r}")
        self.form = form
        self.stream = stream

    def write(self, request_id, method, path, status, seconds, client):
        """Writes the line of one answered request (`seconds`: from its head's arrival to its answer's end)."""
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        milliseconds = round(seconds * 1000, 3)
        if self.form == "json":
            fields = {
                "time": now,
                "request_id": request_id,
                "method": method,
                "path": path,
                "status": status,
                "duration_ms": milliseconds,
                "client": client,
            }
            line = json.dumps(fields, ensure_ascii=True)
        else:
            shown = json.dumps(f"{method} {path}", ensure_ascii=True)  # quotes and control characters escaped
            line = f"{now} {client} {shown} {status} {milliseconds:.1f}ms id={request_id}"
        if self.stream is None:
            logger.info("%s", line)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()
