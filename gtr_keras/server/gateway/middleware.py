"""`Gateway`: the ASGI middleware every request of `gtr-keras serve` passes, whatever its route.

For each HTTP request, in this order: its id (`X-Request-ID`, taken or made, and
returned), its span (continuing the trace of its `traceparent`; the batchers'
stages become its children), the port rule of `--metrics-port` (`/metrics` there
only, and nothing else there), its key (`Authorization: Bearer KEY` on every
path but `/health`: 401 in OpenAI's error shape, the connection closed as its
body is not read; `/health` answers a request without it its status alone,
`authorized`), then the application; once answered, its metrics (by route
template and status, and the error code the application gave) and its
access-log line. A route added to the application passes through all of it
with no change here.
"""

import collections
import contextlib
import json
import time

from starlette.routing import Match

from gtr_keras.server.api_error import ApiError
from gtr_keras.server.gateway import stages
from gtr_keras.server.gateway.request_log import request_id
from gtr_keras.server.gateway.tracing import answered

OPEN_PATHS = ("/health",)  # load balancers' probes ask without a key
METRICS_PATH = "/metrics"
UNMATCHED = "other"  # the endpoint label of a path no route takes
# HTTP's methods (RFC 9110, and PATCH): a span is named by one of them, or `HTTP` (OpenTelemetry's rule for
# another), so that no client can make span names of its own (uvicorn's h11 parser takes any token).
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")

Settings = collections.namedtuple("Settings", "keys access_log tracing metrics_port", defaults=(None, None, None, None))
Settings.__doc__ = """What the gateway does beyond ids and metrics: `keys` (an `ApiKeys`, or None: every request
passes), `access_log` (an `AccessLog`, or None), `tracing` (a `Tracing`, or None) and `metrics_port` (the
port that alone serves `/metrics`, or None: the server's own)."""


def error_code(request, code):
    """Notes the error code of a request's answer, for the gateway's metrics (the application calls it)."""
    request.state.error_code = code


def authorized(request):
    """False for a request of an open path (`/health`) without a key that the server asks for: it may know
    the status alone, not what the server serves."""
    return request.scope.get("state", {}).get("authorized", True)


def _endpoint(routes, scope):
    for route in routes:
        match, _ = route.matches(scope)
        if match != Match.NONE:
            return route.path
    return UNMATCHED


class Gateway:
    """The middleware (`starlette.middleware.Middleware(Gateway, settings=..., metrics=..., routes=...)`).

    Args:
        app: the ASGI application it wraps.
        settings: `Settings`.
        metrics: the application's `Metrics`.
        routes: the application's routes, whose templates label the metrics (`endpoint`).
    """

    def __init__(self, app, settings, metrics, routes):
        self.app, self.settings, self.metrics, self.routes = app, settings, metrics, routes

    def _refusal(self, scope, headers):
        """The `ApiError` a request gets before the application sees it, or None."""
        path, port, asked = scope["path"], self.settings.metrics_port, f"{scope['method']} {scope['path']}"
        if port is not None and (scope.get("server") or (None, None))[1] == port:
            if path != METRICS_PATH:
                return ApiError(404, f"{asked}: the metrics port serves {METRICS_PATH} only", None, "not_found")
        elif port is not None and path == METRICS_PATH:
            return ApiError(404, f"{asked}: served on the metrics port ({port})", None, "not_found")
        keys = self.settings.keys
        if keys is None:
            return None
        allowed = keys.allows(headers.get("authorization"))
        scope.setdefault("state", {})["authorized"] = allowed
        if allowed or path in OPEN_PATHS:
            return None
        if "authorization" not in headers:
            message = "no API key: send it as the header Authorization: Bearer KEY"
            return ApiError(401, message, None, "missing_api_key")
        return ApiError(401, "the API key is not one of this server's", None, "invalid_api_key")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        identity = request_id(headers.get("x-request-id"))
        endpoint = _endpoint(self.routes, scope)
        answer = {"status": 500}

        async def respond(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), (b"x-request-id", identity.encode())]}
            await send(message)

        tracing, refusal = self.settings.tracing, None
        known = scope["method"] in METHODS
        method = scope["method"] if known else "_OTHER"
        attributes = {"http.request.method": method, "url.path": scope["path"], "http.route": endpoint}
        attributes["gtr_keras.request_id"] = identity
        span_of = tracing.request(headers, f"{method if known else 'HTTP'} {endpoint}", attributes) if tracing else None
        try:
            with span_of or contextlib.nullcontext() as span:
                with stages.requesting((tracing.tracer, span) if span is not None else None):
                    refusal = self._refusal(scope, headers)
                    if refusal is None:
                        await self.app(scope, receive, respond)
                    else:
                        await _send_error(refusal, respond)
                if span is not None:
                    answered(span, answer["status"])
        finally:
            seconds = time.perf_counter() - start
            code = refusal.code if refusal is not None else scope.get("state", {}).get("error_code")
            self.metrics.request(endpoint, answer["status"], seconds, code)
            log = self.settings.access_log
            if log is not None:
                client = "{}:{}".format(*scope["client"]) if scope.get("client") else "-"
                log.write(identity, scope["method"], scope["path"], answer["status"], seconds, client)


async def _send_error(error, send):
    """Answers `error` in OpenAI's shape, closing the connection (the request's body is left unread)."""
    body = json.dumps(error.body(), ensure_ascii=True, separators=(",", ":")).encode("ascii")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.append((b"connection", b"close"))
    if error.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
