"""The fetch interface: what an answer is, and that `health` needs no HTTP library for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from health.fetch import FetchResult

REPO = Path(__file__).resolve().parents[3]
HTTP_LIBRARIES = frozenset({"httpx", "httpcore", "anyio", "h11", "httptools", "uvicorn"})


@pytest.mark.parametrize(("status", "ok"), [(199, False), (200, True), (299, True), (304, False)])
def test_ok_means_a_2xx_status(status: int, ok: bool) -> None:
    assert FetchResult(status, b"").ok is ok


def test_health_loads_no_http_library() -> None:
    code = (
        "import json, sys, health.fetch, health.prober, health.scraper\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert HTTP_LIBRARIES.isdisjoint(json.loads(proc.stdout))
