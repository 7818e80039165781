"""An engine adapter driven by a table: which Prometheus series feed which `EngineMetrics` field.

Each field lists candidate `Source`s in order of preference; the first one present in a
scrape wins and the rest are ignored, so a renamed metric is one more entry in the table
(vLLM's `vllm:kv_cache_usage_perc` after its v0 name `vllm:gpu_cache_usage_perc`).

Several series of one metric (data-parallel engines labelled `engine="0"`, `"1"`, …) are
combined: waiting, running and blocks are summed, KV usage is averaged, block size is the
first. NaN and ±Inf samples, and labels that are not integers (`"None"`), count as absent.

LoRA (vLLM's convention): a gauge whose labels `running_lora_adapters` and
`waiting_lora_adapters` hold comma-separated adapter names and `max_lora` the slot count.
The engine sets it to the current time under new labels each step and never removes old
series, so the series with the largest value is the current one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from adapters.parser import Sample, samples_of
from routing.types import EngineMetrics


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

    def parse_metrics(self, text: str, scraped_at: float) -> EngineMetrics:
        samples = _Lookup(text)
        names = self.names
        kv_usage = _mean(_values(samples, names.kv_usage))
        lora = _newest(samples, names.lora_info)
        return EngineMetrics(
            scraped_at=scraped_at,
            waiting=_int_sum(_values(samples, names.waiting)),
            running=_int_sum(_values(samples, names.running)),
            kv_usage=None if kv_usage is None else min(max(kv_usage, 0.0), 1.0),
            block_size=_first_int(_values(samples, names.block_size)),
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
            try:
                values.append(float(int(s.labels[source.label])))
            except (KeyError, ValueError):
                continue
        return values
    return []


def _int_sum(values: list[float]) -> int | None:
    return max(0, round(sum(values))) if values else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _first_int(values: list[float]) -> int | None:
    return round(values[0]) if values else None


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
    try:
        return int(sample.labels[label])
    except (KeyError, ValueError):
        return None
