"""The engines an emulated replica can be: whose HTTP surface and metric names it shows."""

from __future__ import annotations

from typing import Literal

Engine = Literal["vllm", "sglang"]
ENGINES: tuple[Engine, ...] = ("vllm", "sglang")
