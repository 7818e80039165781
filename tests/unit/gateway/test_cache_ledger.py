from __future__ import annotations

from typing import Any

import pytest

from gateway.cache_ledger import CacheLedger
from gateway.inference_request import InferenceRequest
from gateway.prompt_bytes import prompt_bytes
from gateway.usage import Usage
from health.pool import Backend, BackendSpec
from health.state import HealthPolicy, HealthState
from routing.config.profiles import PrefixSection
from routing.types import EndpointSnapshot, EngineMetrics, RoutingRequest
from scoring.state.prefix_feed import PrefixFeed
from scoring.state.prefix_hash import hash_blocks, prefix_seed
from scoring.state.prefix_index import DEFAULT_CAPACITY_BLOCKS, PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients
from tests.support.state_sink import RecordingSink

NOW = 1_000.0
MESSAGES = [{"role": "user", "content": "tell me a story " * 100}]  # 1,606 bytes


class RecordingModel(OnlineTtftModel):
    def __init__(self) -> None:
        super().__init__(TtftCoefficients(0.02, 2e-4))
        self.seen: list[tuple[str, float, float]] = []

    def observe(self, endpoint: str, work_tokens: float, ttft_s: float) -> None:
        self.seen.append((endpoint, work_tokens, ttft_s))


def _tracker(model: OnlineTtftModel | None = None, **section: Any) -> CacheLedger:
    return CacheLedger(PrefixFeed(PrefixSection(**section), PrefixIndex(), model))


def _backend(backend_id: str = "a", **metrics: Any) -> Backend:
    backend = Backend(
        spec=BackendSpec(url=f"http://{backend_id}.test:8000", id=backend_id),
        state=HealthState(HealthPolicy()),
    )
    if metrics:
        backend.metrics = EngineMetrics(scraped_at=0.0, **metrics)
    return backend


def _snapshot(backend_id: str, block_size: int | None) -> EndpointSnapshot:
    return _backend(backend_id, block_size=block_size).snapshot(0.0)


def _inference(prompt: Any = MESSAGES, api: str = "chat", **fields: Any) -> InferenceRequest:
    return InferenceRequest(
        api=api, model="m", stream=False, user=None, body_bytes=0, prompt=prompt, **fields
    )


def _routing(tracker: CacheLedger, block_chars: int = 64) -> RoutingRequest:
    hashes, tokens = tracker.hashes(_inference(), block_chars)
    return RoutingRequest(
        model="m", prefix_hashes=hashes, prefix_block_chars=block_chars, token_estimate=tokens
    )


def test_block_chars_default_to_16_tokens() -> None:
    assert _tracker().block_chars([]) == 64
    assert _tracker().block_chars([_backend("a").snapshot(0.0)]) == 64
    assert _tracker(chars_per_token=3.5).block_chars([]) == 56


def test_block_chars_follow_the_smallest_engine_block_size() -> None:
    tracker = _tracker()
    tracker.index.record("a", (1, 2, 3))
    assert tracker.block_chars([_snapshot("a", 32), _snapshot("b", 16)]) == 64
    assert tracker.index.blocks("a") == 3  # unchanged size: the index is kept
    assert tracker.block_chars([_snapshot("a", 32), _snapshot("b", None)]) == 128
    assert tracker.index.blocks("a") == 0  # every hash changed: the index starts over
    tracker.index.record("a", (1, 2, 3))
    assert tracker.block_chars([_backend("c").snapshot(0.0)]) == 128  # nothing reported: keep
    assert tracker.index.blocks("a") == 3


def test_configured_block_tokens_win() -> None:
    tracker = _tracker(block_tokens=8)
    tracker.index.record("a", (1, 2, 3))
    assert tracker.block_chars([_snapshot("a", 32)]) == 32
    assert tracker.index.blocks("a") == 3


def test_hashes_and_token_estimate() -> None:
    tracker = _tracker()
    hashes, tokens = tracker.hashes(_inference(), 64)
    data = prompt_bytes("chat", MESSAGES)
    assert hashes == hash_blocks(data, prefix_seed("m"), 64)
    assert len(hashes) == len(data) // 64
    assert tokens == len(data) // 4
    salted, _ = tracker.hashes(_inference(cache_salt="tenant"), 64)
    assert salted == hash_blocks(data, prefix_seed("m", "tenant"), 64) != hashes
    _, tokens_at_3 = _tracker(chars_per_token=3.0).hashes(_inference(), 64)
    assert tokens_at_3 == int(len(data) / 3)


def test_dispatch_counts_uncached_prefill_and_teaches_the_index() -> None:
    tracker = _tracker()
    backend = _backend("a")
    backend.pending_prefill_tokens = 100
    req = _routing(tracker)
    first = tracker.dispatch(backend, req, NOW)
    assert first.endpoint is backend and first.at == NOW and not first.settled
    assert (first.uncached_tokens, first.work_tokens) == (
        req.token_estimate,
        req.token_estimate + 100,
    )
    assert backend.pending_prefill_tokens == 100 + req.token_estimate
    assert tracker.index.match(req.prefix_hashes, ["a"]) == {"a": len(req.prefix_hashes)}
    # The same prompt again: only the partial last block (and anything after it) is uncached.
    second = tracker.dispatch(backend, req, NOW)
    cached_tokens = len(req.prefix_hashes) * 64 // 4
    assert second.uncached_tokens == req.token_estimate - cached_tokens
    assert second.work_tokens == second.uncached_tokens + 100 + req.token_estimate
    assert backend.pending_prefill_tokens == 100 + req.token_estimate + second.uncached_tokens
    # Elsewhere it is all uncached.
    other = _backend("b")
    assert tracker.dispatch(other, req, NOW).uncached_tokens == req.token_estimate


def test_first_token_settles_once_and_feeds_the_model_only_with_a_ttft() -> None:
    model = RecordingModel()
    tracker = _tracker(model)
    backend = _backend("a")
    req = _routing(tracker)
    streamed = tracker.dispatch(backend, req, NOW)
    other = tracker.dispatch(backend, req, NOW)
    total = streamed.uncached_tokens + other.uncached_tokens
    assert backend.pending_prefill_tokens == total
    tracker.first_token(streamed, 0.25)
    tracker.first_token(streamed, 0.30)  # idempotent: neither subtracted nor observed again
    assert backend.pending_prefill_tokens == other.uncached_tokens
    assert model.seen == [("a", streamed.work_tokens, 0.25)]
    tracker.first_token(other, None)  # not streamed: no TTFT to learn from
    assert backend.pending_prefill_tokens == 0
    assert model.seen == [("a", streamed.work_tokens, 0.25)]


def test_a_settled_prefill_is_told_to_the_other_gateways_at_once() -> None:
    # The pending prefill a first token settles leaves the shared load report now: with a
    # TTFT point (which wakes the sender) or, without one (not streamed, or a blind
    # dispatch), as a load change; settling again tells nothing.
    tracker = _tracker(RecordingModel())
    sink = tracker.sink = RecordingSink()
    backend = _backend("a")
    req = _routing(tracker)
    streamed, other, blind = (tracker.dispatch(backend, req, NOW) for _ in range(3))
    blind.blind = True
    sink.calls.clear()
    tracker.first_token(streamed, 0.25)
    assert sink.calls == [("ttft", "a", 0.25)]
    tracker.first_token(other, None)
    tracker.first_token(blind, 0.5)
    assert sink.calls[1:] == [("load_changed",), ("load_changed",)]
    tracker.first_token(other, 0.4)
    tracker.ended(other)  # a request's end is a load change of its own
    assert sink.calls[3:] == [("load_changed",)]
    assert backend.pending_prefill_tokens == 0


def test_first_token_without_a_model_still_settles() -> None:
    tracker = _tracker(None)
    backend = _backend("a")
    d = tracker.dispatch(backend, _routing(tracker), NOW)
    tracker.first_token(d, 0.1)
    assert backend.pending_prefill_tokens == 0


def test_capacity_from_engine_kv_size() -> None:
    tracker = _tracker()
    backend = _backend("a", num_blocks=1_000, block_size=16)
    tracker.dispatch(backend, _routing(tracker), NOW)
    # 1,000 engine blocks × 16 tokens × 4 bytes a token / 64-byte base blocks
    assert tracker.index.capacity("a") == 1_000
    tiny = _backend("tiny", num_blocks=3, block_size=16)
    req = _routing(tracker)
    tracker.dispatch(tiny, req, NOW)
    assert tracker.index.capacity("tiny") == 3
    assert tracker.index.match(req.prefix_hashes, ["tiny"]) == {"tiny": 3}  # the head is kept


def test_capacity_uses_the_current_block_chars() -> None:
    tracker = _tracker()
    assert tracker.block_chars([_snapshot("a", 32)]) == 128
    backend = _backend("a", num_blocks=1_000, block_size=32)
    tracker.dispatch(backend, _routing(tracker, 128), NOW)
    assert tracker.index.capacity("a") == 1_000  # 1,000 × 32 × 4 / 128


def test_configured_capacity_wins_and_unknown_keeps_the_default() -> None:
    tracker = _tracker(capacity_blocks=5)
    tracker.dispatch(_backend("a", num_blocks=1_000, block_size=16), _routing(tracker), NOW)
    assert tracker.index.capacity("a") == 5
    assert tracker.index.blocks("a") == 5
    plain = _tracker()
    plain.dispatch(_backend("b"), _routing(plain), NOW)
    assert plain.index.capacity("b") == DEFAULT_CAPACITY_BLOCKS


def test_requests_without_hashes_record_nothing() -> None:
    tracker = _tracker()
    backend = _backend("a", num_blocks=10, block_size=16)
    d = tracker.dispatch(backend, RoutingRequest(model="m", token_estimate=7), NOW)
    assert (d.uncached_tokens, backend.pending_prefill_tokens) == (7, 7)
    assert tracker.index.blocks("a") == 0
    assert tracker.index.capacity("a") == DEFAULT_CAPACITY_BLOCKS


def test_forget_drops_the_backend() -> None:
    tracker = _tracker()
    req = _routing(tracker)
    tracker.dispatch(_backend("a"), req, NOW)
    tracker.forget("a")
    assert tracker.index.match(req.prefix_hashes, ["a"]) == {"a": 0}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_responses_and_chat_hash_the_same_messages_alike(api: str) -> None:
    hashes, _ = _tracker().hashes(_inference(api=api), 64)
    assert hashes == hash_blocks(prompt_bytes("chat", MESSAGES), prefix_seed("m"), 64)


def test_observe_learns_which_backends_report_cached_tokens() -> None:
    """vLLM leaves `prompt_tokens_details` null both when it does not report cached tokens
    and when none were cached: a null counts as 0 once the backend was seen reporting."""
    tracker = _tracker()
    backend = _backend("a")
    req = _routing(tracker)
    prompt = req.token_estimate
    first = tracker.dispatch(backend, req, NOW)
    assert tracker.observe(first, Usage(prompt, None, 1)) is None
    assert tracker.observe(first, None) is None
    assert tracker.observe(first, Usage(None, 0, 1)) is None
    check = tracker.observe(first, Usage(prompt, 0, 1))
    assert check is not None and (check.predicted_tokens, check.observed_tokens) == (0, 0)
    again = tracker.dispatch(backend, req, NOW)
    check = tracker.observe(again, Usage(prompt, None, 1))  # reporting backend: none cached
    assert check is not None and check.observed_tokens == 0 and check.evicted_weight > 0
    hits = tracker.cache_hits["a"]
    assert (hits.requests, hits.prompt_tokens, hits.observed_tokens) == (2, 2 * prompt, 0)
    assert hits.predicted_tokens == check.predicted_tokens > 0
    assert hits.corrections == 1
    assert "b" not in tracker.cache_hits


def test_observe_reads_the_engines_block_size() -> None:
    tracker = _tracker()
    backend = _backend("a", block_size=128)
    req = _routing(tracker)
    tracker.dispatch(backend, req, NOW)
    again = tracker.dispatch(backend, req, NOW)
    # 25 blocks of 16 tokens predicted (400 tokens); whole 128-token blocks: 384 cached.
    check = tracker.observe(again, Usage(req.token_estimate, 384, 1))
    assert check is not None and check.evicted_weight == 0


def test_withdraw_leaves_no_blocks_on_the_backend() -> None:
    tracker = _tracker()
    req = _routing(tracker)
    backend = _backend("a")
    d = tracker.dispatch(backend, req, NOW)
    tracker.withdraw(d)
    assert tracker.index.blocks("a") == 0
    assert backend.pending_prefill_tokens == 0
