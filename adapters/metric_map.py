"""An engine adapter driven by a table: which Prometheus series feed which `EngineMetrics` field.

Each field lists candidate `Source`s in order of preference; the first present in a scrape
wins, so a renamed metric is one more entry (vLLM's `vllm:kv_cache_usage_perc` after its v0
name `vllm:gpu_cache_usage_perc`). Several series of one metric (data-parallel ranks) are
combined: waiting, running and blocks summed, KV usage averaged, block size the first;
`rank_metrics` reads them apart by `rank_labels` instead (docs/data-parallel.md).

A page is a backend's word, not ours: parsing never raises on it. NaN and ±Inf samples,
labels that are not integers (`"None"`), counts or integer labels beyond 2^53 (the largest
integer a float holds exactly) and a KV usage whose mean overflows count as absent; a block
size outside 1–4096 tokens, or not an integer, is ignored and logged once per value. LoRA
(vLLM's convention): a gauge whose labels `running_lora_adapters` and `waiting_lora_adapters`
hold comma-separated names and `max_lora` the slot count; the engine sets it to the current
time under new labels each step and never removes old series, so the largest value is current.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass

from adapters.parser import Sample, samples_of
from routing.types import EngineMetrics

log = logging.getLogger(__name__)
_MAX_COUNT = 2**53  # beyond it a float no longer holds every integer: not a real count
_MAX_BLOCK_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Source:
    """Where a signal is read: a metric's value or, with `label`, an integer label of it."""

    metric: str
    label: str | None = None


@dataclass(frozen=True, slots=True)
class MetricMap:
    """Candidate sources for each `EngineMetrics` field, most preferred first."""

    waiting: tuple[Source, ...] = ()
    running: tuple[Source, ...] = ()
    kv_usage: tuple[Source, ...] = ()
    block_size: tuple[Source, ...] = ()
    num_blocks: tuple[Source, ...] = ()
    lora_info: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MetricMapAdapter:
    """An `EngineAdapter` for an engine that exports Prometheus metrics named by `names`."""

    engine: str
    names: MetricMap
    metrics_path: str | None = "/metrics"
    rank_labels: tuple[str, ...] = ()  # labels naming a data-parallel rank, preferred first

    def parse_metrics(self, text: str, scraped_at: float) -> EngineMetrics:
        return self._read(_Lookup(text), scraped_at)

    def dp_size_of(self, text: str) -> int:
        """How many data-parallel ranks the page reports (distinct rank label values of the
        running-requests series; 1 without rank labels)."""
        return max(1, len(_rank_values(_Lookup(text), self.names.running, self.rank_labels)))

    def rank_metrics(self, text: str, scraped_at: float, dp_size: int) -> list[EngineMetrics]:
        """One `EngineMetrics` per rank 0 .. dp_size-1 (see the module docstring)."""
        lookup = _Lookup(text)
        labels = self.rank_labels
        if labels and _rank_values(lookup, self.names.running, labels):
            return [
                self._read(_RankLookup(lookup, labels, str(r)), scraped_at) for r in range(dp_size)
            ]
        return _divided(self._read(lookup, scraped_at), dp_size)

    def _read(self, samples: _Lookup, scraped_at: float) -> EngineMetrics:
        names = self.names
        kv_usage = _mean(_values(samples, names.kv_usage))
        lora = _newest(samples, names.lora_info)
        return EngineMetrics(
            scraped_at=scraped_at,
            waiting=_int_sum(_values(samples, names.waiting)),
            running=_int_sum(_values(samples, names.running)),
            kv_usage=None if kv_usage is None else min(max(kv_usage, 0.0), 1.0),
            block_size=_block_size(_values(samples, names.block_size)),
            num_blocks=_int_sum(_values(samples, names.num_blocks)),
            running_loras=_adapter_set(lora, "running_lora_adapters"),
            waiting_loras=_adapter_set(lora, "waiting_lora_adapters"),
            max_loras=_int_label(lora, "max_lora"),
        )


class _Lookup:
    """Samples of one page by metric name, each searched for once and only when asked.

    Lazy, so a fallback name costs nothing while the preferred name is present.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._found: dict[str, list[Sample]] = {}

    def get(self, name: str) -> list[Sample]:
        found = self._found.get(name)
        if found is None:
            found = self._found[name] = samples_of(self._text, name)
        return found


class _RankLookup(_Lookup):
    """One rank's samples of a page: those whose rank label is `rank`, and those with no rank
    label (engine-wide info)."""

    def __init__(self, lookup: _Lookup, labels: tuple[str, ...], rank: str) -> None:
        self._all = lookup
        self._labels = labels
        self._rank = rank
        self._found = {}

    def get(self, name: str) -> list[Sample]:
        found = self._found.get(name)
        if found is None:
            found = self._found[name] = [
                s for s in self._all.get(name) if _rank_of(s, self._labels) in (None, self._rank)
            ]
        return found


def _rank_of(sample: Sample, labels: tuple[str, ...]) -> str | None:
    for label in labels:
        if (value := sample.labels.get(label)) is not None:
            return value
    return None


def _rank_values(
    samples: _Lookup, sources: tuple[Source, ...], labels: tuple[str, ...]
) -> set[str]:
    for source in sources:
        found = samples.get(source.metric)
        if found:
            return {r for s in found if (r := _rank_of(s, labels)) is not None}
    return set()


def _divided(total: EngineMetrics, n: int) -> list[EngineMetrics]:
    """`total` shared by `n` ranks: counts split (the remainder to the first ranks)."""

    def share(value: int | None, r: int) -> int | None:
        return None if value is None else value // n + (1 if r < value % n else 0)

    return [
        dataclasses.replace(
            total,
            waiting=share(total.waiting, r),
            running=share(total.running, r),
            num_blocks=share(total.num_blocks, r),
        )
        for r in range(n)
    ]


def _values(samples: _Lookup, sources: tuple[Source, ...]) -> list[float]:
    """Finite values of the first source present in `samples` (empty if none is)."""
    for source in sources:
        found = samples.get(source.metric)
        if not found:
            continue
        if source.label is None:
            return [s.value for s in found if math.isfinite(s.value)]
        values = []
        for s in found:
            number = _int_or_none(s.labels.get(source.label))
            if number is not None:
                values.append(float(number))
        return values
    return []


def _int_or_none(text: str | None) -> int | None:
    """An integer label's value; None if absent, not an integer or beyond a sane count.

    The length check comes first: int() of a long digit string is quadratic, and Python
    refuses those beyond 4300 digits (ValueError) anyway.
    """
    if text is None or len(text) > 20:
        return None
    try:
        number = int(text)
    except ValueError:
        return None
    return number if abs(number) <= _MAX_COUNT else None


def _int_sum(values: list[float]) -> int | None:
    if not values:
        return None
    total = sum(values)  # not math.fsum, which raises OverflowError on 1e308 + 1e308
    if not math.isfinite(total) or abs(total) > _MAX_COUNT:
        return None
    return max(0, round(total))


def _mean(values: list[float]) -> float | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    return mean if math.isfinite(mean) else None


def _block_size(values: list[float]) -> int | None:
    if not values:
        return None
    first = values[0]
    if first.is_integer() and 1 <= first <= _MAX_BLOCK_SIZE:
        return int(first)
    _warn_block_size(first)
    return None


# Memoised so that a bad value is logged once, not on every scrape (20 a second).
@functools.lru_cache(maxsize=64)
def _warn_block_size(value: float) -> None:
    log.warning(
        "engine reports block size %r: not an integer in 1-%d, ignored", value, _MAX_BLOCK_SIZE
    )


def _newest(samples: _Lookup, names: tuple[str, ...]) -> Sample | None:
    for name in names:
        found = [s for s in samples.get(name) if not math.isnan(s.value)]
        if found:
            return max(found, key=lambda s: s.value)
    return None


def _adapter_set(sample: Sample | None, label: str) -> frozenset[str]:
    if sample is None:
        return frozenset()
    names = (a.strip() for a in sample.labels.get(label, "").split(","))
    return frozenset(a for a in names if a)


def _int_label(sample: Sample | None, label: str) -> int | None:
    if sample is None:
        return None
    return _int_or_none(sample.labels.get(label))
