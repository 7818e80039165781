"""The regime map's cells: which workloads of the family, on which fleet, with what traffic.

A cell is a point of `sim.workloads.family` (pressure, popularity, prefix length, 2–4-turn
chats; `tenants = pressure × fleet KV tokens / prefix tokens`) plus traffic: a closed loop of
`clients` users, or an open loop at `load` × round-robin's saturation throughput (measured
per cell, `bench.regime.simulate`). Two slices share the pressure axis (default 0.25, 1.5, 4):

- every popularity (uniform, Zipf, a hot tenant with 30 % of the chats), 144 chats, 16 clients;
- the hot tenant in open loops at 50 % and 90 % of round-robin's saturation once chats overlap
  (turns `THINK_S` apart; `offered_load` in `regime.json` averages the whole run), with at
  least 48 chats and `OPEN_MIN_SPAN_S` of starts.

That is 15 cells; the axes are arguments (`--pressures`, `--loads`, ...). `--quick` runs
`p1.5-hot-closed16` (4 replicas, 30 tenants × 2,048 tokens: 1.5× the fleet's KV) and the
high-reuse `p0.25-uniform-closed16` (docs/decisions/0011-regime-map-steady-state.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.engine.profiles import get_profile
from sim.replay.settings import DEFAULT_KV_EVENT_DELAY_S
from sim.workloads.family import Arrivals, Chat, FamilyCell, open_arrivals, tenants_for_pressure

PRESSURES = (0.25, 1.5, 4.0)
POPULARITIES = ("uniform", "zipf", "hot")
CLIENTS = 16
OPEN_LOADS = (0.5, 0.9)
OPEN_POPULARITIES = ("hot",)
PREFIX_TOKENS = 2048
# Chats per cell: enough that the opening burst (every client's first prompt at once, on
# empty caches) is a small part of a closed loop's run; an open loop starts chats for at
# least OPEN_MIN_SPAN_S, and has at least OPEN_CONVERSATIONS.
CONVERSATIONS = 144  # ~430 requests (2–4 turns) per closed-loop cell and router
OPEN_CONVERSATIONS = 48
THINK_S = 1.0  # open loop: mean gap between a chat's turns, at the model's own speed
OPEN_MIN_SPAN_S = 15.0  # open loop: chats keep starting for at least this long
OPEN_ARRIVALS_SEED = 1  # added to the content seed: arrivals are their own stream


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """The emulated (or simulated) fleet every cell runs on."""

    replicas: int = 4
    profile: str = "demo"
    # Simulated only: a step's KV-cache events reach the precise index this much later.
    kv_event_delay_s: float = DEFAULT_KV_EVENT_DELAY_S

    @property
    def kv_tokens_per_replica(self) -> int:
        config = get_profile(self.profile).config
        return config.num_blocks * config.block_size

    @property
    def kv_tokens(self) -> int:
        return self.replicas * self.kv_tokens_per_replica

    @property
    def block_tokens(self) -> int:
        return get_profile(self.profile).config.block_size


@dataclass(frozen=True, slots=True)
class Cell:
    """One workload of the map: content (pressure, popularity, prefix) and traffic."""

    pressure: float
    popularity: str
    loop: str  # "closed" | "open"
    clients: int = 0  # closed loop: concurrent users
    load: float = 0.0  # open loop: fraction of round-robin's saturation throughput
    prefix_tokens: int = PREFIX_TOKENS
    conversations: int = 0  # 0: CONVERSATIONS closed, OPEN_CONVERSATIONS open

    def __post_init__(self) -> None:
        if not self.conversations:
            chats = CONVERSATIONS if self.loop == "closed" else OPEN_CONVERSATIONS
            object.__setattr__(self, "conversations", chats)
        if self.loop == "closed" and self.clients < 1:
            raise ValueError("a closed-loop cell needs clients >= 1")
        if self.loop == "open" and not self.load > 0:
            raise ValueError("an open-loop cell needs load > 0")
        if self.loop not in ("closed", "open"):
            raise ValueError(f"loop must be closed or open, got {self.loop!r}")

    @property
    def traffic(self) -> str:
        """The traffic as a label: `closed16`, `open60`."""
        if self.loop == "closed":
            return f"closed{self.clients}"
        return f"open{round(self.load * 100)}"

    @property
    def name(self) -> str:
        return f"p{self.pressure:g}-{self.popularity}-{self.traffic}"

    @property
    def row(self) -> str:
        """The heat maps' row: everything but the pressure."""
        prefix = "" if self.prefix_tokens == PREFIX_TOKENS else f" · {self.prefix_tokens} tok"
        return f"{self.popularity} · {self.traffic}{prefix}"

    def family(self, fleet: FleetSpec, seed: int, saturation_rps: float = 0.0) -> FamilyCell:
        """The cell's chats; an open loop gets enough of them to keep starting chats for
        `OPEN_MIN_SPAN_S` at its rate (`load` × `saturation_rps`), so that its ramp-up and
        tail do not make up most of the run."""
        tenants = tenants_for_pressure(self.pressure, self.prefix_tokens, fleet.kv_tokens)
        content = FamilyCell(
            tenants=tenants,
            prefix_tokens=self.prefix_tokens,
            popularity=self.popularity,
            conversations=self.conversations,
            seed=seed,
        )
        if self.loop == "open":
            starts_per_s = (
                self.load * saturation_rps / ((content.min_turns + content.max_turns) / 2)
            )
            needed = math.ceil(OPEN_MIN_SPAN_S * starts_per_s)
            content = replace(content, conversations=max(self.conversations, needed))
        return content

    def open_arrivals(
        self, chats: Sequence[Chat], saturation_rps: float, seed: int, slowdown: float = 1.0
    ) -> Arrivals:
        """An open loop's arrival times, live and simulated: `load` × `saturation_rps`
        requests a second, turns `THINK_S` apart on average; `slowdown` stretches them."""
        rate = self.load * saturation_rps / slowdown
        return open_arrivals(chats, rate, THINK_S * slowdown, seed + OPEN_ARRIVALS_SEED)


def quick_grid(prefix_tokens: int = PREFIX_TOKENS) -> list[Cell]:
    """The issue's measured cell and the high-reuse cell."""
    return [
        Cell(1.5, "hot", "closed", clients=CLIENTS, prefix_tokens=prefix_tokens),
        Cell(0.25, "uniform", "closed", clients=CLIENTS, prefix_tokens=prefix_tokens),
    ]


@dataclass(frozen=True, slots=True)
class GridAxes:
    """The full grid's axes (see the module docstring); an empty axis drops its slice."""

    pressures: tuple[float, ...] = PRESSURES
    popularities: tuple[str, ...] = POPULARITIES  # closed-loop slice
    clients: int = CLIENTS
    open_popularities: tuple[str, ...] = OPEN_POPULARITIES
    loads: tuple[float, ...] = OPEN_LOADS
    prefix_tokens: int = PREFIX_TOKENS


def full_grid(axes: GridAxes = GridAxes()) -> list[Cell]:
    """Both slices, row by row."""
    closed = [
        Cell(p, pop, "closed", clients=axes.clients, prefix_tokens=axes.prefix_tokens)
        for pop in axes.popularities
        for p in axes.pressures
    ]
    opened = [
        Cell(p, pop, "open", load=load, prefix_tokens=axes.prefix_tokens)
        for pop in axes.open_popularities
        for load in axes.loads
        for p in axes.pressures
    ]
    return closed + opened
