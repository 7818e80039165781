"""The reference endpoint picker's control headers, each read by its current name, then its alias.

- objective: `x-llm-d-inference-objective` (alias `x-gateway-inference-objective`), the
  InferenceObjective whose priority places the request in admission;
- fairness id: `x-llm-d-inference-fairness-id` (alias `x-gateway-inference-fairness-id`), the
  flow fair sharing is between (admission's tenant when no API key names one);
- model name rewrite: `x-llm-d-model-name-rewrite` (alias `x-gateway-model-name-rewrite`), the
  model the engine gets when no rewrite rule applies; set on a rewritten request towards the
  engine.
"""

from __future__ import annotations

from collections.abc import Mapping

OBJECTIVE = ("x-llm-d-inference-objective", "x-gateway-inference-objective")
FAIRNESS_ID = ("x-llm-d-inference-fairness-id", "x-gateway-inference-fairness-id")
MODEL_REWRITE = ("x-llm-d-model-name-rewrite", "x-gateway-model-name-rewrite")


def control_header(headers: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of `names` (lower-case) present with a value in `headers`, stripped."""
    for name in names:
        value = headers.get(name)
        if value and (value := value.strip()):
            return value
    return None
