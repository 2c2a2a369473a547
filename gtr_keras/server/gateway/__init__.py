"""What every request of `gtr-keras serve` passes through before and after its route, whatever the route.

`middleware` (the ASGI layer around the application: each request's id, its key,
its span, its metrics and its access-log line), `keys` (API keys, compared in
constant time, their file read again when it changes), `request_log` (request
ids and the access log), `metrics` (Prometheus' series, one registry per
application), `tracing` (OpenTelemetry's spans, W3C `traceparent` taken from the
request) and `stages` (the stages of a request's work in the batchers: queueing,
tokenizing, the model call, the search; each a child span and an observation).
"""
