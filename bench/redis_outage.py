"""A Redis outage in the middle of a live run: the shared-state redis-server killed, started
again on the same port, and the replicas' hit rate before, during and after.

`RedisOutage.during(redis, url, replicas)` (entered when the workload starts) runs a thread
that scrapes the replicas' prefix-cache counters every `scrape_s`, SIGKILLs the redis-server
`at_s` seconds in (a crash, as its clients see it), and starts a fresh one on the same port
(empty, no persistence) `for_s` seconds later. On exit it stops the restarted server and
leaves the figures in `result`: the windows' hit rates (hit tokens ÷ looked-up tokens over
the window, all replicas summed), the tokens each window looked up, and when the server was
down and back (seconds from the start).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sim.live.processes import ChildProcess, start_redis
from sim.live.scrape import ReplicaReport, parse_vllm_metrics, summed


@dataclass(slots=True)
class RedisOutage:
    """When to kill the shared-state Redis, and for how long (seconds into the run)."""

    at_s: float
    for_s: float
    scrape_s: float = 0.5
    result: dict[str, Any] = field(default_factory=dict)

    @contextlib.contextmanager
    def during(
        self, redis: ChildProcess, url: str, replicas: Sequence[str], log_dir: Path
    ) -> Iterator[None]:
        stop = threading.Event()
        samples: list[tuple[float, ReplicaReport]] = []
        restarted: list[ChildProcess] = []
        marks: dict[str, float] = {}
        t0 = time.monotonic()
        port = int(url.rsplit(":", 1)[1].split("/", 1)[0])

        def run() -> None:
            with httpx.Client(timeout=5) as client:
                while not stop.is_set():
                    now = time.monotonic() - t0
                    if "down_s" not in marks and now >= self.at_s:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(redis.pid, signal.SIGKILL)
                        marks["down_s"] = now
                    if (
                        "down_s" in marks
                        and "back_s" not in marks
                        and now >= self.at_s + self.for_s
                    ):
                        log = log_dir / "redis-restarted.log"
                        restarted.append(start_redis(log, port=port)[0])
                        marks["back_s"] = time.monotonic() - t0
                    reports = [
                        parse_vllm_metrics(u, client.get(u + "/metrics").text) for u in replicas
                    ]
                    samples.append((time.monotonic() - t0, summed(reports)))
                    stop.wait(self.scrape_s)

        thread = threading.Thread(target=run, name="redis-outage", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=10)
            for proc in restarted:
                proc.stop()
            self.result = _windows(samples, marks)


def _windows(samples: list[tuple[float, ReplicaReport]], marks: dict[str, float]) -> dict[str, Any]:
    """Hit rate over [start, down), [down, back), [back, end] from the scraped counters."""
    down, back = marks.get("down_s"), marks.get("back_s")
    out: dict[str, Any] = {"down_s": down, "back_s": back, "samples": len(samples)}
    if not samples or down is None or back is None:
        return out
    edges = {"before": (0.0, down), "during": (down, back), "after": (back, float("inf"))}
    for name, (lo, hi) in edges.items():
        inside = [r for t, r in samples if lo <= t < hi]
        first = next((r for t, r in reversed(samples) if t < lo), samples[0][1])
        if not inside:
            continue
        grown = inside[-1].since(first)
        out[name] = {
            "hit_rate": grown.hit_rate,
            "looked_up_tokens": grown.prefix_queries,
            "requests": grown.requests,
        }
    return out
