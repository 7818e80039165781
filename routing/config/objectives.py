"""The `objectives:` and `rewrites:` sections: Gateway API Inference Extension objects in the file.

`objectives` are InferenceObjectives by name (a request names one in header
`x-llm-d-inference-objective`): an integer `priority`, higher first, negative sheddable.
`rewrites` are InferenceModelRewrite rules: a request whose `model` is one of `models` (any
model when empty) goes to one of `targets`, drawn by weight. Both hold without a cluster
(`kvgate serve`, tests); under `discovery.pool` the cluster's objects are added to them
(`discovery.objects_api`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ObjectiveEntry(_Entry):
    """One InferenceObjective: requests naming it get its priority."""

    name: str = Field(min_length=1, description="the x-llm-d-inference-objective value")
    priority: int = Field(
        0, description="higher first; > 0 the first band, 0 the default one, < 0 sheddable"
    )


class RewriteTarget(_Entry):
    """A model a rewrite rule sends a share of its requests to."""

    model: str = Field(min_length=1, description="the model name the engine gets")
    weight: int = Field(1, ge=0, le=1_000_000, description="share: weight / sum of weights")


class RewriteEntry(_Entry):
    """One InferenceModelRewrite rule: the request's model replaced by a weighted target, the
    answer's model named back as the client asked."""

    models: list[str] = Field(
        default_factory=list, description="exact model names matched; empty: every model"
    )
    targets: list[RewriteTarget] = Field(min_length=1)

    @model_validator(mode="after")
    def _some_weight(self) -> RewriteEntry:
        if not any(t.weight for t in self.targets):
            raise ValueError("targets: at least one needs a weight above 0")
        return self


def check_unique_objectives(entries: list[ObjectiveEntry]) -> list[ObjectiveEntry]:
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"two objectives are named {entry.name!r}")
        seen.add(entry.name)
    return entries
