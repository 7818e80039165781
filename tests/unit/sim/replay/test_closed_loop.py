"""Closed-loop replays: users send a chat's turns one after another, then the next chat."""

from __future__ import annotations

import pytest

from routing.traces import TraceRequest
from sim.replay import ClosedLoop, Replay, SimSettings
from tests.unit.sim.replay.synthetic import SMALL


class _Log:
    """A `ReplayObserver` noting when each request was routed and finished."""

    def __init__(self) -> None:
        self.sent: dict[int, float] = {}
        self.done: dict[int, float] = {}

    def decided(self, now: float, request: object, *_: object) -> None:
        self.sent[int(request.request_id)] = now  # type: ignore[attr-defined]

    def first_token(self, now: float, request_id: str) -> None:
        pass

    def finished(self, now: float, request_id: str) -> None:
        self.done[int(request_id)] = now


def _trace(chats: int, turns: int, tokens: int = 64) -> list[TraceRequest]:
    out = []
    for c in range(chats):
        for k in range(turns):
            ids = tuple(1000 * c + j for j in range((tokens + 15 * k) // 16))
            out.append(TraceRequest(0.0, tokens + 16 * k, 4, ids, 16, session=f"chat-{c}"))
    return out


def _run(users: int, chats: int = 6, turns: int = 3, think_s: float = 0.0) -> _Log:
    trace = _trace(chats, turns)
    plan = tuple(tuple(range(c * turns, (c + 1) * turns)) for c in range(chats))
    log = _Log()
    result = Replay(
        trace,
        "round-robin",
        SMALL,
        SimSettings(replicas=2),
        observer=log,
        loop=ClosedLoop(users, plan, think_s),
    ).run()
    assert result.requests == len(trace) == len(log.sent) == len(log.done)
    return log


def test_each_turn_follows_the_previous_answer_after_the_think_time() -> None:
    log = _run(users=2, think_s=0.25)
    for c in range(6):
        for k in (1, 2):
            i = 3 * c + k
            assert log.sent[i] == pytest.approx(log.done[i - 1] + 0.25)


def test_never_more_requests_in_flight_than_users() -> None:
    for users in (1, 2, 4):
        log = _run(users)
        events = sorted([(t, 1) for t in log.sent.values()] + [(t, -1) for t in log.done.values()])
        in_flight = peak = 0
        for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # ends before starts
            in_flight += step
            peak = max(peak, in_flight)
        assert peak == users
        assert sorted(log.sent.values())[:users] == [0.0] * users


def test_a_user_takes_the_next_chat_once_theirs_is_done() -> None:
    log = _run(users=1)  # one user: chats strictly one after another
    order = sorted(log.sent, key=log.sent.__getitem__)
    assert order == list(range(18))


def test_a_rejected_turn_does_not_stall_its_user() -> None:
    trace = _trace(2, 2)
    too_long = TraceRequest(0.0, SMALL.config.max_model_len + 1, 4, (), 16)
    trace[0] = too_long
    result = Replay(
        trace,
        "round-robin",
        SMALL,
        SimSettings(replicas=2),
        loop=ClosedLoop(1, ((0, 1), (2, 3))),
    ).run()
    assert (result.rejected, result.requests) == (1, 3)


def test_the_plan_must_cover_the_trace_once() -> None:
    trace = _trace(2, 2)
    with pytest.raises(ValueError, match="every trace index once"):
        Replay(trace, "round-robin", SMALL, SimSettings(), loop=ClosedLoop(1, ((0, 1), (2,))))
    with pytest.raises(ValueError, match="users"):
        ClosedLoop(0, ((0,),))
