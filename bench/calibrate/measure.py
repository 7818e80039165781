"""Measure every cell of the grid against a running vLLM server, saving as it goes.

Cells run in a seeded random order, so slow drift of the shared machine (other work on the
two cores) spreads over the grid instead of lining up with one axis of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.calibrate.client import server_histograms, stream_completion
from bench.calibrate.grid import Cell
from bench.calibrate.plan import plan_burst
from bench.calibrate.records import CellRecord, Repetition, ServerTimes, cell_to_json

log = logging.getLogger(__name__)

PAUSE_S = 0.3  # between bursts, so each starts on an idle engine
# Repetitions measured beyond `repeats` at most per cell, in place of stalled ones
# (`Repetition.stalled`); all are saved, stalled ones included.
MAX_EXTRA_REPEATS = 5


async def warm_up(client: httpx.AsyncClient, model: str, vocab: int, rng: random.Random) -> None:
    """A few throw-away bursts, so one-off start-up costs land in no cell."""
    for cell in (Cell(512, 0.0, 1, 8), Cell(2048, 0.0, 4, 8), Cell(256, 0.5, 8, 8)):
        await _burst(client, model, cell, vocab, rng)


async def measure_grid(
    client: httpx.AsyncClient,
    model: str,
    cells: list[Cell],
    repeats: int,
    *,
    vocab: int,
    seed: int,
    save: Callable[[list[CellRecord]], None],
) -> list[CellRecord]:
    rng = random.Random(seed)
    order = list(cells)
    rng.shuffle(order)
    done: list[CellRecord] = []
    started = time.monotonic()
    for n, cell in enumerate(order, 1):
        reps: list[Repetition] = []
        while sum(not r.stalled for r in reps) < repeats and len(reps) < (
            repeats + MAX_EXTRA_REPEATS
        ):
            reps.append(await _burst(client, model, cell, vocab, rng))
        done.append(CellRecord(cell=cell, repetitions=tuple(reps)))
        save(done)
        elapsed = time.monotonic() - started
        ttfts = sorted(r.ttft_s for rep in reps for r in rep.requests)
        log.info(
            "[%d/%d] %s  ttft %.1f-%.1f ms  cached %s  stalled %d  (%.0f s elapsed, ~%.0f s left)",
            n,
            len(order),
            cell.key,
            ttfts[0] * 1e3,
            ttfts[-1] * 1e3,
            sorted({r.cached_tokens for rep in reps for r in rep.requests}),
            sum(r.stalled for r in reps),
            elapsed,
            elapsed / n * (len(order) - n),
        )
    return done


async def _burst(
    client: httpx.AsyncClient, model: str, cell: Cell, vocab: int, rng: random.Random
) -> Repetition:
    burst = plan_burst(cell, rng, vocab)
    warm_cached: tuple[int, ...] = ()
    if burst.warmups:
        t = time.perf_counter()
        warm = await asyncio.gather(
            *(
                stream_completion(client, model, list(p), 1, index=i, burst_start=t)
                for i, p in enumerate(burst.warmups)
            )
        )
        warm_cached = tuple(r.cached_tokens for r in warm)
        await asyncio.sleep(PAUSE_S)
    before = await server_histograms(client)
    start = time.perf_counter()
    records = await asyncio.gather(
        *(
            stream_completion(client, model, list(p), cell.output_len, index=i, burst_start=start)
            for i, p in enumerate(burst.prompts)
        )
    )
    await asyncio.sleep(PAUSE_S)
    server = await _server_times(client, before, cell.concurrency)
    for r in records:
        if r.prompt_tokens != cell.prompt_len or r.completion_tokens != cell.output_len:
            raise RuntimeError(
                f"{cell.key}: server counted {r.prompt_tokens} prompt and "
                f"{r.completion_tokens} completion tokens"
            )
    return Repetition(requests=tuple(records), warmup_cached_tokens=warm_cached, server=server)


async def _server_times(
    client: httpx.AsyncClient, before: dict[str, float], expected: int
) -> ServerTimes | None:
    """The burst's share of vLLM's histograms; None if they do not add up to the burst."""
    for _ in range(10):
        times = ServerTimes.between(before, await server_histograms(client))
        if times.requests >= expected:
            return times if times.requests == expected else None
        await asyncio.sleep(0.1)  # vLLM records a request as its output is processed
    return None


def save_measurements(path: Path, meta: dict[str, object], records: list[CellRecord]) -> None:
    data = {**meta, "cells": [cell_to_json(r) for r in records]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)
