"""Engine adapters by engine name, and a guess of the engine from a metrics page."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from adapters.base import EngineAdapter
from adapters.openai import OPENAI
from adapters.sglang import SGLANG
from adapters.trtllm import TRTLLM
from adapters.vllm import VLLM

ADAPTERS: Mapping[str, EngineAdapter] = MappingProxyType(
    {a.engine: a for a in (VLLM, SGLANG, TRTLLM, OPENAI)}
)

# Sample-name prefixes that give an engine away, checked in this order. `trtllm:` is how
# Dynamo re-exports TensorRT-LLM's metrics.
_PREFIXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("vllm:",)),
    ("sglang", ("sglang:",)),
    ("trtllm", ("trtllm_", "trtllm:")),
)


def get_adapter(engine: str) -> EngineAdapter:
    """The adapter for `engine`; `ValueError` naming the known engines if there is none."""
    try:
        return ADAPTERS[engine]
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ValueError(f"unknown engine {engine!r} (known: {known})") from None


def detect_engine(metrics_text: str) -> str:
    """The engine whose metrics appear in `metrics_text`, else "openai".

    Only sample lines count, not `# HELP` / `# TYPE` comments.
    """
    text = "\n" + metrics_text
    for engine, prefixes in _PREFIXES:
        if any("\n" + prefix in text for prefix in prefixes):
            return engine
    return OPENAI.engine
