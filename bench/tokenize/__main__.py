"""`python -m bench tokenize [--reps N] [--out DIR]`: the table and tokenize.json (see
`bench.tokenize`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from tokenizers import Tokenizer

from bench.tokenize.model import chat, corpus, write_model
from gateway.http.client import ClientLimits, UpstreamClient
from gateway.inference_request import InferenceRequest
from gateway.tokens.engine import EngineTokenizer
from gateway.tokens.local import load_local_tokenizer
from gateway.tokens.protocol import PromptTokenizer
from gateway.tokens.transport import HttpxPoster, JsonPoster, UpstreamPoster
from routing.percentile import percentile
from sim.live.processes import start_emulator

MODEL = "bench-tokenize"
Prompts = list[list[dict[str, Any]]]


def _request(messages: list[dict[str, Any]]) -> InferenceRequest:
    size = len(orjson.dumps({"model": MODEL, "messages": messages}))
    return InferenceRequest("chat", MODEL, False, None, size, messages)


async def _timed(
    tokenizer: PromptTokenizer, prompts: Prompts
) -> tuple[list[float], list[float], list[list[int] | None]]:
    """Per call: wall µs, and µs of CPU the event loop's thread spent in it (what the loop
    cannot spend on other requests: all of it inline, the hop only when offloaded); and the
    ids. CPU time is immune to the other processes sharing the machine; wall time is not."""
    walls, cpus, ids = [], [], []
    for messages in prompts:
        req = _request(messages)
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        ids.append(await tokenizer.token_ids(req))
        walls.append((time.perf_counter_ns() - wall) / 1000)
        cpus.append((time.thread_time_ns() - cpu) / 1000)
        await asyncio.sleep(0)  # other tasks run between calls, as other requests would
    return walls, cpus, ids


def _row(
    name: str, tokens: int, state: str, walls: list[float], cpus: list[float]
) -> dict[str, Any]:
    return {
        "tokenizer": name,
        "prompt_tokens": tokens,
        "state": state,
        "calls": len(walls),
        "median_us": percentile(walls, 50),
        "p90_us": percentile(walls, 90),
        "p99_us": percentile(walls, 99),
        "loop_cpu_median_us": percentile(cpus, 50),
    }


async def _local_rows(
    model_dir: Path, fresh: dict[int, Prompts], reps: int
) -> tuple[list[dict[str, Any]], dict[int, list[list[int] | None]]]:
    inline = load_local_tokenizer(str(model_dir), offload_bytes=1 << 40)
    thread = load_local_tokenizer(str(model_dir), offload_bytes=0)
    rows, ids_by_size = [], {}
    for tokens, prompts in fresh.items():
        for name, tokenizer in (("local inline", inline), ("local thread", thread)):
            await _timed(tokenizer, prompts[:3])  # warm-up
            walls, cpus, ids = await _timed(tokenizer, prompts)
            rows.append(_row(name, tokens, "fresh text", walls, cpus))
            ids_by_size[tokens] = ids
            walls, cpus, _ = await _timed(tokenizer, [prompts[0]] * reps)
            rows.append(_row(name, tokens, "same prompt", walls, cpus))
    return rows, ids_by_size


async def _engine_rows(
    url: str, fresh: dict[int, Prompts], reps: int, expected: dict[int, list[list[int] | None]]
) -> tuple[list[dict[str, Any]], bool]:
    client = UpstreamClient(ClientLimits(read_timeout=30.0))
    posters: list[tuple[str, JsonPoster]] = [
        ("engine gateway-client", UpstreamPoster(client)),
        ("engine httpx", HttpxPoster(httpx.AsyncClient())),
    ]
    rows, agree = [], True
    try:
        for name, poster in posters:
            for tokens, prompts in fresh.items():
                engine = EngineTokenizer(lambda model: url, poster, len(prompts), timeout_s=30.0)
                await _timed(engine, prompts[-3:])  # warm-up (connections), then evicted
                engine = EngineTokenizer(lambda model: url, poster, len(prompts), timeout_s=30.0)
                walls, cpus, ids = await _timed(engine, prompts)
                agree = agree and ids == expected[tokens] and engine.counters.errors == 0
                rows.append(_row(name, tokens, "cold (miss)", walls, cpus))
                walls, cpus, _ = await _timed(engine, [prompts[0]] * reps)
                rows.append(_row(name, tokens, "warm (hit)", walls, cpus))
    finally:
        await client.aclose()
        for _, poster in posters:
            if isinstance(poster, HttpxPoster):
                await poster.aclose()
    return rows, agree


def _print_table(rows: list[dict[str, Any]]) -> None:
    head = f"{'tokenizer':<22}{'tokens':>7}  {'state':<12}{'p50 µs':>9}{'p90 µs':>9}"
    print(head + f"{'p99 µs':>9}{'loop CPU µs':>13}")
    for r in rows:
        print(
            f"{r['tokenizer']:<22}{r['prompt_tokens']:>7}  {r['state']:<12}{r['median_us']:>9.0f}"
            f"{r['p90_us']:>9.0f}{r['p99_us']:>9.0f}{r['loop_cpu_median_us']:>13.0f}"
        )


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench tokenize", description=__doc__)
    p.add_argument("--reps", type=int, default=100, help="calls per row (default 100)")
    p.add_argument("--sizes", default="1000,8000", help="chat prompt sizes in tokens")
    p.add_argument("--sweep", default="128,512,2000,4000", help="local-only sizes (offload)")
    p.add_argument("--vocab", type=int, default=32000, help="BPE vocabulary size")
    p.add_argument("--out", type=Path, default=Path("out/bench/tokenize"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    text = corpus()
    start = time.perf_counter()
    model_dir = write_model(args.out / "model", text, args.vocab)
    train_s = time.perf_counter() - start
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    rng = random.Random(16)
    sizes = [int(s) for s in args.sizes.split(",")]
    sweep = [int(s) for s in args.sweep.split(",") if s]
    prompts = {n: [chat(tok, text, n, rng) for _ in range(args.reps)] for n in sizes}
    swept = {n: [chat(tok, text, n, rng) for _ in range(args.reps)] for n in sweep}
    local, ids = asyncio.run(_local_rows(model_dir, prompts, args.reps))
    sweep_rows, _ = asyncio.run(_local_rows(model_dir, swept, args.reps))
    extra = ["--tokenizer", str(model_dir / "tokenizer.json"), "--max-model-len", "65536"]
    child, urls = start_emulator(1, "demo", MODEL, args.out / "emulator.log", extra=extra)
    try:
        engine, agree = asyncio.run(_engine_rows(urls[0], prompts, args.reps, ids))
    finally:
        child.stop()
    rows = local + engine
    measured = {n: len(i[0] or []) for n, i in ids.items()}
    _print_table(rows)
    print("\noffload sweep (local, fresh text):")
    _print_table([r for r in sweep_rows if r["state"] == "fresh text"])
    print(f"\nlocal and engine ids agree: {agree}; prompt tokens measured: {measured}")
    result = {
        "vocab_size": tok.get_vocab_size(),
        "train_s": round(train_s, 2),
        "ids_agree": agree,
        "prompt_tokens": measured,
        "rows": rows,
        "offload_sweep": sweep_rows,
    }
    (args.out / "tokenize.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {args.out / 'tokenize.json'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
