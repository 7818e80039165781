"""Placement of a request on a prefill/decode (P/D) pool, P and D decided together. Pure.

D first: the profile ranks the backends that decode (role `decode` or `both`), so D is the one
holding most of the prompt with room to spare. Then, unless the mode says `never`, the profile
ranks the backends that prefill (role `prefill` or `both`, D excluded) and the plan compares:

    local = line_D(uncached_D + pending_D)                      D prefills alone
    split = line_P(uncached_P + pending_P) + link(moved)

with each backend's learnt TTFT line (`scoring.state.ttft_model`), `moved` the tokens D must
receive (vLLM: what D lacks; SGLang: the whole prompt) and `link` the learnt line of the decode
leg's first token (the handoff, the transfer and D's first step) against `moved`.
`conditional` splits when D's uncached part is at least `min_uncached_tokens` and split < local;
`always` whenever a P exists; an SGLang decode-only D cannot prefill, so it always splits.
`why` says which rule decided, for `/admin/route` and the metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from routing.config.disaggregation import DisaggregationSection
from routing.scheduler import Scheduler
from routing.types import Decision, EndpointSnapshot, RoutingRequest
from scoring.state.prefix_hash import covered_chars
from scoring.state.prefix_index import PrefixIndex
from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients

Schedule = Callable[[RoutingRequest, Sequence[EndpointSnapshot]], Decision]
LINK = "link"  # the transfer line's key in its model

# Why a plan split or not: a small fixed set (a metric label).
WHYS = ("no_prefill", "mode_never", "mode_always", "cannot_prefill", "cached", "faster", "slower")


@dataclass(frozen=True, slots=True)
class PdPlan:
    """Where a request goes on a P/D pool; `prefill` None: D alone."""

    decode: Decision
    prefill: Decision | None
    why: str  # one of WHYS
    uncached_on_decode: int = 0  # tokens D would compute alone
    moved_tokens: int = 0  # tokens D receives when split
    local_ttft_s: float | None = None
    split_ttft_s: float | None = None

    @property
    def split(self) -> bool:
        return self.prefill is not None and self.prefill.target is not None


def decodes(e: EndpointSnapshot) -> bool:
    return e.role != "prefill"


def prefills(e: EndpointSnapshot) -> bool:
    return e.role != "decode"


class PdPlanner:
    """Decides a P/D request's pair (see the module docstring)."""

    def __init__(
        self,
        section: DisaggregationSection,
        index: PrefixIndex,
        lines: OnlineTtftModel,
        link: OnlineTtftModel,
        chars_per_token: float,
    ) -> None:
        self.section = section
        self._index = index
        self._lines = lines
        self.link = link  # the transfer line, keyed LINK: seconds per moved token
        self._cpt = chars_per_token

    def plan(
        self, request: RoutingRequest, candidates: Sequence[EndpointSnapshot], schedule: Schedule
    ) -> PdPlan:
        """The plan for `request` among `candidates` (healthy, serving its model)."""
        decoders = [e for e in candidates if decodes(e)] or list(candidates)
        decode = schedule(request, decoders)
        d = next((e for e in decoders if e.id == decode.target), None)
        s = self.section
        if d is None:
            return PdPlan(decode, None, "no_prefill")
        sglang = s.protocol == "sglang"
        total = request.token_estimate
        uncached_d = total if sglang and d.role == "decode" else self._uncached(request, d)
        moved = total if sglang else uncached_d
        base = PdPlan(decode, None, "no_prefill", uncached_d, moved)
        if s.mode == "never":
            return _with(base, why="mode_never")
        prefillers = [e for e in candidates if prefills(e) and e.id != d.id]
        if not prefillers:
            return base
        must = sglang and d.role == "decode"
        if not must and s.mode == "conditional" and uncached_d < s.min_uncached_tokens:
            return _with(base, why="cached")
        prefill = schedule(request, prefillers)
        p = next((e for e in prefillers if e.id == prefill.target), None)
        if p is None:
            return base
        line_d = self._lines.coefficients(d.id)
        local = line_d.predict(uncached_d + _pending(d))
        split = self._lines.coefficients(p.id).predict(
            self._uncached(request, p) + _pending(p)
        ) + self.link.coefficients(LINK).predict(moved)
        plan = _with(base, local_ttft_s=local, split_ttft_s=split)
        if must:
            return _with(plan, prefill=prefill, why="cannot_prefill")
        if s.mode == "always":
            return _with(plan, prefill=prefill, why="mode_always")
        if split < local:
            return _with(plan, prefill=prefill, why="faster")
        return _with(plan, why="slower")

    def _uncached(self, request: RoutingRequest, e: EndpointSnapshot) -> int:
        hashes = request.prefix_hashes
        depth = self._index.match(hashes, (e.id,))[e.id] if hashes else 0
        cached = covered_chars(depth, request.prefix_block_chars) / self._cpt
        return max(0, int(request.token_estimate - cached))

    def observe_transfer(self, moved_tokens: int, seconds: float) -> None:
        """A split request's decode leg answered its first token `seconds` after it was sent,
        `moved_tokens` having crossed the link: a point on the transfer line."""
        if self.section.learn:
            self.link.observe(LINK, moved_tokens, seconds)


def decide(
    planner: PdPlanner | None,
    scheduler: Scheduler,
    request: RoutingRequest,
    candidates: Sequence[EndpointSnapshot],
    *,
    endpoints: Sequence[EndpointSnapshot],
    profile: str | None,
) -> tuple[Decision, PdPlan | None]:
    """`request`'s decision among `candidates` with routing `profile`: D's, with the plan,
    when the pool (`endpoints`, eligible or not) has a prefill backend; else the scheduler's."""
    if planner is not None and any(e.role == "prefill" for e in endpoints):
        pd = planner.plan(
            request, candidates, lambda r, es: scheduler.schedule(r, es, profile=profile)
        )
        return pd.decode, pd
    return scheduler.schedule(request, candidates, profile=profile), None


def _pending(e: EndpointSnapshot) -> int:
    return e.pending_prefill_tokens + e.remote_pending_prefill_tokens


def _with(plan: PdPlan, **changes: object) -> PdPlan:
    return replace(plan, **changes)  # type: ignore[arg-type]


def new_link_model(section: DisaggregationSection) -> OnlineTtftModel:
    """The transfer line, from the section's initial estimate."""
    return OnlineTtftModel(
        TtftCoefficients(section.transfer_latency_s, section.transfer_token_s), min_samples=8
    )
