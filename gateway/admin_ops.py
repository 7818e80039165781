"""The admin API's write side: add, drain, resume and remove backends; reload the config.

`AdminOperations` answers alike on the admin port (`gateway.admin_app`) and on the API port's
`/admin/*` behind the admin key (`handle`, plain ASGI):
- `POST /admin/backends`, a `backends:` entry as JSON: probed at once, routed to once healthy;
  201, 409 id taken, 400 naming a bad field, 413 over `server.max_body_bytes`, 415 not JSON.
- `POST /admin/backends/{id}/drain[?remove=true]`: no new requests, those in flight finish (with
  `remove`, it then leaves the pool); `POST /admin/backends/{id}/resume`: back in rotation; 200.
- `DELETE /admin/backends/{id}[?force=true]`: out now if idle or forced (200; requests in flight
  still finish), else drained and out when its last request ends (202).
- `POST /admin/reload`: as SIGHUP; 200 with what changed, 400 naming the bad field.
Unknown id 404; a discovered backend can be drained, not removed (409); a bad flag 400, unknown
path 404, wrong method 405; all OpenAI-shaped JSON. Changes last until the process ends (the file
is not written); with `--workers N` each is repeated on every sibling (`repeat`), the answer
saying how each fared (`"workers": {"1": "ok", ...}`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

from pydantic import ValidationError

from gateway.asgi import (
    Receive,
    Scope,
    Send,
    check_json_content_type,
    header_map,
    parse_json_body,
    read_body,
    send_json,
)
from gateway.config_reload import ConfigReloader
from gateway.errors import (
    BadRequestError,
    ConflictError,
    GatewayError,
    MethodNotAllowedError,
    NotFoundError,
)
from gateway.runtime_backends import RuntimeBackends
from routing.config.schema import BackendEntry, ConfigError

BACKENDS = "/admin/backends"
RELOAD = "/admin/reload"
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"", "0", "false", "no", "off"}
# Tells the sibling workers a change made here (None: no siblings); worker index → outcome.
Repeat = Callable[[dict[str, Any]], Awaitable[dict[str, str]]]


class AdminOperations:
    """What both listeners' write endpoints do."""

    def __init__(
        self,
        backends: RuntimeBackends,
        reloader: Callable[[], ConfigReloader | None],
        repeat: Repeat | None = None,
    ) -> None:
        self._backends = backends
        self._reloader = reloader  # set once the command line gave the config's source
        self.repeat = repeat

    async def add(self, entry: BackendEntry) -> dict[str, Any]:
        result = {"backend": self._backends.describe(self._backends.add(entry))}
        op = {"action": "add", "entry": entry.model_dump(mode="json", exclude_unset=True)}
        return await self._repeated(result, op)

    async def drain(self, backend_id: str, *, remove: bool = False) -> dict[str, Any]:
        backend = self._backends.drain(backend_id, remove=remove)
        result = {"backend": self._backends.describe(backend)}
        return await self._repeated(result, {"action": "drain", "id": backend_id, "remove": remove})

    async def resume(self, backend_id: str) -> dict[str, Any]:
        result = {"backend": self._backends.describe(self._backends.resume(backend_id))}
        return await self._repeated(result, {"action": "resume", "id": backend_id})

    async def remove(self, backend_id: str, *, force: bool = False) -> tuple[int, dict[str, Any]]:
        """200 and `removed: true` if it left the pool, else 202 (drained, leaves when idle)."""
        backend = self._backends.get(backend_id)
        removed = self._backends.remove(backend_id, force=force)
        result = {"removed": removed, "backend": self._backends.describe(backend)}
        op = {"action": "remove", "id": backend_id, "force": force}
        return (200 if removed else 202), await self._repeated(result, op)

    async def reload(self) -> dict[str, Any]:
        result = await self._reload("admin API")
        return await self._repeated(result, {"action": "reload"})

    async def _reload(self, source: str) -> dict[str, Any]:
        reloader = self._reloader()
        if reloader is None:
            raise ConflictError(
                "no config to reload: this gateway was not started by `kvgate serve` or "
                "`kvgate epp`"
            )
        try:
            return await reloader.reload(source)
        except ConfigError as exc:
            raise BadRequestError(str(exc), code="invalid_config") from None

    async def _repeated(self, result: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
        if self.repeat is None:
            return result
        return {**result, "workers": await self.repeat(op)}

    async def apply(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """A change a sibling worker made, made here too (not repeated further)."""
        action, b = op.get("action"), self._backends
        try:
            if action == "add":
                b.add(BackendEntry.model_validate(op["entry"]))
            elif action == "drain":
                b.drain(op["id"], remove=bool(op["remove"]))
            elif action == "resume":
                b.resume(op["id"])
            elif action == "remove":
                b.remove(op["id"], force=bool(op["force"]))
            elif action == "reload":
                await self._reload("admin API, through a sibling worker")
            else:
                return {"error": f"unknown action {action!r}"}
        except GatewayError as exc:
            return {"error": exc.message}
        except (ValidationError, KeyError) as exc:
            return {"error": f"bad change: {exc}"}
        return {"ok": True}


def parse_backend_entry(body: bytes, content_type: str | None = None) -> BackendEntry:
    """A `backends:` entry of the config, as JSON: 415 if the body is not JSON, 400 if it is
    not an object or names a bad field (the first one, by its path: `kv_events.endpoint`)."""
    check_json_content_type(content_type)
    data = parse_json_body(body)
    if not isinstance(data, dict):
        raise BadRequestError(
            "request body must be a JSON object: a `backends:` entry, e.g. "
            '{"url": "http://10.0.0.7:8000", "id": "gpu-7"}',
            code="invalid_backend",
        )
    try:
        return BackendEntry.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BadRequestError(f"{where}: {err['msg']}", code="invalid_backend") from None


def flag(params: Mapping[str, list[str]], name: str) -> bool:
    value = params.get(name, ["false"])[-1].lower()
    if value not in _TRUE | _FALSE:
        raise BadRequestError(f"query parameter {name}: expected true or false, not {value!r}")
    return value in _TRUE


async def handle(
    ops: AdminOperations, scope: Scope, receive: Receive, send: Send, max_body_bytes: int
) -> None:
    """The write endpoints on the API port (the front door has checked the admin key)."""
    method, path = scope["method"], scope["path"]
    params = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    if path == BACKENDS and method == "POST":
        body = await read_body(receive, max_body_bytes)
        entry = parse_backend_entry(body, header_map(scope).get("content-type"))
        await send_json(send, 201, await ops.add(entry))
    elif path == RELOAD and method == "POST":
        await send_json(send, 200, await ops.reload())
    elif path in (BACKENDS, RELOAD):
        raise MethodNotAllowedError(f"method {method} not allowed on {path}", allow=("POST",))
    elif path.startswith(BACKENDS + "/"):
        await _one_backend(ops, method, path[len(BACKENDS) + 1 :], params, send)
    else:
        raise NotFoundError(f"no route for {method} {path}")


async def _one_backend(
    ops: AdminOperations, method: str, rest: str, params: Mapping[str, list[str]], send: Send
) -> None:
    backend_id, _, action = rest.rpartition("/")
    if method == "POST" and action == "drain" and backend_id:
        await send_json(send, 200, await ops.drain(backend_id, remove=flag(params, "remove")))
    elif method == "POST" and action == "resume" and backend_id:
        await send_json(send, 200, await ops.resume(backend_id))
    elif method == "DELETE" and rest:
        status, body = await ops.remove(rest, force=flag(params, "force"))
        await send_json(send, status, body)
    elif method == "POST":
        raise NotFoundError(f"no route for POST {BACKENDS}/{rest}: use .../drain or .../resume")
    else:
        where = f"{BACKENDS}/{rest}"
        raise MethodNotAllowedError(
            f"method {method} not allowed on {where}", allow=("DELETE", "POST")
        )
