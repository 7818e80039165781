"""Disaggregated prefill/decode in the replay: a split request's two legs, as the gateway runs them.

The gateway's `PdPlanner` (`SimGateway.planner`) places each request on a pool with prefill
replicas; a split one (`start`) goes to P with one output token, its blocks held at the end.
vLLM: P's answer reaches the gateway `request_overhead_s` after P's token (`handoff`), which
then sends D's leg; D's API server pulls the blocks D lacks (`blocks_to_move`, D's cache then).
SGLang: P and D get the request at once; at P's token P pushes every prompt block and answers
once they are across. Both: D's request enters its engine with the whole prompt as external
tokens when the transfer (`transfer_time_s` over the profile's link) ends (`transfer_end`), and
P releases its blocks then. The legs are accounted as the gateway does: P's with pending prefill
and a point on P's TTFT line when its answer comes; D's with no pending prefill, its blocks in
D's index entry unless an SGLang decode-only D (which keeps no prefix cache); vLLM: D's first
token, from D's dispatch, a point on the planner's transfer line. TTFT: arrival to D's first.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from routing.config.disaggregation import DisaggregationSection
from routing.types import RoutingRequest
from scoring.pd.planner import LINK, PdPlan
from scoring.state.prefix_feed import Dispatch
from sim.engine.kv_transfer import blocks_to_move, external_blocks, transfer_time_s
from sim.engine.types import EngineProfile
from sim.replay.events import EventQueue, Kind
from sim.replay.flight import Flight, Split
from sim.replay.gateways import Counters, SimGateway
from sim.replay.stepping import Stepping


class Host(Protocol):
    """What the flow asks of the replay (`sim.replay.simulator.Replay`)."""

    now: float

    def send(
        self, g: int, position: int, request: RoutingRequest, *, leg: str, record: bool = True
    ) -> Dispatch[Counters]:
        """Gateway `g` dispatches `request` to the replica at `position`."""

    def settle(
        self, g: int, position: int, dispatch: Dispatch[Counters], ttft_s: float | None
    ) -> None:
        """The leg's prefill is done (`ttft_s`: what it teaches the replica's line)."""

    def end(self, g: int, position: int, dispatch: Dispatch[Counters]) -> None:
        """The leg is over at the gateway."""

    def prepare(self, i: int, request: RoutingRequest, engine_hashes: Sequence[int]) -> None:
        """Before a later leg's dispatch: the oracle's index reads the engines now."""


@dataclass(frozen=True, slots=True)
class PdSummary:
    """What the P/D pool did in one replay."""

    protocol: str
    mode: str
    replicas: Mapping[str, int]  # by role
    planned: int  # requests the planner placed
    split: int  # of them, through a prefill replica
    split_share: float
    why: Mapping[str, int]  # `PdPlan.why` counts
    transfers: int
    transfer_mean_s: float
    moved_blocks_mean: float
    link_overhead_s: float  # the first gateway's transfer line at the end (vLLM learns it)
    link_token_s: float
    busy: Mapping[str, float]  # by role: the mean share of the run its replicas were stepping


class PdFlow:
    """Split requests' legs on a P/D pool (see the module docstring)."""

    def __init__(
        self,
        host: Host,
        *,
        queue: EventQueue,
        engines: Stepping,
        roles: Sequence[str],
        gateways: Sequence[SimGateway],
        flights: dict[str, Flight],
        profile: EngineProfile,
        section: DisaggregationSection,
    ) -> None:
        self._host = host
        self._queue = queue
        self._engines = engines
        self._replicas = replicas = engines.replicas
        self._roles = roles
        self._planners = [g.planner for g in gateways if g.planner is not None]
        if len(self._planners) != len(gateways):
            raise ValueError("a P/D pool needs a planner on every gateway")
        self._flights = flights
        self._position = {r.id: i for i, r in enumerate(replicas)}
        self._link = profile.transfer
        self._block_size = profile.config.block_size
        self._handoff_s = profile.frontend.request_overhead_s
        self._frontend_s = profile.frontend.frontend_s
        self.section = section
        self._sglang = section.protocol == "sglang"
        self._why: Counter[str] = Counter()
        self._split = 0
        self._transfers = 0
        self._transfer_s = 0.0
        self._moved_blocks = 0

    def route(
        self,
        i: int,
        request: RoutingRequest,
        plan: PdPlan,
        *,
        hashes: Sequence[int],
        gateway: int,
        output: int,
    ) -> bool:
        """Count `plan`; a split one's prefill leg (SGLang: and its decode leg) is sent now,
        and True: the flow has it (False: D serves it whole, as any replica)."""
        self._why[plan.why] += 1
        if not plan.split:
            return False
        assert plan.prefill is not None and plan.prefill.target is not None
        assert plan.decode.target is not None
        self._split += 1
        host = self._host
        p = self._position[plan.prefill.target]
        d = self._position[plan.decode.target]
        dispatch = host.send(gateway, p, request, leg="prefill")
        split = Split(p, d, request, dispatch, hashes, plan.moved_tokens)
        flight = Flight(p, host.now, dispatch, output, gateway, split=split)
        self._flights[str(i)] = flight
        if self._sglang:
            self._send_decode(flight, split)
            split.decode_ready_at = self._through_frontend(d)
        if self._frontend_s > 0:
            self._queue.push(self._through_frontend(p), Kind.ENGINE_ARRIVAL, i)
        else:
            self._prefill(str(i), split)
        return True

    def engine_arrival(self, i: int, flight: Flight) -> None:
        """A split request reached an API server: P's (its prefill), or vLLM D's (its pull)."""
        split = flight.split
        assert split is not None
        if not split.prefilled:
            self._prefill(str(i), split)
        else:
            self._pull(i, split)

    def prefilled(self, i: int, flight: Flight) -> None:
        """P's token came: vLLM's P answers the gateway; SGLang's P pushes the KV to D."""
        split = flight.split
        assert split is not None
        split.prefilled = True
        now = self._host.now
        if not self._sglang:
            self._queue.push(now + self._handoff_s, Kind.HANDOFF, i)
            return
        blocks = external_blocks(split.request.token_estimate, self._block_size)
        end = max(now + self._transfer(blocks), split.decode_ready_at)
        self._queue.push(end, Kind.TRANSFER_END, i)

    def handoff(self, i: int) -> None:
        """vLLM: P's answer reached the gateway, which sends D's leg."""
        flight = self._flights[str(i)]
        split = flight.split
        assert split is not None
        self._prefill_answered(flight, split)
        self._host.prepare(i, split.request, split.engine_hashes)
        self._send_decode(flight, split)
        if self._frontend_s > 0:
            self._queue.push(self._through_frontend(split.decode), Kind.ENGINE_ARRIVAL, i)
        else:
            self._pull(i, split)

    def transfer_end(self, i: int) -> None:
        """The KV is on D: P frees its blocks, D's request enters its engine."""
        rid = str(i)
        flight = self._flights[rid]
        split = flight.split
        assert split is not None
        host = self._host
        self._engines.release(host.now, split.prefill, rid)
        if self._sglang:
            self._prefill_answered(flight, split)  # SGLang's P answers once the KV is across
        tokens = split.request.token_estimate
        self._engines.enter(
            host.now,
            rid,
            split.decode,
            input_tokens=tokens,
            engine_hashes=split.engine_hashes,
            output_tokens=flight.output_tokens,
            external_tokens=tokens,
        )

    def decode_first_token(self, flight: Flight, seconds: float) -> None:
        """D's first token, `seconds` after D's leg was sent: vLLM, a point on the transfer
        line (the gateway ran P to its end first)."""
        if not self._sglang:
            self._planners[flight.gateway].observe_transfer(flight.dispatch.moved_tokens, seconds)

    def summary(self, makespan_s: float) -> PdSummary:
        planned = sum(self._why.values())
        busy: dict[str, list[float]] = {}
        for role, replica in zip(self._roles, self._replicas, strict=True):
            share = replica.busy_s / makespan_s if makespan_s > 0 else math.nan
            busy.setdefault(role, []).append(share)
        link = self._planners[0].link.coefficients(LINK)
        n = self._transfers
        return PdSummary(
            protocol=self.section.protocol,
            mode=self.section.mode,
            replicas=dict(Counter(self._roles)),
            planned=planned,
            split=self._split,
            split_share=self._split / planned if planned else 0.0,
            why=dict(sorted(self._why.items())),
            transfers=n,
            transfer_mean_s=self._transfer_s / n if n else math.nan,
            moved_blocks_mean=self._moved_blocks / n if n else math.nan,
            link_overhead_s=link.overhead_s,
            link_token_s=link.prefill_token_s,
            busy={role: sum(v) / len(v) for role, v in busy.items()},
        )

    # -- legs -------------------------------------------------------------------------------

    def _prefill(self, rid: str, split: Split) -> None:
        """P's request enters P's engine: one output token, its blocks held."""
        self._engines.enter(
            self._host.now,
            rid,
            split.prefill,
            input_tokens=split.request.token_estimate,
            engine_hashes=split.engine_hashes,
            output_tokens=1,
            hold=True,
        )

    def _send_decode(self, flight: Flight, split: Split) -> None:
        """Gateway sends D's leg: the client's tokens come from it from now on; the tokens it
        receives are the plan's, as the Director sets them."""
        d = split.decode
        record = not (self._sglang and self._roles[d] == "decode")
        dispatch = self._host.send(flight.gateway, d, split.request, leg="decode", record=record)
        dispatch.moved_tokens = split.moved_tokens
        flight.dispatch, flight.replica, flight.engine = dispatch, d, d

    def _prefill_answered(self, flight: Flight, split: Split) -> None:
        """P's whole answer reached the gateway: a point on P's line; P's leg is over."""
        host = self._host
        dispatch = split.prefill_dispatch
        seen = host.now - dispatch.at  # vLLM: at the gateway; SGLang: at P, the answer to come
        if self._sglang:
            seen += self._handoff_s
        host.settle(flight.gateway, split.prefill, dispatch, seen)
        host.end(flight.gateway, split.prefill, dispatch)

    def _pull(self, i: int, split: Split) -> None:
        """vLLM: D's API server has the request and pulls the blocks its cache lacks."""
        host = self._host
        self._engines.cut(host.now, split.decode)
        engine = self._replicas[split.decode].engine
        held = engine.cached_prefix_blocks_hashed(split.engine_hashes)
        tokens = split.request.token_estimate
        blocks = blocks_to_move(tokens, tokens, self._block_size, held)
        self._queue.push(host.now + self._transfer(blocks), Kind.TRANSFER_END, i)

    def _transfer(self, blocks: int) -> float:
        seconds = transfer_time_s(self._link, blocks, self._block_size)
        self._transfers += 1
        self._transfer_s += seconds
        self._moved_blocks += blocks
        return seconds

    def _through_frontend(self, position: int) -> float:
        now = self._host.now
        if self._frontend_s <= 0:
            return now
        return self._replicas[position].through_frontend(now, self._frontend_s)
