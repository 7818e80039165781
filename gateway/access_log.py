"""Request ids (a contextvar, so every log line can carry one) and the access log line.

Strings a client chose (model names, paths, error texts that quote them) are cut to
`MAX_LOGGED_CHARS` in log lines: a 100 KB model name must not make a 100 KB line.
"""

from __future__ import annotations

import contextvars
import logging
import os
import random

from gateway.log_format import LogFields
from gateway.request_record import RequestRecord

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
access_log = logging.getLogger("gateway.access")

_MAX_ID = 128
MAX_LOGGED_CHARS = 200
# Ids need to be unique, not secret: a seeded generator, not uuid4's urandom() syscall.
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)  # forked workers must not repeat each other


def request_id_from(header: str | None) -> str:
    """Propagate a sane client `x-request-id`, else make one."""
    # ASCII only: the id is sent on as a header, and httpx encodes str headers as ASCII.
    if header and len(header) <= _MAX_ID and header.isascii() and header.isprintable():
        return header
    # As f"{bits:032x}" writes it (32 lower-case hex digits), in half the time.
    return _ids.getrandbits(128).to_bytes(16, "big").hex()


def clip(text: str | None, limit: int = MAX_LOGGED_CHARS) -> str | None:
    """`text` cut to `limit` characters, marked with how much was left out."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every record, for formats that show it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


def log_request(rec: RequestRecord, now: float) -> None:
    """One structured line per request, refused ones too; never the prompt, nor a key (its
    name only)."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    usage = rec.usage
    line = {
        "request_id": rec.request_id,
        "method": rec.method,
        "path": clip(rec.path),
        "client": rec.client,
        "key": rec.key,
        "tenant": clip(rec.tenant),
        "model": clip(rec.model),
        "policy": rec.policy,
        "reason": rec.reason,
        "backend": rec.backend,
        "status": rec.status,
        "attempts": rec.attempts,
        "stream": rec.stream,
        "prompt_tokens": usage.prompt_tokens if usage else None,
        "cached_tokens": usage.cached_tokens if usage else None,
        "completion_tokens": usage.completion_tokens if usage else None,
        "ttft_s": None if rec.ttft_s is None else round(rec.ttft_s, 6),
        "duration_s": round(now - rec.started, 6),
    }
    if rec.prefill_backend:
        line["prefill_backend"] = rec.prefill_backend
    if rec.request is not None and rec.request.model_asked is not None:
        line["model_asked"] = clip(rec.request.model_asked)  # `model` is the rewrite's target
    if rec.error:
        line["error"] = clip(rec.error)
    access_log.info("%s", LogFields("request", line))  # json: the fields on the line itself
