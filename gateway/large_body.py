"""Request bodies over `OFF_LOOP_BYTES` parsed in a worker thread that leaves the loop running.

A thread alone does not do it: orjson (like `json`'s C scanner) builds the whole document in
one call that holds the GIL, so a 16 MiB body of tiny messages held the loop for its
~250 ms parse wherever it ran. `loads_yielding` builds arrays and objects in Python (the
standard library's pure-Python scanner; strings still by its C `scanstring`), so the thread
hands the GIL back every switch interval (5 ms). It costs ~5x orjson's CPU time on such a
body, so one large body is parsed at a time (`BodyParser`) and small ones stay inline with
orjson. It accepts what orjson accepts: NaN, Infinity and numbers overflowing a double are
refused, as are lone surrogates; integers beyond 64 bits become floats
(docs/decisions/0028-safe-defaults.md).
"""

from __future__ import annotations

import asyncio
import json
import json.decoder
import json.scanner
from collections.abc import Callable
from typing import Any

from gateway.inference_request import InferenceRequest, inference_request, loads_body

OFF_LOOP_BYTES = 1 << 20  # orjson takes ~15 ms on the densest 1 MiB body (tiny messages)
_INT_RANGE = range(-(1 << 63), 1 << 64)  # orjson's int and uint64; other integers: floats

# The standard library's scanner parts, which typeshed does not declare.
_scanstring: Callable[[str, int, bool], tuple[str, int]]
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]
_json_object: Callable[..., tuple[dict[str, Any], int]]
_json_object = json.decoder.JSONObject  # type: ignore[attr-defined]
_py_make_scanner: Callable[[json.JSONDecoder], Any]
_py_make_scanner = json.scanner.py_make_scanner  # type: ignore[attr-defined]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:20]} is infinity when parsed as a double")
    return value


def _int(text: str) -> int | float:
    value = int(text)
    return value if value in _INT_RANGE else _float(text)


def _check_surrogates(text: str) -> None:
    if not text.isascii():
        text.encode()  # UnicodeEncodeError (a ValueError) on a lone surrogate


def _string(s: str, end: int, strict: bool = True) -> tuple[str, int]:
    text, end = _scanstring(s, end, strict)
    _check_surrogates(text)
    return text, end


def _object(s_and_end: tuple[str, int], *args: Any) -> tuple[dict[str, Any], int]:
    value, end = _json_object(s_and_end, *args)
    for key in value:  # keys come from the C scanner directly
        _check_surrogates(key)
    return value, end


class _Decoder(json.JSONDecoder):
    def __init__(self) -> None:
        super().__init__(parse_float=_float, parse_int=_int, parse_constant=_no_constant)
        self.parse_string = _string
        self.parse_object = _object
        self.scan_once = _py_make_scanner(self)


def loads_yielding(body: bytes) -> Any:
    """The JSON document in `body`, as orjson would give it, built by Python code that lets
    other threads run; ValueError if it is not valid JSON."""
    if body.startswith(b"\xef\xbb\xbf"):
        raise ValueError("UTF-8 byte order mark (BOM) is not supported")
    try:
        return _Decoder().decode(body.decode())
    except RecursionError:  # some hundred levels (orjson's limit is 1024)
        raise ValueError("arrays or objects nested too deeply") from None


class BodyParser:
    """Request bodies parsed for the gateway: one over `off_loop_bytes` in a worker thread,
    one such body at a time (the others wait their turn, the loop does not)."""

    def __init__(self, off_loop_bytes: int = OFF_LOOP_BYTES) -> None:
        self._off_loop_bytes = off_loop_bytes
        self._one_at_a_time = asyncio.Semaphore(1)

    async def loads(self, body: bytes) -> Any:
        """The body's JSON; a `BadRequestError` (invalid_json) if it is empty or not JSON."""
        if len(body) <= self._off_loop_bytes:
            return loads_body(body)
        async with self._one_at_a_time:
            return await asyncio.to_thread(loads_body, body, loads_yielding)

    async def parse(self, api: str, body: bytes) -> InferenceRequest:
        """`parse_inference_body`, a large body off the event loop."""
        return inference_request(api, await self.loads(body), len(body))
