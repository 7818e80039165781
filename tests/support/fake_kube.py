"""A fake Kubernetes API server speaking the real list/watch protocol, for discovery tests.

Real HTTP/1.1 on 127.0.0.1, port 0, in a thread with its own event loop (as
`tests.support.servers`), so blocking tests and `kvgate serve` subprocesses can use it.
It serves per namespace pods (`/api/v1/...`), InferencePools (`inference.networking.k8s.io/v1`),
InferenceObjectives and InferenceModelRewrites (`llm-d.ai/v1alpha2`), at their API paths:

- list: `{"items": [...], "metadata": {"resourceVersion": RV}}`, filtered by
  `labelSelector` (`k=v,...`) and `fieldSelector` (`metadata.name=X`);
- watch (`?watch=1&resourceVersion=RV`): the events after RV, then new ones as they happen,
  one JSON line each, chunked; with `allowWatchBookmarks=true` a BOOKMARK on `bookmark()`;
  an object that stops (starts) matching the selector arrives as DELETED (ADDED), as the
  real API does; ends after `timeoutSeconds` or on `end_watches()`;
- `compact()` forgets the history: a watch from an older version gets HTTP 410, and
  `end_watches(gone=True)` sends open watches an ERROR event with a 410 Status first.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import orjson

HOST = "127.0.0.1"
POOLS = "inferencepools"
PODS = "pods"
OBJECTIVES = "inferenceobjectives"
REWRITES = "inferencemodelrewrites"
_PREFIXES = (
    ("/api/v1/namespaces/", PODS),
    ("/apis/inference.networking.k8s.io/v1/namespaces/", POOLS),
    ("/apis/llm-d.ai/v1alpha2/namespaces/", OBJECTIVES),
    ("/apis/llm-d.ai/v1alpha2/namespaces/", REWRITES),
)
T = TypeVar("T")
Obj = dict[str, Any]


@dataclass
class _Event:
    version: int
    kind: str  # collection
    namespace: str
    type: str
    obj: Obj
    before: Obj | None = None


@dataclass
class _Watch:
    kind: str
    namespace: str
    matches: Callable[[Obj], bool]
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)
    bookmarks: bool = False
    writer: asyncio.StreamWriter | None = None


def pod(
    name: str,
    ip: str | None = "10.0.0.1",
    ready: bool = True,
    labels: dict[str, str] | None = None,
    terminating: bool = False,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A pod object as the API returns it (only the fields discovery reads, plus kind)."""
    meta: Obj = {"name": name, "labels": labels if labels is not None else {"app": "llm"}}
    if annotations is not None:
        meta["annotations"] = annotations
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    status: Obj = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": status}


def inference_pool(
    name: str, selector: dict[str, str] | None = None, ports: tuple[int, ...] = (8000,)
) -> Obj:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": selector if selector is not None else {"app": "llm"}},
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}},
        },
    }


def inference_objective(name: str, priority: int | None, pool: str = "llm") -> Obj:
    spec: Obj = {"poolRef": {"name": pool}}
    if priority is not None:
        spec["priority"] = priority
    kind = {"apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceObjective"}
    return {**kind, "metadata": {"name": name}, "spec": spec}


def model_rewrite(
    name: str, rules: list[Obj], pool: str = "llm", created: str = "2026-01-01T00:00:00Z"
) -> Obj:
    """An InferenceModelRewrite; `rules` as the API writes them (matches, targets)."""
    return {
        "apiVersion": "llm-d.ai/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"poolRef": {"name": pool}, "rules": rules},
    }


class FakeKubeAPI:
    """Start with `start()` (or as a context manager); mutate with `put`/`delete`."""

    def __init__(self) -> None:
        self._version = 100
        self._compacted = 0  # watches from a version below this get 410
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._log: list[_Event] = []
        self._watches: list[_Watch] = []
        self.requests: list[tuple[str, dict[str, str]]] = []  # (path, query) of every GET
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- life cycle (from the test's thread) ----------------------------------------------
    def start(self) -> FakeKubeAPI:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(5)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._call(self._shutdown)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _main(self, ready: threading.Event) -> None:
        asyncio.run(self._serve(ready))

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, HOST, 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{HOST}:{port}"
        ready.set()
        async with self._server:
            with contextlib.suppress(asyncio.CancelledError):
                await self._server.serve_forever()
            # Every watch was told to end: let the handlers close their connections, those
            # of connections accepted but not yet handed to a handler too (asyncio.run
            # would cancel such a task before its first step, leaving its socket open).
            loop, me = asyncio.get_running_loop(), asyncio.current_task()
            deadline = loop.time() + 5
            while (others := asyncio.all_tasks() - {me}) and loop.time() < deadline:
                await asyncio.wait(others, timeout=deadline - loop.time())

    def _shutdown(self) -> None:
        self._end_all(None)
        assert self._server is not None
        self._server.close()

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the server's loop and wait for its result."""
        assert self._loop is not None

        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(5)

    # -- the cluster's state (from the test's thread) -------------------------------------
    def put(self, kind: str, obj: Obj, namespace: str = "default") -> int:
        """Create or replace an object; returns its new resourceVersion."""
        return self._call(self._put, kind, copy.deepcopy(obj), namespace)

    def delete(self, kind: str, name: str, namespace: str = "default") -> None:
        self._call(self._delete, kind, name, namespace)

    def bookmark(self) -> None:
        self._call(self._bookmark)

    def compact(self) -> None:
        self._call(self._compact)

    def open_watches(self, kind: str) -> int:
        return self._call(lambda: sum(1 for w in self._watches if w.kind == kind))

    def wait_watching(self, kind: str, timeout_s: float = 5.0) -> None:
        """Block until a watch of `kind` is open (so `end_watches` reaches it)."""
        deadline = time.monotonic() + timeout_s
        while not self.open_watches(kind):
            assert time.monotonic() < deadline, f"no watch of {kind} opened"
            time.sleep(0.005)

    def end_watches(self, gone: bool = False) -> None:
        self._call(self._end_all, "gone" if gone else None)

    def reset_watches(self) -> None:
        """Reset every watch's connection mid-stream, as a crashed API server would."""
        self._call(self._reset_all)

    def lists(self, kind: str) -> int:
        return sum(1 for path, q in self.requests if path.endswith(kind) and "watch" not in q)

    def watches(self, kind: str) -> int:
        return sum(1 for path, q in self.requests if path.endswith(kind) and "watch" in q)

    # -- on the server's loop ---------------------------------------------------------------
    def _put(self, kind: str, obj: Obj, namespace: str) -> int:
        self._version += 1
        obj["metadata"].update(namespace=namespace, resourceVersion=str(self._version))
        key = (kind, namespace, obj["metadata"]["name"])
        before = self._objects.get(key)
        self._objects[key] = obj
        self._record(
            _Event(self._version, kind, namespace, "MODIFIED" if before else "ADDED", obj, before)
        )
        return self._version

    def _delete(self, kind: str, name: str, namespace: str) -> None:
        obj = self._objects.pop((kind, namespace, name))
        self._version += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._version)
        self._record(_Event(self._version, kind, namespace, "DELETED", gone, obj))

    def _record(self, event: _Event) -> None:
        self._log.append(event)
        for watch in self._watches:
            if watch.kind == event.kind and watch.namespace == event.namespace:
                seen = _as_seen(event, watch.matches)
                if seen is not None:
                    watch.queue.put_nowait(seen)

    def _bookmark(self) -> None:
        for watch in self._watches:
            if watch.bookmarks:
                mark = {"kind": "Pod", "metadata": {"resourceVersion": str(self._version)}}
                watch.queue.put_nowait(("BOOKMARK", mark))

    def _compact(self) -> None:
        self._compacted = self._version
        self._log.clear()

    def _reset_all(self) -> None:
        for watch in self._watches:
            if watch.writer is not None:
                watch.writer.transport.abort()

    def _end_all(self, how: str | None) -> None:
        for watch in self._watches:
            if how == "gone":
                status = {
                    "kind": "Status",
                    "status": "Failure",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old resource version",
                }
                watch.queue.put_nowait(("ERROR", status))
            watch.queue.put_nowait(None)

    # -- HTTP -------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            target = request.split(b" ", 2)[1].decode()
            url = urlsplit(target)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            self.requests.append((url.path, query))
            route = _route(url.path)
            if route is None:
                await _respond(writer, 404, _status(404, "NotFound", url.path))
            elif query.get("watch") in ("1", "true"):
                await self._watch(writer, *route, query)
            else:
                await self._list(writer, *route, query)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _list(
        self, writer: asyncio.StreamWriter, kind: str, ns: str, q: dict[str, str]
    ) -> None:
        matches = _matcher(q)
        items = [
            o
            for (k, n, _), o in sorted(self._objects.items())
            if k == kind and n == ns and matches(o)
        ]
        body = {
            "kind": "List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self._version)},
            "items": items,
        }
        await _respond(writer, 200, body)

    async def _watch(
        self, writer: asyncio.StreamWriter, kind: str, ns: str, q: dict[str, str]
    ) -> None:
        since = int(q.get("resourceVersion") or self._version)
        if since < self._compacted:
            await _respond(writer, 410, _status(410, "Expired", "too old resource version"))
            return
        bookmarks = q.get("allowWatchBookmarks") == "true"
        watch = _Watch(kind, ns, _matcher(q), bookmarks=bookmarks, writer=writer)
        for event in self._log:
            if event.version > since and event.kind == kind and event.namespace == ns:
                seen = _as_seen(event, watch.matches)
                if seen is not None:
                    watch.queue.put_nowait(seen)
        self._watches.append(watch)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        timeout = float(q.get("timeoutSeconds") or 1800)
        try:
            async with asyncio.timeout(timeout):
                while (item := await watch.queue.get()) is not None:
                    line = orjson.dumps({"type": item[0], "object": item[1]}) + b"\n"
                    writer.write(b"%x\r\n%s\r\n" % (len(line), line))
                    await writer.drain()
        except TimeoutError:
            pass
        finally:
            self._watches.remove(watch)
        if not writer.is_closing():
            writer.write(b"0\r\n\r\n")
            await writer.drain()


def _as_seen(event: _Event, matches: Callable[[Obj], bool]) -> tuple[str, Obj] | None:
    """The event as a watch with this selector sees it (label changes move objects in/out)."""
    now = event.type != "DELETED" and matches(event.obj)
    was = event.before is not None and matches(event.before)
    if event.type == "DELETED":
        return ("DELETED", event.obj) if was else None
    if now:
        return ("MODIFIED" if was else "ADDED", event.obj)
    return ("DELETED", event.obj) if was else None


def _matcher(q: dict[str, str]) -> Callable[[Obj], bool]:
    labels = dict(p.split("=", 1) for p in q.get("labelSelector", "").split(",") if p)
    fields = dict(p.split("=", 1) for p in q.get("fieldSelector", "").split(",") if p)

    def matches(obj: Obj) -> bool:
        have = obj["metadata"].get("labels") or {}
        if any(have.get(k) != v for k, v in labels.items()):
            return False
        name = fields.get("metadata.name")
        return name is None or obj["metadata"]["name"] == name

    return matches


def _route(path: str) -> tuple[str, str] | None:
    for prefix, kind in _PREFIXES:
        if path.startswith(prefix):
            ns, _, rest = path[len(prefix) :].partition("/")
            if rest == kind:
                return kind, ns
    return None


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


async def _respond(writer: asyncio.StreamWriter, status: int, body: Obj) -> None:
    data = orjson.dumps(body)
    head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    writer.write(head.encode() + data)
    await writer.drain()
