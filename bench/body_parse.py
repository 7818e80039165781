"""How long a large request body holds the gateway's event loop while it is parsed.

`python -m bench body-parse [--out out/bench/body-parse]` parses bodies of 16 MiB less a
margin (under the default `server.max_body_bytes`) of several shapes — tiny chat messages,
token ids, short strings, one long string, nested empty arrays — two ways, each while a task
on the same loop ticks every millisecond: `inline` (orjson on the loop, as bodies up to
`gateway.large_body.OFF_LOOP_BYTES` are) and `body-parser` (`BodyParser.parse`: a worker
thread with the GIL-yielding decoder). Reports the parse's wall time and the ticker's longest
gap (the loop's stall); writes `body_parse.json` to `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from gateway.inference_request import parse_inference_body
from gateway.large_body import BodyParser

BUDGET = 16 * 1024 * 1024 - 64 * 1024


def _fill(item: Any, per_item: int) -> list[Any]:
    return [item] * (BUDGET // per_item)


SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "tiny-messages": ("chat", {"messages": _fill({"role": "user", "content": ""}, 30)}),
    "token-ids": ("completions", {"prompt": list(range(100000, 100000 + BUDGET // 7))}),
    "short-strings": ("completions", {"prompt": _fill("ab", 5)}),
    "one-string": ("completions", {"prompt": "x" * (BUDGET - 100)}),
    "nested-arrays": ("chat", {"messages": _fill({"role": "user", "content": [[[]]]}, 34)}),
}


async def _measure(parse: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    start = time.perf_counter()
    await parse()
    wall = time.perf_counter() - start
    await asyncio.sleep(0.005)
    stop.set()
    await ticker
    return {"parse_ms": round(wall * 1000, 1), "max_stall_ms": round(max(gaps) * 1000, 1)}


async def _run(repeats: int, echo: Callable[[str], None]) -> dict[str, Any]:
    parser = BodyParser()
    out: dict[str, Any] = {}
    echo(f"{'shape':15s} {'MiB':>5s}  {'inline':>22s}  {'body-parser':>22s}")
    for name, (api, fields) in SHAPES.items():
        body = orjson.dumps({"model": "m", **fields})

        async def inline(body: bytes = body, api: str = api) -> Any:
            return parse_inference_body(api, body)

        async def offloaded(body: bytes = body, api: str = api) -> Any:
            return await parser.parse(api, body)

        row: dict[str, Any] = {"mib": round(len(body) / 2**20, 2)}
        for way, parse in (("inline", inline), ("body-parser", offloaded)):
            runs = []
            for _ in range(repeats):
                gc.collect()
                runs.append(await _measure(parse))
            row[way] = max(runs, key=lambda r: r["max_stall_ms"])  # the worst of the runs
        out[name] = row
        cells = [
            f"{row[w]['parse_ms']:6.0f} ms, stall {row[w]['max_stall_ms']:4.0f}"
            for w in ("inline", "body-parser")
        ]
        echo(f"{name:15s} {row['mib']:5.1f}  {cells[0]:>22s}  {cells[1]:>22s}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench body-parse", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/bench/body-parse"))
    parser.add_argument("--repeats", type=int, default=3, help="runs per shape and way")
    args = parser.parse_args(argv)
    result = asyncio.run(_run(args.repeats, lambda line: print(line, flush=True)))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "body_parse.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}/body_parse.json")


if __name__ == "__main__":
    main()
