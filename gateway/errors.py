"""The gateway's one error tree, rendered as OpenAI-shaped JSON.

GatewayError                     (status, type, code, retryable)
├── BadRequestError              400 invalid_request_error
│   └── UnknownPolicyError       400 invalid_request_error / unknown_policy
├── AuthenticationError          401 invalid_api_key + WWW-Authenticate (missing or bad key)
├── NotFoundError                404 (unknown route)
│   └── ModelNotFoundError       404 model_not_found
├── MethodNotAllowedError        405 + Allow
├── RequestTimeoutError          408 (the client was too slow sending its request)
├── ConflictError                409 (admin API: the backend id is taken, or not the admin's)
├── PayloadTooLargeError         413
├── UnsupportedMediaTypeError    415
├── HeaderFieldsTooLargeError    431 (request line and headers over the server's limits)
├── ClientDisconnectedError      499 (the client left before its request was read; no reply)
├── ShuttingDownError            503 (the server's shutdown grace ran out)
├── NoHealthyBackendError        503 + Retry-After (until the first ejected backend is back)
├── GatewayOverloadedError       503 + Retry-After / gateway_overloaded: no upstream connection
│                                slot free in time; the gateway's own limit, never the backend's
├── TooManyRequestsError         429 + Retry-After (admission control)
│   ├── KeyRateLimitError        429 requests|tokens / rate_limit_exceeded, x-ratelimit-*
│   └── ShedError                429 rate_limit_exceeded / overloaded (queue full or too long)
├── QueueTimeoutError            503 service_unavailable / queue_timeout + Retry-After
└── UpstreamError                upstream failures (HTTP client errors mapped in upstream.py)
    ├── UpstreamConnectError     502, retryable on another backend
    ├── UpstreamTimeoutError     504
    │   └── UpstreamFirstByteTimeoutError  504, retryable: no response head in time
    └── UpstreamProtocolError    502 (connection broke before or during the response)

Messages are for clients: they never name a backend's address (the log line does).
"""

from __future__ import annotations

import orjson


class GatewayError(Exception):
    status = 500
    type = "internal_error"
    code = "internal_error"
    retryable = False

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def headers(self) -> list[tuple[bytes, bytes]]:
        return []

    def body(self) -> bytes:
        return error_body(self.message, self.type, self.code)


class BadRequestError(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class UnknownPolicyError(BadRequestError):
    code = "unknown_policy"


class AuthenticationError(GatewayError):
    """No valid credential; the body is OpenAI's (its clients show `code` to the user)."""

    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"www-authenticate", b"Bearer")]


class NotFoundError(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFoundError(NotFoundError):
    code = "model_not_found"


class MethodNotAllowedError(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"

    def __init__(self, message: str, *, allow: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.allow = allow

    def headers(self) -> list[tuple[bytes, bytes]]:
        # RFC 9110 15.5.6: a 405 MUST list the target's methods.
        return [(b"allow", ", ".join(self.allow).encode())] if self.allow else []


class RequestTimeoutError(GatewayError):
    status = 408
    type = "invalid_request_error"
    code = "request_timeout"


class ConflictError(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "conflict"


class PayloadTooLargeError(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class UnsupportedMediaTypeError(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class HeaderFieldsTooLargeError(GatewayError):
    status = 431
    type = "invalid_request_error"
    code = "request_header_fields_too_large"


class ClientDisconnectedError(GatewayError):
    """Raised while the request is read; nothing can be answered, the status is recorded."""

    status = 499  # client closed request (nginx's convention)
    type = "client_closed_request"
    code = "client_closed_request"


class ShuttingDownError(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "gateway_shutting_down"


class NoHealthyBackendError(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "no_healthy_backend"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"retry-after", str(self.retry_after_s).encode())]


class GatewayOverloadedError(GatewayError):
    """Every upstream connection slot stayed busy for `pool_timeout_s`: the gateway is at its
    own limit. Not a backend failure, so it neither ejects a backend nor fails over."""

    status = 503
    type = "service_unavailable"
    code = "gateway_overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"retry-after", str(self.retry_after_s).encode())]


class TooManyRequestsError(GatewayError):
    """429 with an honest `Retry-After` (whole seconds) and any extra headers."""

    status = 429
    type = "rate_limit_exceeded"
    code = "rate_limit_exceeded"

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: int = 1,
        extra_headers: list[tuple[bytes, bytes]] | None = None,
        type_: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)
        self.extra_headers = extra_headers or []
        if type_ is not None:
            self.type = type_

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"retry-after", str(self.retry_after_s).encode()), *self.extra_headers]


class KeyRateLimitError(TooManyRequestsError):
    """A key's requests or tokens per minute are spent (OpenAI's type: requests | tokens)."""


class ShedError(TooManyRequestsError):
    """The fleet is saturated and the queue has no place for the request (GIE: 429)."""

    code = "overloaded"


class QueueTimeoutError(GatewayError):
    """The request waited in the queue past its deadline (GIE answers a TTL expiry 503)."""

    status = 503
    type = "service_unavailable"
    code = "queue_timeout"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [(b"retry-after", str(self.retry_after_s).encode())]


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"
    code = "upstream_error"


class UpstreamConnectError(UpstreamError):
    code = "upstream_connect_error"
    retryable = True


class UpstreamTimeoutError(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamFirstByteTimeoutError(UpstreamTimeoutError):
    """No response head within `first_byte_timeout_s`: the backend looks hung, and the
    request has had no byte of answer, so another backend may take it."""

    code = "upstream_first_byte_timeout"
    retryable = True


class UpstreamProtocolError(UpstreamError):
    code = "upstream_protocol_error"


def error_body(message: str, type_: str, code: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "code": code}})
