"""Keep one resource's objects current: list, then watch from the list's version.

The loop: list (the store is replaced whole), then watch from the list's resourceVersion,
applying ADDED/MODIFIED (store the object) and DELETED (drop it) and moving the version on
with every event and BOOKMARK. When the server ends a watch (its timeout), watch again from
the last version. 410 Gone — the version was compacted away — lists again at once. Any other
failure waits `backoff_s × 2^(n−1)` (capped at `backoff_max_s`, n failures in a row) and
lists again. `on_change(objects)` is called after each list and each event that changed the
store, with the objects keyed by namespace/name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from health.discovery.kube_api import GoneError, KubeAPIError, KubeClient

log = logging.getLogger(__name__)
Objects = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class WatchSettings:
    watch_timeout_s: int = 300  # asked of the server per watch (it may end sooner)
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Informer:
    """List + watch of `path` (with query `params`), telling `on_change` the objects."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        params: Mapping[str, str],
        on_change: Callable[[Objects], None],
        settings: WatchSettings | None = None,
    ) -> None:
        self._client = client
        self._path = path
        self._params = dict(params)
        self._on_change = on_change
        self._settings = settings or WatchSettings()
        self._objects: dict[str, Mapping[str, Any]] = {}
        self.lists = 0  # lists made so far (for tests and logs)

    async def run(self) -> None:
        """Run forever; cancel to stop."""
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            try:
                version = await self._list()
                failures = 0
                while True:  # watch again from where the last watch ended
                    started = loop.time()
                    version = await self._watch(version)
                    if loop.time() - started < self._settings.backoff_s:
                        # Ended at once (a proxy closing it?): not a tight loop of watches.
                        await asyncio.sleep(self._settings.backoff_s)
            except GoneError:
                log.info("watch %s: resource version gone, listing again", self._path)
            except KubeAPIError as exc:
                failures += 1
                s = self._settings
                delay = min(s.backoff_s * 2 ** min(failures - 1, 20), s.backoff_max_s)
                log.warning("watch %s failed (%s); retrying in %.1f s", self._path, exc, delay)
                await asyncio.sleep(delay)

    async def _list(self) -> str:
        items, version = await self._client.list(self._path, self._params)
        self.lists += 1
        self._objects = {object_key(obj): obj for obj in items}
        self._on_change(self._objects)
        return version

    async def _watch(self, version: str) -> str:
        events = self._client.watch(
            self._path, self._params, version, self._settings.watch_timeout_s
        )
        async with aclosing(events):  # cancelled mid-watch: the stream is closed at once
            async for event in events:
                obj = event.object
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.type in ("ADDED", "MODIFIED"):
                    self._objects[object_key(obj)] = obj
                elif event.type == "DELETED":
                    self._objects.pop(object_key(obj), None)
                else:  # BOOKMARK: only the version moves
                    continue
                self._on_change(self._objects)
        return version
