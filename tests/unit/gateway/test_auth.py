from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from gateway.auth import (
    ANONYMOUS,
    RELOAD_CHECK_S,
    KeyStore,
    Principal,
    admin_access,
    authenticate,
    build_key_store,
    env_keys,
    hash_key,
    load_keys_file,
)
from gateway.errors import AuthenticationError
from routing.config.schema import ApiKeyEntry, SecuritySection, parse_config


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _entry(name: str, key: str, **kw: object) -> ApiKeyEntry:
    return ApiKeyEntry.model_validate({"name": name, "sha256": hash_key(key), **kw})


def _write_keys(path: Path, *entries: tuple[str, str], mtime: float) -> None:
    lines = "".join(f"- {{name: {n}, sha256: {hash_key(k)}, tier: gold}}\n" for n, k in entries)
    path.write_text(lines)
    os.utime(path, (mtime, mtime))  # distinct mtimes even within one filesystem tick


def test_hash_key_is_hex_sha256() -> None:
    assert hash_key("secret") == "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"


def test_principal_of_a_valid_key_carries_tier_and_limits() -> None:
    store = KeyStore([_entry("team-a", "ka", tier="gold", requests_per_minute=60)])
    assert store.enabled
    assert store.principal("ka") == Principal("team-a", "gold", 60, None)
    assert store.principal("kb") is None
    assert store.principal(None) is None


def test_no_keys_means_anonymous_and_any_request_passes() -> None:
    store = KeyStore([])
    assert not store.enabled
    assert authenticate(store, None) is ANONYMOUS
    assert ANONYMOUS.anonymous and not Principal("x", "default").anonymous


def test_missing_or_wrong_key_is_401_invalid_api_key() -> None:
    store = KeyStore([_entry("a", "ka")])
    for token in (None, "wrong"):
        with pytest.raises(AuthenticationError) as info:
            authenticate(store, token)
        assert info.value.status == 401
        assert info.value.code == "invalid_api_key"
    assert authenticate(store, "ka").name == "a"


def test_env_keys_take_plaintext_or_name_and_hash() -> None:
    digest = hash_key("k2")
    keys = env_keys(f" k1 ,ops:{digest},")
    assert [(k.name, k.sha256) for k in keys] == [("env-1", hash_key("k1")), ("ops", digest)]


@pytest.mark.parametrize("item", ["kvgate-example-key", f"ops:{hash_key('kvgate-example-key')}"])
def test_env_keys_refuse_a_documented_example(item: str) -> None:
    with pytest.raises(ValueError, match=r"KVGATE_API_KEYS key 2 is the documented example key"):
        env_keys(f"k1,{item}")


def test_a_keys_file_with_a_documented_example_fails_to_load(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    _write_keys(path, ("a", "kvgate-example-key"), mtime=1000.0)
    with pytest.raises(ValueError, match=r"keys.yaml: 0.sha256: .*documented example key"):
        load_keys_file(str(path))


def test_the_admin_key_variable_refuses_a_documented_example() -> None:
    cfg = parse_config({})
    with pytest.raises(ValueError, match=r"KVGATE_ADMIN_KEY is the documented example key"):
        admin_access(cfg, {"KVGATE_ADMIN_KEY": "kvgate-example-admin-key"})
    assert admin_access(cfg, {"KVGATE_ADMIN_KEY": "mine"}).digest is not None


def test_key_store_merges_config_and_env() -> None:
    keys = [{"name": "a", "sha256": hash_key("ka")}]
    section = SecuritySection.model_validate({"api_keys": keys})
    store = build_key_store(section, {"KVGATE_API_KEYS": "kb"}, Clock())
    assert store.principal("ka") is not None
    assert store.principal("kb") is not None


def test_a_keys_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    path, clock = tmp_path / "keys.yaml", Clock()
    _write_keys(path, ("a", "ka"), mtime=1000.0)
    store = KeyStore([], str(path), clock)
    assert store.principal("ka") == Principal("a", "gold")
    _write_keys(path, ("a", "ka"), ("b", "kb"), mtime=2000.0)
    assert store.principal("kb") is None  # looked at no more than once a second
    clock.now += RELOAD_CHECK_S
    assert store.principal("kb") == Principal("b", "gold")


def test_sighup_rereads_at_once(tmp_path: Path) -> None:
    path, clock = tmp_path / "keys.yaml", Clock()
    _write_keys(path, ("a", "ka"), mtime=1000.0)
    store = KeyStore([], str(path), clock)
    store.principal("ka")
    _write_keys(path, ("b", "kb"), mtime=1000.0)  # same mtime: only a forced read sees it
    store.request_reload()
    assert store.principal("kb") is not None
    assert store.principal("ka") is None  # a key removed from the file is gone


def test_a_broken_keys_file_keeps_the_previous_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock = tmp_path / "keys.yaml", Clock()
    _write_keys(path, ("a", "ka"), mtime=1000.0)
    store = KeyStore([], str(path), clock)
    path.write_text("- {name: b, sha256: not-a-hash}\n")
    os.utime(path, (2000.0, 2000.0))
    clock.now += RELOAD_CHECK_S
    with caplog.at_level(logging.ERROR, logger="gateway.auth"):
        assert store.principal("ka") is not None
    assert "keeping the previous keys" in caplog.text
    path.unlink()  # a missing file too
    clock.now += RELOAD_CHECK_S
    assert store.principal("ka") is not None


def test_a_keys_file_that_is_broken_at_start_fails_the_start(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("{not: a list}")
    with pytest.raises(ValueError, match=r"keys\.yaml"):
        KeyStore([], str(path), Clock())
    with pytest.raises(ValueError, match="cannot read"):
        KeyStore([], str(tmp_path / "absent.yaml"), Clock())


def test_an_empty_keys_file_still_requires_a_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("")
    store = KeyStore([], str(path), Clock())
    assert store.enabled
    with pytest.raises(AuthenticationError):
        authenticate(store, "anything")


def test_duplicate_names_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    _write_keys(path, ("a", "k1"), ("a", "k2"), mtime=1000.0)
    with pytest.raises(ValueError, match="same name"):
        load_keys_file(str(path))
