"""InferenceObjective and InferenceModelRewrite objects parsed: the pool's only, in precedence."""

from __future__ import annotations

from typing import Any

from health.discovery.inference_objects import objective_priorities, rewrite_rules
from tests.support.fake_kube import inference_objective, model_rewrite


def _keyed(*objs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    for o in objs:
        o["metadata"]["namespace"] = "default"  # as the API returns them
    return {f"default/{o['metadata']['name']}": o for o in objs}


def test_objectives_of_the_pool_with_their_priority_unset_as_zero() -> None:
    objects = _keyed(
        inference_objective("premium", 10),
        inference_objective("batch", -1),
        inference_objective("plain", None),
        inference_objective("elsewhere", 5, pool="other"),
        {"metadata": {"name": "broken"}, "spec": "x"},
    )
    assert objective_priorities(objects, "llm") == {"premium": 10, "batch": -1, "plain": 0}


def _target(model: str, weight: int | None = None) -> dict[str, Any]:
    return {"modelRewrite": model} | ({} if weight is None else {"weight": weight})


def _exact(*models: str) -> list[dict[str, Any]]:
    return [{"model": {"type": "Exact", "value": m}} for m in models]


def test_rewrite_rules_oldest_object_first_each_in_order() -> None:
    newer = model_rewrite(
        "newer",
        [{"matches": _exact("food"), "targets": [_target("food-new")]}],
        created="2026-02-01T00:00:00Z",
    )
    older = model_rewrite(
        "older",
        [
            {"matches": _exact("food", "snack"), "targets": [_target("v1", 90), _target("v2", 10)]},
            {"targets": [_target("base")]},  # no matches: every model
        ],
        created="2026-01-01T00:00:00Z",
    )
    other = model_rewrite("other", [{"targets": [_target("x")]}], pool="another")
    rules = rewrite_rules(_keyed(newer, older, other), "llm")
    assert [(sorted(r.models), r.targets, r.source) for r in rules] == [
        (["food", "snack"], (("v1", 90), ("v2", 10)), "default/older"),
        ([], (("base", 1),), "default/older"),
        (["food"], (("food-new", 1),), "default/newer"),
    ]


def test_unweighted_targets_share_equally_and_mixed_ones_are_never_drawn() -> None:
    rules = rewrite_rules(
        _keyed(
            model_rewrite("a", [{"matches": _exact("m"), "targets": [_target("x"), _target("y")]}]),
            model_rewrite(
                "b", [{"matches": _exact("n"), "targets": [_target("x", 3), _target("y")]}]
            ),
        ),
        "llm",
    )
    assert [r.targets for r in rules] == [(("x", 1), ("y", 1)), (("x", 3), ("y", 0))]


def test_unusable_rules_are_skipped() -> None:
    rules = rewrite_rules(
        _keyed(
            model_rewrite(
                "r",
                [
                    {"matches": [{"model": {"type": "Prefix", "value": "m"}}], "targets": []},
                    {"matches": _exact("m"), "targets": []},  # nowhere to go
                    {"matches": _exact("m"), "targets": [_target("ok")]},
                ],
            )
        ),
        "llm",
    )
    assert [r.targets for r in rules] == [(("ok", 1),)]
