"""SGLang's `/generate` request and answer shapes, as the emulator reads and writes them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sim.emulator import sglang_api as api


def _items(data: dict[str, Any]) -> list[tuple[str, Any, int]]:
    req = api.parse_generate(data)
    return [
        (i.rid, i.text if i.text is not None else i.input_ids, i.max_new_tokens) for i in req.items
    ]


def test_single_prompts() -> None:
    req = api.parse_generate({"text": "hi", "rid": "r", "stream": True})
    assert (req.single, req.stream) == (True, True)
    assert _items({"text": "hi", "rid": "r"}) == [("r", "hi", api.DEFAULT_MAX_NEW_TOKENS)]
    ids = {"input_ids": [1, 2], "rid": "r", "sampling_params": {"max_new_tokens": 3}}
    assert _items(ids) == [("r", (1, 2), 3)]
    assert _items({"text": "t", "input_ids": [4], "rid": "r"}) == [("r", (4,), 128)]


def test_batches_and_parallel_samples() -> None:
    assert not api.parse_generate({"text": ["a"]}).single  # a list answers with a list
    assert _items({"text": ["a", "b"], "rid": "x"}) == [("x_0", "a", 128), ("x_1", "b", 128)]
    assert _items({"input_ids": [[1], [2]], "rid": ["p", "q"]}) == [
        ("p", (1,), 128),
        ("q", (2,), 128),
    ]
    per_item = {
        "text": ["a", "b"],
        "sampling_params": [{"max_new_tokens": 1}, {"max_new_tokens": 2}],
    }
    assert [n for _, _, n in _items(per_item)] == [1, 2]
    sampled = api.parse_generate({"text": "a", "sampling_params": {"n": 2}})
    assert not sampled.single and [i.text for i in sampled.items] == ["a", "a"]
    assert len({i.rid for i in sampled.items}) == 2


@pytest.mark.parametrize(
    ("data", "body"),
    [
        ({}, {"error": {"message": "Either text, input_ids or input_embeds should be provided."}}),
        ({"input_ids": []}, {"error": {"message": "input_ids cannot be empty."}}),
        ({"text": ["a", "b"], "rid": ["one"]}, None),
        ({"text": 5}, "validation"),
        ({"text": "a", "sampling_params": {"max_new_tokens": -1}}, "validation"),
    ],
)
def test_refusals_in_sglangs_shapes(data: dict[str, Any], body: Any) -> None:
    with pytest.raises(api.SglangError) as info:
        api.parse_generate(data)
    got = orjson.loads(info.value.body())
    assert info.value.status == 400
    if body == "validation":  # FastAPI's model validation, flat
        assert got.keys() == {"object", "message", "type", "param", "code"}
        assert (got["object"], got["type"], got["code"]) == ("error", "Bad Request", 400)
    elif body is not None:
        assert got == body
    else:
        assert list(got) == ["error"] and list(got["error"]) == ["message"]


def test_answer_and_event_shapes() -> None:
    meta = api.meta_info("r", 7, 2, 4, finished=False)
    assert list(meta) == [
        "id",
        "finish_reason",
        "prompt_tokens",
        "weight_version",
        "total_retractions",
        "completion_tokens",
        "cached_tokens",
    ]
    assert meta["finish_reason"] is None
    done = api.meta_info("r", 7, 2, 4, finished=True, e2e_latency=0.5)
    assert done["finish_reason"] == {"type": "length", "length": 2} and done["e2e_latency"] == 0.5
    out = api.output(" a b", [5, 6], done)
    assert list(out) == ["text", "output_ids", "meta_info"]
    assert api.event(out) == b"data: " + orjson.dumps(out) + b"\n\n"


def test_rerank_best_first_and_score_rows() -> None:
    ranked = api.rerank("red apple", ["a pear", "red apple", "apple"], None, True)
    assert [r["index"] for r in ranked] == [1, 2, 0]
    assert list(ranked[0]) == ["score", "document", "index", "meta_info"]
    assert api.rerank("q", ["a", "b"], 1, False) == [{"score": 0.0, "index": 0, "meta_info": None}]
    scored = api.score("m", 2, 4)
    assert scored["scores"] == [[0.25] * 4] * 2 and scored["object"] == "scoring"
