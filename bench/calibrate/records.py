"""Raw measurements (what `measurements.json` holds) and the per-request figures derived from them.

A request's stream is recorded as chunks: (seconds since the request was sent, completion tokens
so far). The server may fold several tokens into one chunk when its output side falls behind,
so inter-token figures are computed per token, not per chunk.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bench.calibrate.grid import Cell


@dataclass(frozen=True, slots=True)
class RequestRecord:
    index: int  # position in the burst the client sent
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    sent_s: float  # when the request was sent, seconds after the burst started
    chunks: tuple[tuple[float, int], ...]  # (seconds after sent_s, completion tokens so far)

    @property
    def ttft_s(self) -> float:
        return self.chunks[0][0]

    @property
    def mean_itl_s(self) -> float | None:
        """(last token time − first token time) / (tokens − 1)."""
        (t0, n0), (t1, n1) = self.chunks[0], self.chunks[-1]
        return (t1 - t0) / (n1 - n0) if n1 > n0 else None

    @property
    def median_gap_s(self) -> float | None:
        """Median time per token between chunks (a chunk of k tokens counts k gaps of 1/k)."""
        gaps: list[float] = []
        for (ta, na), (tb, nb) in zip(self.chunks, self.chunks[1:], strict=False):
            if nb > na:
                gaps.extend([(tb - ta) / (nb - na)] * (nb - na))
        return statistics.median(gaps) if gaps else None


@dataclass(frozen=True, slots=True)
class ServerTimes:
    """The burst's requests as vLLM's own histograms saw them (differences of _sum/_count).

    ITL, queue and prefill intervals use engine-core timestamps: queue + prefill runs from the
    engine receiving a request to the step that emitted its first token.
    """

    requests: int
    inter_token_sum_s: float
    inter_token_count: int
    queue_sum_s: float
    prefill_sum_s: float
    ttft_sum_s: float  # the API server's own TTFT (from its arrival time)

    @property
    def mean_itl_s(self) -> float | None:
        return self.inter_token_sum_s / self.inter_token_count if self.inter_token_count else None

    @property
    def mean_engine_ttft_s(self) -> float | None:
        return (self.queue_sum_s + self.prefill_sum_s) / self.requests if self.requests else None

    @classmethod
    def between(cls, before: dict[str, float], after: dict[str, float]) -> ServerTimes:
        def d(key: str) -> float:
            return after.get(key, 0.0) - before.get(key, 0.0)

        return cls(
            requests=round(d("request_prefill_time_seconds_count")),
            inter_token_sum_s=d("inter_token_latency_seconds_sum"),
            inter_token_count=round(d("inter_token_latency_seconds_count")),
            queue_sum_s=d("request_queue_time_seconds_sum"),
            prefill_sum_s=d("request_prefill_time_seconds_sum"),
            ttft_sum_s=d("time_to_first_token_seconds_sum"),
        )


# A stream that spans less than this fraction of (tokens − 1) × vLLM's own mean inter-token
# latency arrived in one piece (see `Repetition.stalled`).
STALL_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class Repetition:
    requests: tuple[RequestRecord, ...]
    warmup_cached_tokens: tuple[int, ...] = ()
    server: ServerTimes | None = None

    @property
    def stalled(self) -> bool:
        """Some stream of the burst reached the client in one piece, long after vLLM made its
        tokens: its last token came less than STALL_FRACTION × (tokens − 1) × vLLM's own mean
        inter-token latency after its first (32 tokens 1.5 ms apart, all within 1 ms).

        On a machine with two busy cores the client or vLLM's API server is then held off
        the CPU while the engine runs (vLLM's engine core busy-waits for its worker), and the
        TTFT it records is that wait, not the server's latency. Judged from the stream's
        shape against the server's own figures only, never from a prediction."""
        itl = self.server.mean_itl_s if self.server is not None else None
        if not itl:
            return False
        for r in self.requests:
            (t0, n0), (t1, n1) = r.chunks[0], r.chunks[-1]
            if n1 - n0 >= 2 and t1 - t0 < STALL_FRACTION * (n1 - n0) * itl:
                return True
        return False


@dataclass(frozen=True, slots=True)
class CellRecord:
    cell: Cell
    repetitions: tuple[Repetition, ...]

    def requests(self) -> list[RequestRecord]:
        return [r for rep in self.repetitions for r in rep.requests]

    def without_stalls(self) -> CellRecord:
        """The repetitions that did not stall (see `Repetition.stalled`)."""
        return CellRecord(self.cell, tuple(r for r in self.repetitions if not r.stalled))


def cell_to_json(rec: CellRecord) -> dict[str, Any]:
    return {
        "cell": asdict(rec.cell),
        "key": rec.cell.key,
        "repetitions": [
            {
                "warmup_cached_tokens": list(rep.warmup_cached_tokens),
                "server": asdict(rep.server) if rep.server else None,
                "requests": [
                    {**asdict(r), "chunks": [list(c) for c in r.chunks]} for r in rep.requests
                ],
            }
            for rep in rec.repetitions
        ],
    }


def cell_from_json(data: dict[str, Any]) -> CellRecord:
    reps = tuple(
        Repetition(
            requests=tuple(
                RequestRecord(
                    index=int(r["index"]),
                    prompt_tokens=int(r["prompt_tokens"]),
                    cached_tokens=int(r["cached_tokens"]),
                    completion_tokens=int(r["completion_tokens"]),
                    sent_s=float(r["sent_s"]),
                    chunks=tuple((float(t), int(n)) for t, n in r["chunks"]),
                )
                for r in rep["requests"]
            ),
            warmup_cached_tokens=tuple(int(v) for v in rep.get("warmup_cached_tokens", ())),
            server=ServerTimes(**rep["server"]) if rep.get("server") else None,
        )
        for rep in data["repetitions"]
    )
    c = data["cell"]
    cell = Cell(
        prompt_len=int(c["prompt_len"]),
        hit_fraction=float(c["hit_fraction"]),
        concurrency=int(c["concurrency"]),
        output_len=int(c["output_len"]),
    )
    return CellRecord(cell=cell, repetitions=reps)
