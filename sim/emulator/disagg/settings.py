"""A replica's P/D role and its fleet's protocol, with the timeouts both sides keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Role = Literal["both", "prefill", "decode"]
Protocol = Literal["vllm", "sglang"]
ROLES: tuple[Role, ...] = get_args(Role)
PROTOCOLS: tuple[Protocol, ...] = get_args(Protocol)
DEFAULT_LEASE_S = 30.0  # vLLM's kv_lease_duration
SGLANG_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default


@dataclass(frozen=True, slots=True)
class PDSettings:
    """P/D settings of one replica; durations are modelled seconds (divided by the speedup).

    - `lease_s`: how long P keeps an unread prefill's blocks (vLLM's `kv_lease_duration`);
      for SGLang also how long P waits for D to join a room before giving up.
    - `wait_timeout_s`: how long D waits for P (a pull, or a room's prefill and push).
    - `decode_prefix_cache`: whether an SGLang D keeps a prefix cache (SGLang's decode
      servers keep none by default, so every prompt block crosses); a vLLM D always does.
    - `bootstrap_port`: an SGLang P's bootstrap port (None: none served; 0: a free one).
    """

    role: Role = "both"
    protocol: Protocol = "vllm"
    lease_s: float = DEFAULT_LEASE_S
    wait_timeout_s: float = 300.0
    decode_prefix_cache: bool = False
    bootstrap_port: int | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES or self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown P/D role {self.role!r} or protocol {self.protocol!r}")
        if self.lease_s <= 0 or self.wait_timeout_s <= 0:
            raise ValueError("lease_s and wait_timeout_s must be > 0")

    @property
    def serves_bootstrap(self) -> bool:
        return self.protocol == "sglang" and self.role == "prefill"

    @property
    def caches_prefixes(self) -> bool:
        """False for an SGLang D without `decode_prefix_cache`."""
        return not (self.protocol == "sglang" and self.role == "decode") or self.decode_prefix_cache
