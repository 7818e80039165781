"""The prefill/decode pair of vLLM servers, started once for every test that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import REPO_ROOT
from tests.vllm.pd_pair import PdPair, vllm_pd_pair

PD_OUT = REPO_ROOT / "out" / "vllm-pd"


@pytest.fixture(scope="session")
def pd_pair() -> Iterator[PdPair]:
    with vllm_pd_pair(PD_OUT) as pair:
        yield pair
