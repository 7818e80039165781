"""`ReloadingTls`: a changed certificate pair is picked up, at most once per interval, and
a pair that does not load leaves the previous one serving."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.http.tls import ReloadingTls
from tests.support.certs import self_signed


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = self_signed(tmp_path, "a")
    shutil.copy(cert, tmp_path / "serving.crt")
    shutil.copy(key, tmp_path / "serving.key")
    return tmp_path / "serving.crt", tmp_path / "serving.key"


def _replace(pair: tuple[Path, Path], name: str) -> None:
    cert, key = self_signed(pair[0].parent, name)
    shutil.copy(cert, pair[0])
    shutil.copy(key, pair[1])


def test_a_rotated_pair_serves_after_the_check_interval(pair: tuple[Path, Path]) -> None:
    clock = Clock()
    tls = ReloadingTls(*pair, clock=clock)
    first = tls.current
    assert first is tls.listener and tls.listener.sni_callback is not None
    _replace(pair, "b")
    clock.now += 0.5
    assert tls.refresh() is False and tls.current is first  # checked at most once a second
    clock.now += 0.6
    assert tls.refresh() is True and tls.current is not first
    clock.now += 2
    assert tls.refresh() is False  # unchanged files: nothing reloaded


def test_a_pair_that_does_not_load_keeps_the_previous_one(
    pair: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    tls = ReloadingTls(*pair, clock=clock)
    first = tls.current
    cert, key = self_signed(pair[0].parent, "c")
    shutil.copy(cert, pair[0])  # the new certificate, the old key: caught half-rotated
    clock.now += 1.5
    assert tls.refresh() is False and tls.current is first
    assert "not reloaded" in caplog.text
    shutil.copy(key, pair[1])  # the rotation completes: the next check takes it
    clock.now += 1.5
    assert tls.refresh() is True and tls.current is not first


def test_unreadable_files_fail_at_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        ReloadingTls(tmp_path / "none.crt", tmp_path / "none.key")
