"""Flow control and model rewrites through Envoy + `kvgate epp`, on emulated replicas.

`python -m bench epp-flow [--replicas 2] [--cap 4] [--speedup 4] [--out out/bench/epp-flow]`.
Burst: the critical objective's (priority 1) TTFT alone, then while `--factor` times the
fleet's admission places of sheddable clients (priority -1) send back to back; their answers
by status and dropped reason, and the critical TTFT against the unloaded one.
Split: `--split` requests for a model under a 50/50 InferenceModelRewrite; each target's share
(the picker's request counts by model) and whether every answer named the model asked.
`--no-admission` gives the baseline. Writes `flow.json` to `--out` and prints the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from routing.percentile import percentile
from sim.live.envoy import Epp, start_envoy, start_epp
from sim.live.processes import start_emulator

BASE_MODEL = "kvgate-demo"
SPLIT_MODEL = "food"
TARGETS = ("food-v1", "food-v2")
CRITICAL = {"x-llm-d-inference-objective": "critical"}
SHEDDABLE = {"x-gateway-inference-objective": "batch"}  # the old header name works too
DROPPED = "x-llm-d-request-dropped-reason"


def config_text(
    cap: int, max_queue: int, queue_timeout_s: float, admission: bool = True, holdback: float = 0.2
) -> str:
    """The EPP's config: admission places, the two objectives and the 50/50 rewrite."""
    return f"""\
server: {{access_log: false}}
admission:
  enabled: {str(admission).lower()}
  sheddable_holdback: {holdback}
  max_in_flight_per_backend: {cap}
  max_queue: {max_queue}
  queue_timeout_s: {queue_timeout_s}
objectives:
  - {{name: critical, priority: 1}}
  - {{name: batch, priority: -1}}
rewrites:
  - models: [{SPLIT_MODEL}]
    targets:
      - {{model: {TARGETS[0]}, weight: 50}}
      - {{model: {TARGETS[1]}, weight: 50}}
"""


@dataclass(frozen=True, slots=True)
class Stack:
    """The replicas' URLs, the running picker and Envoy's listener."""

    urls: list[str]
    epp: Epp
    base: str


@contextlib.contextmanager
def start_stack(
    logs: Path,
    *,
    replicas: int,
    cap: int,
    speedup: float,
    max_queue: int,
    queue_timeout_s: float,
    admission: bool = True,
    holdback: float = 0.2,
) -> Iterator[Stack]:
    """Emulated replicas serving the base model and both targets (LoRA adapters), the EPP
    with `config_text`, and Envoy in front (FULL_DUPLEX_STREAMED)."""
    extra = ["--lora", *TARGETS, "--max-loras", str(len(TARGETS))]
    emulator, urls = start_emulator(
        replicas, "demo", BASE_MODEL, logs / "emulate.log", speedup=speedup, extra=extra
    )
    with emulator:
        config = logs / "kvgate.yaml"
        config.write_text(config_text(cap, max_queue, queue_timeout_s, admission, holdback))
        epp = start_epp(urls, logs / "epp.log", config)
        with epp.proc:
            envoy, base, _ = start_envoy(urls, epp.grpc_port, logs / "envoy.log")
            with envoy:
                yield Stack(urls, epp, base)


@dataclass(frozen=True, slots=True)
class Answer:
    """One request as the client saw it."""

    status: int
    ttft_s: float | None  # to the first streamed event
    dropped: str | None = None  # the dropped-reason header
    retry_after: str | None = None
    models: tuple[str, ...] = ()  # the `model` of every event (or of the whole answer)


def chat(prompt: str, model: str = BASE_MODEL, max_tokens: int = 8) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
    }


def prompts(seed: int, n: int, words: int = 150) -> list[str]:
    """`n` distinct prompts of `words` words (no prefix shared: no cache hit helps one)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    return [f"{i} " + " ".join(rng.choices(vocab, k=words)) for i in range(n)]


async def send(
    client: httpx.AsyncClient, body: dict[str, object], headers: dict[str, str]
) -> Answer:
    """One chat completion, a streamed one timed to its first event."""
    started = time.perf_counter()
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200 or not body.get("stream"):
            data = await r.aread()
            if r.status_code == 200:
                return Answer(200, None, models=(orjson.loads(data).get("model"),))
            return Answer(r.status_code, None, r.headers.get(DROPPED), r.headers.get("retry-after"))
        ttft, models = None, []
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ttft = ttft if ttft is not None else time.perf_counter() - started
            models.append(orjson.loads(line[6:]).get("model"))
        return Answer(200, ttft, models=tuple(models))


@dataclass
class BurstFigures:
    """Part 1's figures."""

    places: int
    burst: int
    unloaded_ttft_s: list[float] = field(default_factory=list)
    loaded_ttft_s: list[float] = field(default_factory=list)
    critical_statuses: dict[str, int] = field(default_factory=dict)
    sheddable_outcomes: dict[str, int] = field(default_factory=dict)  # "200", "429 <reason>"
    sheddable_without_retry_after: int = 0

    def summary(self) -> dict[str, float]:
        alone, loaded = self.unloaded_ttft_s, self.loaded_ttft_s
        out = {
            "unloaded_p50_ms": 1000 * percentile(alone, 50),
            "unloaded_p90_ms": 1000 * percentile(alone, 90),
            "loaded_p50_ms": 1000 * percentile(loaded, 50),
            "loaded_p90_ms": 1000 * percentile(loaded, 90),
        }
        out["ratio_p50"] = out["loaded_p50_ms"] / out["unloaded_p50_ms"]
        out["ratio_p90"] = out["loaded_p90_ms"] / out["unloaded_p90_ms"]
        return out


async def _sheddable_load(
    base: str,
    clients: int,
    seed: int,
    max_tokens: int,
    *,
    stop: Callable[[], bool],
    started: Callable[[], None],
) -> tuple[Counter[str], int]:
    """`clients` sheddable clients sending back to back (a shed one waits its Retry-After, at
    most 1 s) until `stop()`: their answers by status and dropped reason, and how many 429s
    came without a Retry-After. `started()` once half the clients' first answers are in."""
    texts = iter(prompts(seed, 100_000))
    outcomes: Counter[str] = Counter()
    missing = 0
    limits = httpx.Limits(max_connections=2 * clients, max_keepalive_connections=clients)

    async def one(client: httpx.AsyncClient) -> None:
        nonlocal missing
        while not stop():
            body = {**chat(next(texts), max_tokens=max_tokens), "stream": False}
            answer = await send(client, body, SHEDDABLE)
            outcomes[f"{answer.status} {answer.dropped or ''}".strip()] += 1
            if outcomes.total() == clients // 2:
                started()
            if answer.status == 429:
                missing += not answer.retry_after
                await asyncio.sleep(min(1.0, float(answer.retry_after or 1)))

    async with httpx.AsyncClient(base_url=base, timeout=120.0, limits=limits) as client:
        await asyncio.gather(*(one(client) for _ in range(clients)))
    return outcomes, missing


def _load_process(
    base: str, clients: int, seed: int, max_tokens: int, *, started: Any, stop: Any, out: Any
) -> None:
    """`_sheddable_load` in a process of its own (the critical client's timing is not
    disturbed by its work); its figures put on `out`."""
    load = _sheddable_load(base, clients, seed, max_tokens, stop=stop.is_set, started=started.set)
    outcomes, missing = asyncio.run(load)
    out.put((dict(outcomes), missing))


async def run_burst(
    base: str,
    places: int,
    *,
    factor: int = 10,
    criticals: int = 20,
    seed: int = 0,
    max_tokens: int = 64,
) -> BurstFigures:
    """Critical requests one after another alone, then again while `factor × places`
    sheddable clients send back to back (`_sheddable_load`, in another process), from half a
    second after half of them had their first answer until the last critical request ends."""
    texts = iter(prompts(seed + 1, 2 * criticals + 1))
    figures = BurstFigures(places, factor * places)
    ctx = multiprocessing.get_context("spawn")
    started, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    async with httpx.AsyncClient(base_url=base, timeout=120.0) as client:
        await send(client, chat(next(texts)), CRITICAL)  # warm up
        for _ in range(criticals):
            answer = await send(client, chat(next(texts)), CRITICAL)
            assert answer.ttft_s is not None, answer
            figures.unloaded_ttft_s.append(answer.ttft_s)
        load = ctx.Process(
            target=_load_process,
            args=(base, figures.burst, seed, max_tokens),
            kwargs={"started": started, "stop": stop, "out": out},
        )
        load.start()
        try:
            if not await asyncio.to_thread(started.wait, 60.0):
                raise RuntimeError("the sheddable load did not start")
            await asyncio.sleep(0.5)  # the burst is in: places taken, the rest queued or shed
            statuses: Counter[str] = Counter()
            for _ in range(criticals):
                answer = await send(client, chat(next(texts)), CRITICAL)
                statuses[str(answer.status)] += 1
                if answer.ttft_s is not None:
                    figures.loaded_ttft_s.append(answer.ttft_s)
            stop.set()
            outcomes, figures.sheddable_without_retry_after = await asyncio.to_thread(
                out.get, timeout=120.0
            )
        finally:
            stop.set()
            await asyncio.to_thread(load.join, 30.0)
    figures.critical_statuses = dict(statuses)
    figures.sheddable_outcomes = outcomes
    return figures


@dataclass
class SplitFigures:
    """Part 2's figures."""

    requests: int
    by_target: dict[str, float] = field(default_factory=dict)  # the picker's counts
    statuses: dict[str, int] = field(default_factory=dict)
    models_answered: dict[str, int] = field(default_factory=dict)  # answers naming each model

    def shares(self) -> dict[str, float]:
        total = sum(self.by_target.values()) or 1.0
        return {m: n / total for m, n in self.by_target.items()}


async def run_split(base: str, epp: Epp, requests: int = 400, clients: int = 16) -> SplitFigures:
    """`requests` for `SPLIT_MODEL`, half streamed, through `clients` concurrent clients."""
    before = {m: epp.metric("kvgate_requests_total", model=m) for m in TARGETS}
    figures = SplitFigures(requests)
    statuses: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    turns = iter(range(requests))

    async def client_loop(client: httpx.AsyncClient) -> None:
        for i in turns:
            body = chat(f"split {i}", model=SPLIT_MODEL, max_tokens=4)
            answer = await send(client, {**body, "stream": bool(i % 2)}, {})
            statuses[str(answer.status)] += 1
            answered.update({",".join(sorted(set(answer.models))) or "none"})

    async with httpx.AsyncClient(base_url=base, timeout=60.0) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    figures.by_target = {
        m: epp.metric("kvgate_requests_total", model=m) - before[m] for m in TARGETS
    }
    figures.statuses, figures.models_answered = dict(statuses), dict(answered)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench epp-flow", description=__doc__.splitlines()[0]
    )
    p.add_argument("--replicas", type=int, default=2, help="emulated replicas (default 2)")
    p.add_argument("--cap", type=int, default=4, help="admitted requests per replica (4)")
    p.add_argument("--speedup", type=float, default=4.0, help="emulator speedup (default 4)")
    p.add_argument("--factor", type=int, default=10, help="burst size / places (default 10)")
    p.add_argument("--criticals", type=int, default=40, help="critical samples each way (40)")
    p.add_argument("--max-queue", type=int, default=16, help="admission.max_queue (16)")
    p.add_argument("--queue-timeout", type=float, default=5.0, help="queue_timeout_s (5)")
    p.add_argument("--holdback", type=float, default=0.2, help="sheddable_holdback (0.2)")
    p.add_argument("--split", type=int, default=400, help="requests of the split (400)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-admission", action="store_true", help="admission off: the burst's baseline"
    )
    p.add_argument("--out", default="out/bench/epp-flow", help="output directory")
    a = p.parse_args(argv)
    out = Path(a.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with start_stack(
        logs, replicas=a.replicas, cap=a.cap, speedup=a.speedup, max_queue=a.max_queue,
        queue_timeout_s=a.queue_timeout, admission=not a.no_admission, holdback=a.holdback,
    ) as stack:  # fmt: skip
        places = a.replicas * a.cap
        burst = asyncio.run(
            run_burst(stack.base, places, factor=a.factor, criticals=a.criticals, seed=a.seed)
        )
        split = asyncio.run(run_split(stack.base, stack.epp, a.split))
    report = {
        "settings": {k: v for k, v in vars(a).items() if k != "out"},
        "burst": {**asdict(burst), "summary": burst.summary()},
        "split": {**asdict(split), "shares": split.shares()},
    }
    (out / "flow.json").write_text(json.dumps(report, indent=2) + "\n")
    summary = burst.summary()
    print(f"burst of {burst.burst} sheddable over {places} places: {burst.sheddable_outcomes}")
    print(f"critical: {burst.critical_statuses}")
    print(
        f"critical TTFT p50 {summary['unloaded_p50_ms']:.1f} -> {summary['loaded_p50_ms']:.1f} ms"
        f" ({summary['ratio_p50']:.2f}x), p90 {summary['unloaded_p90_ms']:.1f} -> "
        f"{summary['loaded_p90_ms']:.1f} ms ({summary['ratio_p90']:.2f}x)"
    )
    shares = ", ".join(f"{m} {s:.1%}" for m, s in split.shares().items())
    print(f"split of {split.requests}: {shares}; answers named {split.models_answered}")
    print(f"written {out / 'flow.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
