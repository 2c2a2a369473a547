"""`ApiError`: a request refused with OpenAI's error shape, `{"error": {"message", "type", "param", "code"}}`."""

# OpenAI's `type` of each status the server answers with.
TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    500: "server_error",
    503: "server_error",
}


def _encodable(text):
    """`text` with any lone surrogate (a request's field name or value) written as `\\udXXX`: an answer is UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class ApiError(Exception):
    """An HTTP error answer in OpenAI's shape: a one-line message naming the field (`param`).

    Args:
        status: the HTTP status (400 unreadable body, 401 no key or a wrong one, 404 no such model or route,
            408 a body that did not arrive in time, 413 body too large, 422 a field's value refused, 503 busy,
            stopping or loading).
        message: one line saying what is wrong and, where it helps, what to send instead.
        param: the field at fault (`"input[3]"`), or None.
        code: a machine-readable reason (`"invalid_json"`, `"model_not_found"`, ...), or None.

    Example:
    >>> ApiError(422, "input: empty list; send at least one string", "input", "empty_input").body()["error"]["type"]
    'invalid_request_error'
    """

    def __init__(self, status, message, param=None, code=None):
        message, param = _encodable(message), param if param is None else _encodable(param)
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self):
        """The JSON body: `{"error": {"message", "type", "param", "code"}}`."""
        kind = TYPES.get(self.status, "server_error" if self.status >= 500 else "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
