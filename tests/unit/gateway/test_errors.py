from __future__ import annotations

import orjson
import pytest

from gateway import errors
from gateway.errors import GatewayError, NoHealthyBackendError, error_body

# class → (status, type, code, retryable)
EXPECTED: dict[type[GatewayError], tuple[int, str, str, bool]] = {
    errors.GatewayError: (500, "internal_error", "internal_error", False),
    errors.BadRequestError: (400, "invalid_request_error", "invalid_request", False),
    errors.UnknownPolicyError: (400, "invalid_request_error", "unknown_policy", False),
    errors.AuthenticationError: (401, "invalid_request_error", "invalid_api_key", False),
    errors.ForbiddenError: (403, "invalid_request_error", "forbidden", False),
    errors.NotFoundError: (404, "invalid_request_error", "not_found", False),
    errors.ModelNotFoundError: (404, "invalid_request_error", "model_not_found", False),
    errors.ResponseNotFoundError: (404, "invalid_request_error", "not_found", False),
    errors.MethodNotAllowedError: (405, "invalid_request_error", "method_not_allowed", False),
    errors.RequestTimeoutError: (408, "invalid_request_error", "request_timeout", False),
    errors.ConflictError: (409, "invalid_request_error", "conflict", False),
    errors.HeaderFieldsTooLargeError: (
        431,
        "invalid_request_error",
        "request_header_fields_too_large",
        False,
    ),
    errors.ClientDisconnectedError: (
        499,
        "client_closed_request",
        "client_closed_request",
        False,
    ),
    errors.ShuttingDownError: (503, "service_unavailable", "gateway_shutting_down", False),
    errors.PayloadTooLargeError: (413, "invalid_request_error", "payload_too_large", False),
    errors.UnsupportedMediaTypeError: (
        415,
        "invalid_request_error",
        "unsupported_media_type",
        False,
    ),
    errors.NoHealthyBackendError: (503, "service_unavailable", "no_healthy_backend", False),
    errors.GatewayOverloadedError: (503, "service_unavailable", "gateway_overloaded", False),
    errors.TooManyRequestsError: (429, "rate_limit_exceeded", "rate_limit_exceeded", False),
    errors.KeyRateLimitError: (429, "rate_limit_exceeded", "rate_limit_exceeded", False),
    errors.ShedError: (429, "rate_limit_exceeded", "overloaded", False),
    errors.QueueTimeoutError: (503, "service_unavailable", "queue_timeout", False),
    errors.UpstreamError: (502, "upstream_error", "upstream_error", False),
    errors.UpstreamConnectError: (502, "upstream_error", "upstream_connect_error", True),
    errors.UpstreamTimeoutError: (504, "upstream_error", "upstream_timeout", False),
    errors.UpstreamFirstByteTimeoutError: (
        504,
        "upstream_error",
        "upstream_first_byte_timeout",
        True,
    ),
    errors.UpstreamProtocolError: (502, "upstream_error", "upstream_protocol_error", False),
}


def _all_subclasses(cls: type[GatewayError]) -> set[type[GatewayError]]:
    found = {cls}
    for sub in cls.__subclasses__():
        found |= _all_subclasses(sub)
    return found


def test_table_covers_the_whole_tree() -> None:
    assert _all_subclasses(GatewayError) == set(EXPECTED)


ENGINE_SHAPED = {errors.ResponseNotFoundError}  # the body an engine gives, tested below


@pytest.mark.parametrize(
    "cls", [c for c in EXPECTED if c not in ENGINE_SHAPED], ids=lambda c: c.__name__
)
def test_renders_openai_error_json(cls: type[GatewayError]) -> None:
    status, type_, code, retryable = EXPECTED[cls]
    err = cls("something went wrong")
    assert (err.status, err.type, err.code, err.retryable) == (status, type_, code, retryable)
    assert str(err) == err.message == "something went wrong"
    assert orjson.loads(err.body()) == {
        "error": {"message": "something went wrong", "type": type_, "code": code}
    }


_ADMISSION = (
    errors.TooManyRequestsError,
    errors.KeyRateLimitError,
    errors.ShedError,
    errors.QueueTimeoutError,
)
_RETRY_AFTER = {NoHealthyBackendError, errors.GatewayOverloadedError, *_ADMISSION}
WITH_HEADERS = {*_RETRY_AFTER, errors.AuthenticationError}


@pytest.mark.parametrize("cls", [c for c in EXPECTED if c not in WITH_HEADERS | ENGINE_SHAPED])
def test_no_extra_headers(cls: type[GatewayError]) -> None:
    assert cls("x").headers() == []


def test_an_unknown_stored_response_is_answered_as_vllm_answers_it() -> None:
    err = errors.ResponseNotFoundError("resp_abc")
    assert (err.status, err.headers()) == (404, [])
    assert orjson.loads(err.body()) == {
        "error": {
            "message": "Response with id 'resp_abc' not found.",
            "type": "invalid_request_error",
            "param": "response_id",
            "code": 404,
        }
    }


def test_code_override_is_per_instance() -> None:
    err = errors.BadRequestError("bad", code="missing_field")
    assert err.code == "missing_field"
    assert orjson.loads(err.body())["error"]["code"] == "missing_field"
    assert errors.BadRequestError("bad").code == "invalid_request"  # class default untouched


@pytest.mark.parametrize("cls", sorted(_RETRY_AFTER, key=lambda c: c.__name__))
def test_unavailable_errors_have_retry_after(cls: type[NoHealthyBackendError]) -> None:
    assert cls("none").headers()[0] == (b"retry-after", b"1")
    assert cls("none", retry_after_s=7).headers()[0] == (b"retry-after", b"7")


def test_dropped_requests_name_why_in_the_reference_header() -> None:
    def reason(err: GatewayError) -> bytes | None:
        return dict(err.headers()).get(b"x-llm-d-request-dropped-reason")

    assert reason(errors.ShedError("full")) == b"rejected-saturated"
    assert reason(errors.ShedError("late", reason=errors.REJECTED_TTL_EXPIRED)) == (
        b"rejected-ttl-expired"
    )
    assert reason(errors.QueueTimeoutError("late")) == b"rejected-ttl-expired"
    assert reason(NoHealthyBackendError("none")) == b"rejected-no-endpoints"
    assert reason(errors.KeyRateLimitError("slow")) is None  # a key's own limit: not a drop
    assert reason(errors.GatewayOverloadedError("busy")) is None


@pytest.mark.parametrize("cls", _ADMISSION)
def test_admission_errors_have_retry_after_of_at_least_a_second(cls: type[GatewayError]) -> None:
    assert cls("busy", retry_after_s=0).headers()[0] == (b"retry-after", b"1")  # type: ignore[call-arg]
    assert cls("busy", retry_after_s=12).headers()[0] == (b"retry-after", b"12")  # type: ignore[call-arg]


def test_key_rate_limit_carries_openai_type_and_headers() -> None:
    err = errors.KeyRateLimitError(
        "slow down",
        retry_after_s=3,
        extra_headers=[(b"x-ratelimit-limit-requests", b"5")],
        type_="requests",
    )
    assert orjson.loads(err.body())["error"] == {
        "message": "slow down",
        "type": "requests",
        "code": "rate_limit_exceeded",
    }
    assert err.headers() == [(b"retry-after", b"3"), (b"x-ratelimit-limit-requests", b"5")]


def test_only_errors_before_any_answer_are_retryable() -> None:
    retryable = {cls for cls in EXPECTED if cls("x").retryable}
    assert retryable == {errors.UpstreamConnectError, errors.UpstreamFirstByteTimeoutError}


def test_overload_is_not_an_upstream_error() -> None:
    """The gateway's own limit must never be counted against a backend."""
    assert not issubclass(errors.GatewayOverloadedError, errors.UpstreamError)


def test_upstream_errors_share_a_base() -> None:
    for cls in (errors.UpstreamConnectError, errors.UpstreamTimeoutError):
        assert issubclass(cls, errors.UpstreamError)
    assert issubclass(errors.UpstreamProtocolError, errors.UpstreamError)
    assert issubclass(errors.ModelNotFoundError, errors.NotFoundError)
    assert issubclass(errors.UnknownPolicyError, errors.BadRequestError)


def test_error_body_escapes_the_message() -> None:
    body = error_body('quote " and \n newline', "t", "c")
    assert orjson.loads(body)["error"]["message"] == 'quote " and \n newline'


def test_sglang_shape_is_the_message_alone() -> None:
    """What SGLang's /generate answers a request it cannot serve."""
    exc = errors.BadRequestError("Either text, input_ids or input_embeds should be provided.")
    assert orjson.loads(exc.body("sglang")) == {"error": {"message": exc.message}}
    assert orjson.loads(exc.body())["error"]["type"] == "invalid_request_error"


def test_authentication_error_asks_for_a_bearer_token() -> None:
    assert errors.AuthenticationError("no key").headers() == [(b"www-authenticate", b"Bearer")]


def test_405_lists_the_allowed_methods() -> None:
    exc = errors.MethodNotAllowedError("no", allow=("GET", "POST"))
    assert exc.headers() == [(b"allow", b"GET, POST")]
