"""The cells of the real-vLLM pressure bench: multi-tenant chats sized in the engine's tokens.

A cell is a workload of `sim.workloads.family` — `tenants` system prompts of `prefix_tokens`
tokens, 2–4-turn chats picked by `popularity` — sent closed loop by `clients` clients;
pressure is the tenants' prefix tokens over the fleet's KV tokens, as in the regime map. The
family writes one word per emulator token, which the tiny model's tokenizer makes
`TOKENS_PER_WORD` tokens, so a cell asks for `words_for` its token targets. The ratio is a
constant (the tokenizer is trained on the repository's text, so a measured one would change
the requests between commits); the bench measures it, warns when it strays, and reports each
cell's prefix length. Cells, on 2 servers of 96 blocks × 32 tokens (6,144 KV tokens):

- `p1.5-hot-closed6`: 10 tenants × ~900 tokens (1.46×), one hot tenant with 30 % of the
  chats, 6 clients: the measured regime (`--quick` runs this one);
- `p2.9-uniform-closed6`: 20 tenants alike (2.93×): tighter, and no tenant to favour;
- `p0.29-uniform-closed6`: 2 tenants (0.29×): every prefix fits on every replica.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.workloads.family import FamilyCell, pressure

PREFIX_TOKENS = 900
USER_TOKENS = 60
OUTPUT_TOKENS = 24
TOKENS_PER_WORD = 1.93  # measured 1.925-1.929 on the tiny model, 2026-12-01
CLIENTS = 6
CONVERSATIONS = 160  # ~480 requests (2–4 turns), ~20 s per cell and router on 2 cores


@dataclass(frozen=True, slots=True)
class PressureCell:
    """One workload: `tenants` prompts of `prefix_tokens` engine tokens, closed loop."""

    tenants: int
    popularity: str
    clients: int = CLIENTS
    prefix_tokens: int = PREFIX_TOKENS
    conversations: int = CONVERSATIONS

    def pressure(self, fleet_kv_tokens: int) -> float:
        return pressure(self.tenants, self.prefix_tokens, fleet_kv_tokens)

    def name(self, fleet_kv_tokens: int) -> str:
        """`p1.5-hot-closed6`: nominal pressure (2 significant digits), popularity, traffic."""
        return f"p{self.pressure(fleet_kv_tokens):.2g}-{self.popularity}-closed{self.clients}"

    @property
    def row(self) -> str:
        """The heat map's row: everything but the pressure."""
        return f"{self.popularity} · closed{self.clients}"

    def family(self, seed: int, tokens_per_word: float = TOKENS_PER_WORD) -> FamilyCell:
        """The cell's chats, their text sized so that the engine sees the target tokens."""
        return FamilyCell(
            tenants=self.tenants,
            prefix_tokens=words_for(self.prefix_tokens, tokens_per_word),
            popularity=self.popularity,
            conversations=self.conversations,
            user_tokens=words_for(USER_TOKENS, tokens_per_word),
            output_tokens=OUTPUT_TOKENS,
            seed=seed,
        )


def words_for(tokens: int, tokens_per_word: float) -> int:
    """How many family words make about `tokens` engine tokens (at least 1)."""
    if tokens_per_word <= 0:
        raise ValueError(f"tokens_per_word must be > 0, got {tokens_per_word}")
    return max(1, round(tokens / tokens_per_word))


QUICK = (PressureCell(10, "hot"),)
FULL = (*QUICK, PressureCell(20, "uniform"), PressureCell(2, "uniform"))
