"""The gateway's one error tree, rendered as OpenAI-shaped JSON.

GatewayError                     (status, type, code, retryable)
├── BadRequestError              400 invalid_request_error
│   └── UnknownPolicyError       400 invalid_request_error / unknown_policy
├── NotFoundError                404 (unknown route)
│   └── ModelNotFoundError       404 model_not_found
├── MethodNotAllowedError        405 + Allow
├── RequestTimeoutError          408 (the client was too slow sending its request)
├── PayloadTooLargeError         413
├── UnsupportedMediaTypeError    415
├── HeaderFieldsTooLargeError    431 (request line and headers over the server's limits)
├── ClientDisconnectedError      499 (the client left before its request was read; no reply)
├── ShuttingDownError            503 (the server's shutdown grace ran out)
├── NoHealthyBackendError        503 + Retry-After
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
