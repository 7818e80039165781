"""The request router: LoRA adapters, Retry-After when no backend is healthy, the policy
header only if allowed, SGLang's native API on SGLang's backends, and requests pinned to a
stored response's backend."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from gateway.app import GatewayApp
from gateway.compose import build_runtime
from gateway.errors import (
    BadRequestError,
    ModelNotFoundError,
    NoHealthyBackendError,
    ResponseNotFoundError,
)
from gateway.inference_request import parse_inference_body
from gateway.responses.affinity import Pin
from routing.config.schema import parse_config
from routing.types import EngineMetrics

BASE = {"id": "llama", "object": "model", "root": "/models/llama", "parent": None}
SQL = {"id": "sql-lora", "object": "model", "root": "/adapters/sql", "parent": "llama"}
CHAT = {"id": "chat-lora", "object": "model", "root": "/adapters/chat", "parent": "llama"}


def _app(cards: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> GatewayApp:
    raw = {
        "backends": [{"url": f"http://{name}:8000", "id": name} for name in cards],
        "routing": {
            "policy": "lora",
            "profiles": {
                "lora": {
                    "scorers": [{"type": "lora-affinity-scorer"}],
                    "picker": {"type": "max-score-picker"},
                }
            },
        },
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 0.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
        backend.model_cards = dict(cards[backend.id])
    return app


def _route(app: GatewayApp, model: str) -> Any:
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return app.runtime.router.route(parse_inference_body("chat", body), {}, request_id="r")


def test_a_model_listed_with_a_parent_is_a_lora_adapter() -> None:
    app = _app({"a": {"llama": BASE, "sql-lora": SQL}, "b": {"llama": BASE, "chat-lora": CHAT}})
    assert _route(app, "sql-lora").request.lora_adapter == "sql-lora"
    assert _route(app, "chat-lora").request.lora_adapter == "chat-lora"


def test_a_base_model_request_names_no_adapter() -> None:
    app = _app({"a": {"llama": BASE, "sql-lora": SQL}})
    assert _route(app, "llama").request.lora_adapter is None


def test_cards_without_a_parent_name_no_adapter() -> None:
    app = _app({"a": {"m": {"id": "m", "object": "model"}}})
    assert _route(app, "m").request.lora_adapter is None


def test_the_adapter_reaches_the_lora_affinity_scorer() -> None:
    app = _app({"a": {"llama": BASE, "sql-lora": SQL}, "b": {"llama": BASE, "sql-lora": SQL}})
    app.runtime.pool.get("a").metrics = EngineMetrics(scraped_at=0.0, max_loras=1)
    app.runtime.pool.get("b").metrics = EngineMetrics(
        scraped_at=0.0, running_loras=frozenset({"sql-lora"}), max_loras=1
    )
    route = _route(app, "sql-lora")
    assert route.decision.target == "b"
    scores = {s.endpoint_id: s.scores["lora-affinity-scorer"] for s in route.decision.scores}
    assert scores == {"a": 0.8, "b": 1.0}
    # The base model is no adapter: the scorer is neutral.
    route = _route(app, "llama")
    assert {s.scores["lora-affinity-scorer"] for s in route.decision.scores} == {1.0}


# -- Retry-After when no backend is healthy ----------------------------------------------


class _Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _ejectable(clock: _Clock, **health: float) -> GatewayApp:
    raw = {
        "backends": [{"url": f"http://{n}:8000", "id": n, "models": ["m"]} for n in "ab"],
        "health": {"passive_fail_threshold": 1, "probe_interval_s": 5.0, **health},
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=clock, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, clock.now)
    return app


def _retry_after(app: GatewayApp) -> str:
    with pytest.raises(NoHealthyBackendError) as info:
        _route(app, "m")
    return dict(info.value.headers())[b"retry-after"].decode()


def test_retry_after_counts_down_to_the_earliest_readmission() -> None:
    clock = _Clock()
    app = _ejectable(clock, ejection_base_s=20.0)
    app.runtime.pool.get("a").state.record_upstream_failure(clock.now, "x")  # back at 120
    clock.now += 8
    app.runtime.pool.get("b").state.record_upstream_failure(clock.now, "x")  # back at 128
    assert _retry_after(app) == "12"
    clock.now += 11.5
    assert _retry_after(app) == "1"  # half a second left: at least 1


def test_retry_after_is_capped() -> None:
    clock = _Clock()
    app = _ejectable(clock, ejection_base_s=250.0)
    for backend in app.runtime.pool:
        backend.state.record_upstream_failure(clock.now, "x")
    assert _retry_after(app) == "60"


def test_retry_after_for_backends_down_by_probes_is_the_fastest_readmission() -> None:
    clock = _Clock()
    app = _ejectable(clock, ejection_base_s=250.0, fail_threshold=1, success_threshold=2)
    app.runtime.pool.get("a").state.record_upstream_failure(clock.now, "x")
    app.runtime.pool.get("b").state.record_probe(False, clock.now)
    assert _retry_after(app) == "10"  # two good probes 5 s apart


def _routed_with_header(allow: bool) -> Any:
    raw = {"backends": [{"url": "http://a:8000", "id": "a"}], "routing": {"policy": "session"}}
    if allow:
        raw["routing"] = {"policy": "session", "allow_policy_header": True}
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 0.0, rng=random.Random(1)))
    backend = app.runtime.pool.get("a")
    backend.state.record_probe(True, 0.0)
    backend.model_cards = {"llama": BASE}
    body = orjson.dumps({"model": "llama", "messages": [{"role": "user", "content": "hi"}]})
    headers = {"x-kvgate-policy": "round-robin"}
    return app.runtime.router.route(parse_inference_body("chat", body), headers, request_id="r")


def test_the_policy_header_is_not_read_unless_allowed() -> None:
    ignored = _routed_with_header(allow=False)
    assert ignored.decision.profile == "session"
    assert dict(ignored.request.headers) == {}  # plugins do not see it either
    honoured = _routed_with_header(allow=True)
    assert honoured.decision.profile == "round-robin"
    assert dict(honoured.request.headers) == {"x-kvgate-policy": "round-robin"}


def test_a_route_says_why_and_how_long_it_took() -> None:
    app = _app({"a": {"llama": BASE}, "b": {"llama": BASE}})
    route = _route(app, "llama")
    assert route.reason == "picker"  # neither serves the adapter: lora affinity ties
    assert 0.0 < route.seconds < 1.0
    app.runtime.pool.get("b").state.record_probe(False, 0.0)
    app.runtime.pool.get("b").state.record_probe(False, 0.0)
    app.runtime.pool.get("b").state.record_probe(False, 0.0)
    assert _route(app, "llama").reason == "only_candidate"


# -- SGLang's native API: its engine, its pool's model --------------------------------------


def _engines(engines: Mapping[str, tuple[str, tuple[str, ...]]]) -> GatewayApp:
    """Backends `id → (engine, models)`, all healthy, round-robin."""
    raw = {
        "backends": [
            {"url": f"http://{name}:8000", "id": name, "engine": engine}
            for name, (engine, _) in engines.items()
        ],
        "routing": {"policy": "round-robin"},
    }
    app = GatewayApp(build_runtime(parse_config(raw), clock=lambda: 0.0, rng=random.Random(1)))
    for backend in app.runtime.pool:
        backend.state.record_probe(True, 0.0)
        backend.model_cards = {m: {"id": m, "object": "model"} for m in engines[backend.id][1]}
    return app


def _generate(app: GatewayApp, **fields: Any) -> Any:
    req = parse_inference_body("generate", orjson.dumps({"text": "hi", **fields}))
    req = app.runtime.director.resolve(req)
    return app.runtime.router.route(req, {}, request_id="r")


def test_generate_goes_to_the_sglang_backends_and_their_model() -> None:
    app = _engines(
        {"v": ("vllm", ("llama",)), "s1": ("sglang", ("qwen",)), "s2": ("sglang", ("qwen",))}
    )
    route = _generate(app)
    assert route.request.model == "qwen"
    assert sorted(route.decision.ranked) == ["s1", "s2"]
    assert dict(route.excluded) == {"v": "not an sglang engine"}
    with pytest.raises(ModelNotFoundError):  # a model only vLLM serves: not for /generate
        _generate(app, model="llama")


def test_generate_goes_anywhere_when_no_engine_is_declared_sglang() -> None:
    app = _engines({"a": ("openai", ("m",)), "b": ("vllm", ("m",))})
    route = _generate(app)
    assert (route.request.model, sorted(route.decision.ranked)) == ("m", ["a", "b"])


def test_default_model_needs_one_model() -> None:
    app = _engines({"a": ("sglang", ("m1",)), "b": ("sglang", ("m2",))})
    with pytest.raises(BadRequestError, match=r"serve several \(m1, m2\)"):
        _generate(app)
    assert _generate(app, model="m2").decision.ranked == ("b",)
    empty = _engines({"a": ("sglang", ())})
    with pytest.raises(NoHealthyBackendError, match="no backend lists a model for /generate"):
        _generate(empty)


def test_utility_endpoints_take_the_pool_model_from_any_engine() -> None:
    app = _engines({"v": ("vllm", ("llama",)), "s": ("sglang", ("llama",))})
    req = parse_inference_body("tokenize", orjson.dumps({"prompt": "hi"}))
    route = app.runtime.router.route(app.runtime.director.resolve(req), {}, request_id="r")
    assert (route.request.model, sorted(route.decision.ranked)) == ("llama", ["s", "v"])
    assert route.request.prefix_hashes == ()  # no prefix accounting


async def test_input_ids_are_the_requests_token_ids_without_a_tokenizer() -> None:
    app = _engines({"s": ("sglang", ("qwen",))})
    director = app.runtime.director
    ids_body = orjson.dumps({"input_ids": [[5, 6, 7], [8]]})
    req = director.resolve(parse_inference_body("generate", ids_body))
    assert await director.token_ids(req) == [5, 6, 7]  # a batch: its first prompt
    route = app.runtime.router.route(req, {}, request_id="r", token_ids=[5, 6, 7])
    assert route.request.prompt_tokens == 3
    text = director.resolve(parse_inference_body("generate", orjson.dumps({"text": "5 6 7"})))
    assert await director.token_ids(text) is None  # no tokenizer configured


# -- requests pinned to the backend holding a stored response ----------------------------


def _follow_up(app: GatewayApp, pin: Pin | None, model: str = "m") -> Any:
    more = "and then? " * 20  # a few routing blocks
    body = orjson.dumps({"model": model, "input": more, "previous_response_id": "resp_1"})
    req = parse_inference_body("responses", body)
    return app.runtime.router.route(req, {}, request_id="r", pin=pin)


def test_a_pinned_request_goes_to_its_backend_alone() -> None:
    app = _ejectable(_Clock())
    for target in ("a", "b"):
        route = _follow_up(app, Pin("resp_1", target))
        assert (route.decision.ranked, route.reason) == ((target,), "affinity")
        assert route.request.prefix_hashes  # its new input is still placed there
    # whatever its model: the backend answers with its own error
    assert _follow_up(app, Pin("resp_1", "a"), model="unknown").decision.ranked == ("a",)


def test_a_pinned_request_to_a_draining_backend_still_goes() -> None:
    app = _ejectable(_Clock())
    app.runtime.pool.get("a").draining = True
    assert _follow_up(app, Pin("resp_1", "a")).decision.ranked == ("a",)


def test_a_pinned_request_is_refused_rather_than_sent_elsewhere() -> None:
    clock = _Clock()
    app = _ejectable(clock, ejection_base_s=20.0)
    app.runtime.pool.get("a").state.record_upstream_failure(clock.now, "x")
    with pytest.raises(NoHealthyBackendError) as unavailable:
        _follow_up(app, Pin("resp_1", "a"))
    assert dict(unavailable.value.headers())[b"retry-after"] == b"20"
    assert "resp_1" in unavailable.value.message and "'a'" not in unavailable.value.message
    with pytest.raises(ResponseNotFoundError):
        _follow_up(app, Pin("resp_1", "gone"))


def test_requests_on_a_stored_response_go_to_its_backend() -> None:
    app = _ejectable(_Clock())
    router = app.runtime.router
    route = router.stored("r", Pin("resp_1", "b"), stream=True)
    assert (route.decision.ranked, route.reason, route.request.stream) == (("b",), "affinity", True)
    assert route.request.api == "responses" and not route.request.prefix_hashes
    app.runtime.pool.get("a").in_flight = 3
    assert router.stored("r", None).decision.ranked == ("b",)  # not pinned: the least busy
    with pytest.raises(NoHealthyBackendError):  # outside the proxy's subset: not gone
        router.stored("r", Pin("resp_1", "b"), subset={"a"})
