"""From the config's `tokenizers:` list to a per-model `TokenizerSet` (the composition root's
one call: `build_tokenizers(config.tokenizers, pick_backend)`).

An entry names a model exactly or is `"*"` (every model without an exact entry); a model
with neither is not tokenized (`for_model` is None, the byte approximation stays). Local
tokenizers are loaded here, at start: a missing file or a missing `tokens` extra is a
`ConfigError` naming the entry's field (`tokenizers.0.path: ...`). Engine tokenizers share one
`JsonPoster`: the given one, else the gateway's HTTP/1.1 client of their own (a quarter of
httpx's CPU per call, `python -m bench tokenize`), closed by `TokenizerSet.aclose`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.http.client import ClientLimits, UpstreamClient
from gateway.tokens.engine import EngineTokenizer, PickBackend
from gateway.tokens.local import MissingExtraError, load_local_tokenizer
from gateway.tokens.protocol import PromptTokenizer, TokenizerCounters
from gateway.tokens.transport import JsonPoster, UpstreamPoster
from routing.config.schema import ConfigError, TokenizerEntry

ANY_MODEL = "*"


class TokenizerSet:
    """The prompt tokenizer of each configured model."""

    def __init__(
        self, by_model: Mapping[str, PromptTokenizer], owned: UpstreamClient | None = None
    ) -> None:
        self._by_model = dict(by_model)
        self._owned = owned

    def for_model(self, model: str) -> PromptTokenizer | None:
        """`model`'s tokenizer, else the `"*"` entry's, else None (not tokenized)."""
        found = self._by_model.get(model)
        return found if found is not None else self._by_model.get(ANY_MODEL)

    def counters(self) -> dict[str, TokenizerCounters]:
        """Each entry's counters, by its configured model name (`"*"` included)."""
        return {model: t.counters for model, t in self._by_model.items()}

    def __bool__(self) -> bool:
        return bool(self._by_model)

    async def aclose(self) -> None:
        """Close the HTTP client made for the engine tokenizers, if one was."""
        if self._owned is not None:
            await self._owned.aclose()


def build_tokenizers(
    entries: Sequence[TokenizerEntry],
    pick_backend: PickBackend,
    poster: JsonPoster | None = None,
) -> TokenizerSet:
    """One tokenizer per entry. `pick_backend(model)`: the base URL of a healthy backend
    serving `model` (None: none now; see `backends.healthy_backend_picker`); `poster`: how
    `/tokenize` is asked (default: a client of their own)."""
    owned = None
    timeouts = [e.timeout_s for e in entries if e.source == "engine"]
    if poster is None and timeouts:
        t = max(timeouts)  # each call is bounded by its entry's timeout_s as a whole
        limits = ClientLimits(
            connect_timeout=t, read_timeout=t, write_timeout=t, pool_timeout=t, max_connections=64
        )
        owned = UpstreamClient(limits)
        poster = UpstreamPoster(owned)
    by_model: dict[str, PromptTokenizer] = {}
    for i, entry in enumerate(entries):
        if entry.source == "local":
            by_model[entry.model] = _load_local(i, entry)
        else:
            assert poster is not None
            by_model[entry.model] = EngineTokenizer(
                pick_backend, poster, entry.cache_entries, entry.timeout_s
            )
    return TokenizerSet(by_model, owned)


def _load_local(index: int, entry: TokenizerEntry) -> PromptTokenizer:
    assert entry.path is not None  # the schema requires it for source local
    try:
        return load_local_tokenizer(entry.path, entry.chat_template)
    except MissingExtraError as exc:
        raise ConfigError(f"tokenizers.{index}.source: {exc}") from None
    except OSError as exc:
        field = "chat_template" if _names(exc, entry.chat_template) else "path"
        raise ConfigError(f"tokenizers.{index}.{field}: {exc}") from None
    except Exception as exc:  # an invalid tokenizer.json, config or template
        raise ConfigError(f"tokenizers.{index}: cannot load {entry.path}: {exc}") from None


def _names(exc: OSError, path: str | None) -> bool:
    return path is not None and exc.filename is not None and str(exc.filename) == path
