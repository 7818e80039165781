"""The gateway's one error tree, rendered as OpenAI-shaped JSON.

GatewayError                     (status, type, code, retryable)
├── BadRequestError              400 invalid_request_error
│   └── UnknownPolicyError       400 invalid_request_error / unknown_policy
├── NotFoundError                404 (unknown route)
│   └── ModelNotFoundError       404 model_not_found
├── MethodNotAllowedError        405
├── PayloadTooLargeError         413
├── UnsupportedMediaTypeError    415
├── NoHealthyBackendError        503 + Retry-After
├── TooManyRequestsError         429 + Retry-After (admission control)
│   ├── KeyRateLimitError        429 requests|tokens / rate_limit_exceeded, x-ratelimit-*
│   └── ShedError                429 rate_limit_exceeded / overloaded (queue full or too long)
├── QueueTimeoutError            503 service_unavailable / queue_timeout + Retry-After
└── UpstreamError                upstream failures (HTTP client errors mapped in upstream.py)
    ├── UpstreamConnectError     502, retryable on another backend
    ├── UpstreamTimeoutError     504
    └── UpstreamProtocolError    502 (connection broke before or during the response)
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


class PayloadTooLargeError(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class UnsupportedMediaTypeError(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class NoHealthyBackendError(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "no_healthy_backend"

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


class UpstreamProtocolError(UpstreamError):
    code = "upstream_protocol_error"


def error_body(message: str, type_: str, code: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "code": code}})
