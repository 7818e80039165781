from __future__ import annotations

import re

import pytest

from gateway.header_policy import HeaderPolicy, build_header_policy, client_address, opaque_id
from gateway.upstream import request_headers
from routing.config.schema import SecuritySection

RAW = [
    (b"Authorization", b"Bearer client-key"),
    (b"X-Forwarded-For", b"203.0.113.7"),
    (b"content-type", b"application/json"),
]


def _policy(**security: object) -> HeaderPolicy:
    section = SecuritySection.model_validate(security)
    environ = {"KVGATE_UPSTREAM_API_KEY": "up"}
    return build_header_policy(section, keys_required=False, environ=environ)


def test_opaque_backend_ids_are_stable_short_and_hide_the_address() -> None:
    policy = _policy(backend_header_salt="s")
    tag = policy.backend_tag("10.0.0.5:8000")
    assert tag is not None and re.fullmatch(rb"[0-9a-f]{12}", tag)
    assert b"10.0.0.5" not in tag
    assert tag == policy.backend_tag("10.0.0.5:8000")
    assert tag != policy.backend_tag("10.0.0.6:8000")
    assert tag.decode() == opaque_id(b"s", "10.0.0.5:8000")  # shared salt: same id elsewhere


def test_without_a_salt_each_gateway_has_its_own_ids() -> None:
    assert _policy().backend_tag("b") != _policy().backend_tag("b")


def test_backend_header_id_and_off() -> None:
    assert _policy(backend_header="id").backend_tag("10.0.0.5:8000") == b"10.0.0.5:8000"
    assert _policy(backend_header="off").backend_tag("10.0.0.5:8000") is None


def test_forwarded_for_is_appended_and_proto_set() -> None:
    out = request_headers(RAW, "rid", _policy(), client="198.51.100.2", scheme="https")
    assert (b"x-forwarded-for", b"203.0.113.7, 198.51.100.2") in out
    assert (b"x-forwarded-proto", b"https") in out
    alone = request_headers([], "rid", _policy(), client="198.51.100.2")
    assert (b"x-forwarded-for", b"198.51.100.2") in alone
    off = request_headers(RAW, "rid", _policy(forwarded_for=False), client="198.51.100.2")
    assert (b"x-forwarded-for", b"203.0.113.7") in off
    assert b"x-forwarded-proto" not in dict(off)


@pytest.mark.parametrize(
    ("mode", "sent"),
    [("pass", b"Bearer client-key"), ("strip", None), ("replace", b"Bearer up")],
)
def test_authorization_towards_engines(mode: str, sent: bytes | None) -> None:
    out = request_headers(RAW, "rid", _policy(upstream_authorization=mode), client=None)
    assert [v for k, v in out if k == b"authorization"] == ([sent] if sent else [])


def test_authorization_default_strips_when_keys_are_required() -> None:
    section = SecuritySection()
    assert build_header_policy(section, keys_required=True, environ={}).authorization == "strip"
    assert build_header_policy(section, keys_required=False, environ={}).authorization == "pass"


def test_replace_without_an_upstream_key_is_a_config_error() -> None:
    section = SecuritySection(upstream_authorization="replace")
    with pytest.raises(ValueError, match="KVGATE_UPSTREAM_API_KEY"):
        build_header_policy(section, keys_required=False, environ={})


def test_client_address_from_the_scope() -> None:
    assert client_address({"client": ("198.51.100.2", 5555)}) == "198.51.100.2"
    assert client_address({"client": None}) is None
    assert client_address({}) is None


def test_no_policy_keeps_the_headers_as_before() -> None:
    out = request_headers(RAW, "rid")
    assert (b"authorization", b"Bearer client-key") in out
    assert b"x-forwarded-proto" not in dict(out)
