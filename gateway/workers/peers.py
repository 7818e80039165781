"""A worker's side of `kvgate serve --workers N`: what the app asks of its sibling workers.

- Routing state: the siblings' channel (`Siblings`) carries the shared-state frames
  (`gateway.state.local`) both ways.
- `/metrics`: whichever worker is scraped returns the whole gateway's page
  (`metrics_page`: its own merged with its siblings', `gateway.workers.metrics`).
- Admin changes (backends added, drained, resumed, removed; a reload): made by the worker
  the request reached, then repeated on each sibling (`repeat`).
- Stored responses, without Redis: the backend of one this worker does not know, asked of
  the siblings (`response_owner`; `gateway.responses.affinity`).

A sibling answers `{"op": "metrics"}` with its own page, `{"op": "admin", ...}` by applying
the change (`AdminOperations.apply`), `{"op": "response_owner", "id"}` from its own memory.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.workers.context import WorkerContext
from gateway.workers.metrics import merge_pages
from gateway.workers.siblings import Siblings

log = logging.getLogger(__name__)
SIBLINGS_LOOP = "workers"


class WorkerPeers:
    """The app's link to its sibling workers."""

    def __init__(
        self,
        ctx: WorkerContext,
        state_frame: Callable[[bytes], None],
        own_metrics: Callable[[], bytes],
        apply_admin: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]],
        *,
        scrape_timeout_s: float = 2.0,
        own_response_owner: Callable[[str], str | None] = lambda response_id: None,
    ) -> None:
        self.ctx = ctx
        self._own_metrics = own_metrics
        self._apply_admin = apply_admin
        self._own_response_owner = own_response_owner
        self._scrape_timeout_s = scrape_timeout_s
        self.siblings = Siblings(ctx, state_frame, self._answer)

    async def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "metrics":
            return {"page": self._own_metrics()}
        if op == "admin":
            return await self._apply_admin(request)
        if op == "response_owner":
            return {"backend": self._own_response_owner(str(request.get("id", "")))}
        return {"error": f"unknown request {op!r}"}

    async def join(self, timeout_s: float = 5.0) -> None:
        """At start-up, until every sibling is connected both ways (or `timeout_s`)."""
        if not await self.siblings.wait_joined(timeout_s):
            log.warning(
                "worker %d: siblings %s not connected after %g s: serving without them",
                self.ctx.index,
                [j for j in self.ctx.siblings if j not in self.siblings.connected],
                timeout_s,
            )

    async def metrics_page(self) -> bytes:
        """The whole gateway's exposition."""
        answers = await self.siblings.ask_all({"op": "metrics"}, self._scrape_timeout_s)
        pages = {j: a["page"] for j, a in answers.items() if isinstance(a.get("page"), bytes)}
        pages[self.ctx.index] = self._own_metrics()
        return merge_pages(pages, self.ctx.count)

    async def response_owner(self, response_id: str, timeout_s: float) -> str | None:
        """The backend a sibling knows to hold the stored response `response_id`, if any."""
        request = {"op": "response_owner", "id": response_id}
        answers = await self.siblings.ask_all(request, timeout_s)
        found = (a.get("backend") for _, a in sorted(answers.items()))
        return next((b for b in found if isinstance(b, str) and b), None)

    async def repeat(self, op: dict[str, Any]) -> dict[str, str]:
        """An admin change made here, made by every sibling; worker index → "ok" or why not."""
        answers = await self.siblings.ask_all({"op": "admin", **op})
        return {str(j): str(a.get("error", "ok")) for j, a in sorted(answers.items())}

    def state(self) -> dict[str, Any]:
        """The `worker` entry of `/ready` and `/admin/backends`."""
        s = self.siblings
        return {
            **self.ctx.describe(),
            "siblings_connected": s.connected,
            "frames_sent": s.sent,
            "frames_dropped": s.dropped,
        }
