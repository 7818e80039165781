"""`/metrics` of a gateway with workers: one page with the whole gateway's counts.

Whichever worker a scrape lands on asks its siblings for their pages
(`gateway.workers.siblings`) and merges them with its own: counters, histograms and
summaries are summed series by series (the gateway's requests, latencies and errors, as one
process would count them; `process_cpu_seconds_total` the workers' CPU together); every
gauge keeps one series per worker with a `worker` label (a gauge's meaning varies: in-flight
requests add up, health flags, memory and `kvgate_build_info` do not, so the sum is left to
the query, e.g. `sum without (worker)`). A sibling that does not answer in time is left out,
and `kvgate_workers_scraped` says how many workers the page covers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

_SUMMED = frozenset({"counter", "histogram", "summary"})
_Key = tuple[str, tuple[tuple[str, str], ...]]


def merge_pages(pages: Mapping[int, bytes], workers: int) -> bytes:
    """The workers' expositions (worker index → page) as one page (see the module
    docstring); `workers` is how many the gateway runs."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[_Key, float]] = {}
    for worker, page in sorted(pages.items()):
        for family in text_string_to_metric_families(page.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type
                )
                values[family.name] = {}
            _add(merged, values[family.name], family, worker)
    for name, merged in families.items():
        for (sample, labels), value in values[name].items():
            merged.samples.append(Sample(sample, dict(labels), value))
    scraped = GaugeMetricFamily(
        "kvgate_workers_scraped", f"workers whose metrics this page covers (of {workers})"
    )
    scraped.add_metric([], float(len(pages)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([*families.values(), scraped]))
    return generate_latest(registry)


def _add(merged: Metric, sums: dict[_Key, float], family: Metric, worker: int) -> None:
    """`family`'s samples of one worker into `merged`: summed (a counter's, a histogram's)
    or labelled by worker (a gauge's)."""
    for s in family.samples:
        if family.type in _SUMMED:
            key = (s.name, tuple(sorted(s.labels.items())))
            sums[key] = sums.get(key, 0.0) + s.value
        else:
            merged.samples.append(Sample(s.name, {**s.labels, "worker": str(worker)}, s.value))


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families
