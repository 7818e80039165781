"""Load reports (`gateway.state.load`) through Redis pub/sub.

Each gateway publishes on its own channel `{prefix}:load:{gateway}` and listens to the
pattern `{prefix}:load:*`, skipping its own channel before decoding anything. One loop:
subscribe, then wait up to `interval_s` for the next message, apply it, and publish this
gateway's own report when it is due (the stream's publish loop also sends it with each batch
of events: `gateway.state.stream`). Pub/sub keeps nothing, so a
gateway that joins hears each peer within its heartbeat (1 s), and a peer's counts expire
on the receiving side (`LoadSharing.expire`) when its reports stop. Any failure (Redis down
or slow) clears the other gateways' counts, so routing falls back to this gateway's own, and
the loop subscribes again after the link's backoff.
"""

from __future__ import annotations

import contextlib
import logging
import time
from functools import partial
from typing import Any

from redis.asyncio.client import PubSub

from gateway.state.codec import BadEntryError
from gateway.state.link import RedisLink
from gateway.state.load import LoadSharing, decode_report, encode_report

log = logging.getLogger(__name__)


class LoadChannel:
    """This gateway's load reports published, the others' received."""

    def __init__(self, link: RedisLink, prefix: str, gateway_id: str, load: LoadSharing) -> None:
        self.link = link
        self.channel = f"{prefix}:load:{gateway_id}"
        self.pattern = f"{prefix}:load:*"
        self._own = self.channel.encode()
        self.load = load

    async def run(self) -> None:
        """Runs until cancelled."""
        while True:
            pubsub = self.link.blocking.pubsub(ignore_subscribe_messages=True)
            try:
                subscribed = await self.link.attempt(
                    partial(_subscribe, pubsub, self.pattern), self._timeout()
                )
                if subscribed is not None:
                    await self._session(pubsub)
            finally:
                self.load.clear()
                with contextlib.suppress(Exception):  # the connection may be gone already
                    await pubsub.aclose()

    async def _session(self, pubsub: PubSub) -> None:
        """Until a Redis command fails."""
        load, interval = self.load, self.load.interval_s
        checked = 0.0
        while True:
            got = await self.link.attempt(partial(_next, pubsub, interval), self._timeout())
            if got is None:
                return
            if got[0] is not None:
                self._receive(got[0])
            now = time.monotonic()
            if now - checked < interval:
                continue
            checked = now
            load.expire()
            report = load.outgoing()
            if report is not None:
                data = encode_report(report)
                publish = self.link.commands.publish
                if (
                    await self.link.attempt(partial(publish, self.channel, data), self._timeout())
                    is None
                ):
                    return

    def _receive(self, message: dict[str, Any]) -> None:
        if message.get("channel") == self._own:
            return
        try:
            self.load.receive(decode_report(message["data"]))
        except (BadEntryError, KeyError) as exc:
            log.debug("channel %s: %s", self.pattern, exc)

    def _timeout(self) -> float:
        return self.load.interval_s + self.link.settings.command_timeout_s


async def _subscribe(pubsub: PubSub, pattern: str) -> bool:
    await pubsub.psubscribe(pattern)
    return True


async def _next(pubsub: PubSub, wait_s: float) -> tuple[dict[str, Any] | None]:
    """The next message within `wait_s` (None: none came), in a tuple: None is a failure."""
    return (await pubsub.get_message(timeout=wait_s),)
