"""Shared fixtures of the health tests: a settable clock and an in-memory engine at `URL`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from health.fetch import FetchResult

URL = "http://engine:8000"

Answer = FetchResult | Exception | Callable[[], FetchResult]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeFetcher:
    """A `health.fetch.Fetcher` that answers from a script per URL and records each GET.

    `script(url, a, b, c)`: the GETs of `url` get a, then b, then c, and c again ever after.
    An answer is a `FetchResult`, an exception (raised) or a function returning a result.
    A URL without a script fails the test.
    """

    def __init__(self) -> None:
        self._scripts: dict[str, list[Answer]] = {}
        self.calls: list[tuple[str, float]] = []
        self.max_bytes: int | None = None  # the cap of the last GET

    def script(self, url: str, *answers: Answer) -> None:
        self._scripts[url] = list(answers)

    def count(self, url: str) -> int:
        return sum(1 for called, _ in self.calls if called == url)

    async def get(self, url: str, timeout_s: float, max_bytes: int | None = None) -> FetchResult:
        self.calls.append((url, timeout_s))
        self.max_bytes = max_bytes
        script = self._scripts.get(url)
        assert script, f"unexpected GET {url}"
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, FetchResult) else answer()


def page(body: bytes | str = b"", status: int = 200, content_type: str = "") -> FetchResult:
    data = body.encode() if isinstance(body, str) else body
    return FetchResult(status, data, content_type)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fetcher() -> FakeFetcher:
    return FakeFetcher()
