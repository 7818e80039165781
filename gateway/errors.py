"""The gateway's one error tree, as OpenAI's JSON (or SGLang's); a message never names a backend.

GatewayError            500 (status, type, code, retryable); Retry-After on 429s, 503s but shutdown
├── BadRequestError     400 · subclass UnknownPolicyError (code unknown_policy)
├── NotFoundError       404 (unknown route) · subclasses ModelNotFoundError, ResponseNotFoundError
├── AuthenticationError 401 (+ WWW-Authenticate), ForbiddenError 403, MethodNotAllowedError
│   405 (+ Allow), RequestTimeoutError 408, ConflictError 409, PayloadTooLargeError 413,
│   UnsupportedMediaTypeError 415, HeaderFieldsTooLargeError 431, ClientDisconnectedError 499
├── ShuttingDownError 503, NoHealthyBackendError 503, QueueTimeoutError 503 (queue_timeout),
│   GatewayOverloadedError 503 (no upstream slot in time: never counted against a backend)
├── TooManyRequestsError 429 (admission) · subclasses KeyRateLimitError (type requests|tokens,
│   + x-ratelimit-*), ShedError (code overloaded: queue full, wait too long, sheddable expired)
└── UpstreamError       502 (HTTP client errors mapped in upstream.py) · subclasses
    UpstreamConnectError 502 (retryable), UpstreamProtocolError 502, UpstreamTimeoutError 504
    · its subclass UpstreamFirstByteTimeoutError 504 (retryable: no response head in time)
"""

from __future__ import annotations

import orjson

# The reference endpoint picker's header naming why a request was dropped, and its values: set
# on sheds (429), queue timeouts and no-backend answers (503).
DROPPED_REASON = b"x-llm-d-request-dropped-reason"
REJECTED_SATURATED = b"rejected-saturated"
REJECTED_NO_ENDPOINTS = b"rejected-no-endpoints"
REJECTED_TTL_EXPIRED = b"rejected-ttl-expired"


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

    def body(self, shape: str = "openai") -> bytes:
        return error_body(self.message, self.type, self.code, shape)


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


class ForbiddenError(GatewayError):
    """The caller may not use this endpoint from where it is (admin from another host)."""

    status = 403
    type = "invalid_request_error"
    code = "forbidden"


class NotFoundError(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFoundError(NotFoundError):
    code = "model_not_found"


class ResponseNotFoundError(NotFoundError):
    """A stored response the gateway cannot reach: answered as vLLM answers an unknown id
    (`param` response_id, `code` the status), so clients see one shape whoever answered."""

    def __init__(self, response_id: str) -> None:
        super().__init__(f"Response with id '{response_id}' not found.")

    def body(self, shape: str = "openai") -> bytes:  # the Responses API's: always OpenAI's
        error = {"message": self.message, "type": self.type, "param": "response_id", "code": 404}
        return orjson.dumps({"error": error})


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
        return [
            (b"retry-after", str(self.retry_after_s).encode()),
            (DROPPED_REASON, REJECTED_NO_ENDPOINTS),
        ]


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
    """The fleet is saturated and the queue has no place for the request, or a sheddable one
    waited to its deadline (GIE: 429; `reason` the dropped-reason header's value)."""

    code = "overloaded"

    def __init__(
        self, message: str, *, retry_after_s: int = 1, reason: bytes = REJECTED_SATURATED
    ) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.reason = reason

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [*super().headers(), (DROPPED_REASON, self.reason)]


class QueueTimeoutError(GatewayError):
    """The request waited in the queue past its deadline (a sheddable one is shed instead)."""

    status = 503
    type = "service_unavailable"
    code = "queue_timeout"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [
            (b"retry-after", str(self.retry_after_s).encode()),
            (DROPPED_REASON, REJECTED_TTL_EXPIRED),
        ]


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


def error_body(message: str, type_: str, code: str, shape: str = "openai") -> bytes:
    """The error's JSON: `{"error": {message, type, code}}`, or for `shape` "sglang"
    `{"error": {message}}`, what SGLang's `/generate` answers a request it cannot serve."""
    if shape == "sglang":
        return orjson.dumps({"error": {"message": message}})
    return orjson.dumps({"error": {"message": message, "type": type_, "code": code}})
