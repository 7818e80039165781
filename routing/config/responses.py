"""The `responses:` section: where the Responses API's stored responses live.

An engine keeps a stored response (`store: true`) in the serving process that produced it, so
a follow-up naming it (`previous_response_id`) and `GET`/`DELETE /v1/responses/{id}`,
`/cancel` must reach that backend. With `affinity` on, the gateway remembers each stored
response's backend by its id (at most `max_entries`, each for `ttl_s`; shared through Redis
under `state:` when its backend is redis, else asked of the sibling workers of `serve
--workers N`) and pins those requests to it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ResponsesSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    affinity: bool = Field(
        True, description="pin follow-ups and GET/DELETE/cancel to the backend that stored it"
    )
    max_entries: int = Field(100_000, gt=0, description="response ids remembered (LRU)")
    ttl_s: float = Field(3600.0, gt=0, description="how long an id's backend is remembered")
    shared_timeout_s: float = Field(
        0.05,
        gt=0,
        description="longest wait for Redis (or, without it, the sibling workers) per lookup "
        "(then: not known) or write",
    )
