"""`python -m bench.tune.reading RECORDING`: what reading the recording costs the tuner per
evaluation, a full read (`load_recorded`, as before) against the incremental one
(`RecordingTail`), on a recording grown long.

The recording is written `--copies` times into a fresh file, each copy a segment of its own
(a header placed after the previous copy, as a restarted gateway writes it); the last copy is
appended `--interval` seconds of arrivals at a time, and after each append both readers take
the last `--window` seconds, which must be the same requests. Then one evaluation's replays
(`assess`, with the config's `tuning:` and the named engine profile) on the last window, which
both ways share. Prints CPU seconds per evaluation: read, replays, and their sum.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import orjson

from routing.config.schema import load_config
from routing.traces.recorded import HEADER_KEY, load_recorded
from sim.replay.settings import SimSettings
from sim.replay.settings import load_config as sim_config
from sim.replay.sweep.runners import LocalRunner
from sim.tune.candidates import Candidate, candidate_set, named
from sim.tune.evaluate import FleetShape, window
from sim.tune.proposal import assess
from sim.tune.recording import RecordingTail


def _grown(source: Path, copies: int, out: Path) -> tuple[list[tuple[float, bytes]], float]:
    """All but the last copy written to `out`; the last copy's (t, line) to append, and the
    span of one copy."""
    lines = source.read_bytes().splitlines(keepends=True)
    header = orjson.loads(lines[0])
    rows = [(float(orjson.loads(line)["t"]), line) for line in lines[1:] if line.strip()]
    rows = [r for r in rows if HEADER_KEY not in orjson.loads(r[1])]
    span = max(t for t, _ in rows) + 1.0
    started = datetime.fromisoformat(header["started_at"])
    with out.open("wb") as f:
        for c in range(copies):
            moved = {**header, "started_at": (started + timedelta(seconds=c * span)).isoformat()}
            f.write(orjson.dumps(moved) + b"\n")
            if c < copies - 1:
                f.writelines(line for _, line in rows)
    return sorted(rows, key=lambda r: r[0]), span


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tune.reading", description=__doc__)
    p.add_argument("recording", type=Path)
    p.add_argument("--config", type=Path, required=True, help="a config with tuning:")
    p.add_argument("--copies", type=int, default=50)
    p.add_argument("--replicas", type=int, default=4)
    a = p.parse_args(argv)
    config = load_config(a.config)
    tuning = config.tuning
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grown.jsonl"
        last, span = _grown(a.recording, a.copies, path)
        tail = RecordingTail(path, tuning.window_s)
        tail.read()  # the tuner's first read is a full one
        full_s, tail_s, windows = [], [], []
        for end in range(1, int(span / tuning.interval_s) + 1):
            with path.open("ab") as f:
                cut = end * tuning.interval_s
                f.writelines(line for t, line in last if cut - tuning.interval_s < t <= cut)
            t0 = time.process_time()
            trace = load_recorded(path)
            old = window(trace, trace[-1].arrival_s, tuning.window_s)
            t1 = time.process_time()
            recent = tail.read()
            new = window(recent, recent[-1].arrival_s, tuning.window_s)
            t2 = time.process_time()
            assert old == new, f"the windows differ at {cut:g} s"
            full_s.append(t1 - t0)
            tail_s.append(t2 - t1)
            windows.append(new)
        requests = len(trace)
    base = SimSettings(**sim_config(str(a.config)))
    shape = FleetShape.of(a.replicas, tuning.engine_profile)
    home = config.routing.policy
    others = named(config.routing, list(dict.fromkeys([home, *tuning.candidates])))
    live = Candidate(home, others[0].profile, "live")
    candidates = candidate_set(live, others, tuning.search, seed=1)
    recent = max(windows, key=len)
    t0 = time.process_time()
    assess(recent, candidates, shape, base, tuning, runner=LocalRunner(1))
    replays = time.process_time() - t0
    full, inc = statistics.fmean(full_s), statistics.fmean(tail_s)
    print(
        f"{requests:,} requests in the recording ({a.copies} segments), {len(full_s)} "
        f"evaluations, windows identical; per evaluation, CPU s: full read {full:.3f}, "
        f"incremental read {inc:.4f}; replays of the largest window ({len(recent)} requests, "
        f"{len(candidates)} candidates, {tuning.seeds} seeds) {replays:.2f}; total "
        f"{full + replays:.2f} before, {inc + replays:.2f} after"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
