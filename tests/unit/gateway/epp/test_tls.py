"""The ext_proc port's TLS: a self-signed pair made in memory, `--cert-path` pairs loaded,
checked and followed at most once per interval, a bad pair leaving the previous one serving."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from gateway.epp.tls import SELF_SIGNED_DAYS, CertificateFiles, load_pair, self_signed_pair
from tests.support.certs import self_signed


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _common_name(chain: bytes) -> str:
    cert = x509.load_pem_x509_certificate(chain)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def _install(directory: Path, name: str) -> None:
    """A fresh pair for `name` copied to directory/tls.crt and tls.key."""
    cert, key = self_signed(directory, name)
    shutil.copy(cert, directory / "tls.crt")
    shutil.copy(key, directory / "tls.key")


def test_the_self_signed_pair_belongs_together(tmp_path: Path) -> None:
    key, chain = self_signed_pair()
    (tmp_path / "tls.crt").write_bytes(chain)
    (tmp_path / "tls.key").write_bytes(key)
    assert load_pair(tmp_path / "tls.crt", tmp_path / "tls.key") == (key, chain)
    cert = x509.load_pem_x509_certificate(chain)
    assert _common_name(chain) == "kvgate-epp"
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime.days >= SELF_SIGNED_DAYS
    assert self_signed_pair()[0] != key  # a new key each start


def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    a_cert, _ = self_signed(tmp_path, "a")
    _, b_key = self_signed(tmp_path, "b")
    with pytest.raises(ValueError, match="does not match"):
        load_pair(a_cert, b_key)


def test_missing_files_fail_at_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        CertificateFiles(tmp_path)


def test_a_rotated_pair_is_fetched_once_after_the_interval(tmp_path: Path) -> None:
    _install(tmp_path, "a")
    clock = Clock()
    files = CertificateFiles(tmp_path, clock=clock)
    assert _common_name(files.pair[1]) == "kvgate-a"
    _install(tmp_path, "b")
    clock.now += 0.5
    assert files.fetch() is None  # checked a second ago at most: not yet
    clock.now += 0.6
    assert files.fetch() is not None
    assert _common_name(files.pair[1]) == "kvgate-b"
    clock.now += 5
    assert files.fetch() is None  # unchanged since


def test_a_half_written_rotation_keeps_the_previous_pair(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _install(tmp_path, "a")
    clock = Clock()
    files = CertificateFiles(tmp_path, clock=clock)
    cert, _ = self_signed(tmp_path, "b")
    shutil.copy(cert, tmp_path / "tls.crt")  # the key not yet
    clock.now += 2
    assert files.fetch() is None
    assert _common_name(files.pair[1]) == "kvgate-a"
    assert "not reloaded" in caplog.text
    shutil.copy(tmp_path / "b.key", tmp_path / "tls.key")
    clock.now += 2
    assert files.fetch() is not None and _common_name(files.pair[1]) == "kvgate-b"
