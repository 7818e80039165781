"""The process's log lines: `--log-format text` (default) or `json`, one record per line.

text: `2026-12-01 10:00:00,123 INFO gateway.app [REQUEST_ID] message`.
json: one JSON object per line, `{"ts": "2026-12-01T10:00:00.123Z", "level": "info",
"logger": "gateway.app", "message": "...", "request_id": "..." or null, ...}` followed by the
record's extra fields (`logging`'s `extra=`) and `exc_info` (the traceback, as one string).
A message that is a `LogFields` (the access log's) puts its fields on the line itself, with
its `event` as the message; in text it is shown as one JSON object, as before. A worker of
`kvgate serve --workers N` says which it is: `worker N: message` in text, `"worker": N` in
json (`tag_worker`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
WORKER_TEXT_FORMAT = (
    "%(asctime)s %(levelname)s %(name)s [%(request_id)s] worker %(worker)s: %(message)s"
)
_NO_REQUEST = "-"  # what the request id contextvar holds outside a request
# Attributes every record has, and those formatters or uvicorn add: not extra fields.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "request_id",
    "color_message",  # uvicorn's coloured copy of the message
    "taskName",
}


class LogFields:
    """A log message made of fields: `logger.info("%s", LogFields("request", {...}))`."""

    __slots__ = ("event", "fields")

    def __init__(self, event: str, fields: Mapping[str, Any]) -> None:
        self.event = event
        self.fields = fields

    def __str__(self) -> str:  # the text format's message, built only if a line is written
        return orjson.dumps(self.fields, default=str).decode()


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields_of(record)
        request_id = getattr(record, "request_id", _NO_REQUEST)
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": fields.event if fields is not None else record.getMessage(),
            "request_id": None if request_id == _NO_REQUEST else request_id,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                out.setdefault(key, value)
        if fields is not None:
            for key, value in fields.fields.items():
                out.setdefault(key, value)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class _WorkerFilter(logging.Filter):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


def tag_worker(index: int) -> None:
    """In worker `index`: every line of the root handlers says so."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_WorkerFilter(index))
        if not isinstance(handler.formatter, JsonFormatter):
            handler.setFormatter(logging.Formatter(WORKER_TEXT_FORMAT))


def _fields_of(record: logging.LogRecord) -> LogFields | None:
    args = record.args
    if isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], LogFields):
        return args[0]
    return None
