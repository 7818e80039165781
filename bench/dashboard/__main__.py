"""The Grafana dashboard's panels, rendered from a real run's metrics (no Grafana needed).

`python -m bench dashboard [--out out/dashboard]` (~2 minutes): emulated vLLM replicas and
`kvgate serve` under multi-tenant chats with a mid-run surge (`live.py`); the gateway's and
the replicas' `/metrics` scraped every second; each panel's PromQL of
`deploy/grafana/kvgate-dashboard.json` evaluated over the scrapes (`promql.py`, the subset
the dashboard uses); the panels drawn where the dashboard puts them (`panels.py`). Writes
`dashboard.png` and `dashboard.json` (every panel's series, the settings, the client's
counts) to `--out`; `--copy-to` also copies the PNG (the docs' is docs/img/dashboard-DATE.png).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench import REPO_ROOT
from bench.dashboard.live import LiveSettings, run_live
from bench.dashboard.panels import draw, panel_series

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "kvgate-dashboard.json"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench dashboard", description=__doc__.splitlines()[0]
    )
    p.add_argument("--replicas", type=int, default=3, help="emulated replicas (default 3)")
    p.add_argument("--conversations", type=int, default=120, help="chats (default 120)")
    p.add_argument("--rate", type=float, default=1.5, help="chats started/s (default 1.5)")
    p.add_argument("--surge", type=int, default=60, help="chats started at once mid-run (60)")
    p.add_argument("--policy", default="prefix-aware", help="the gateway's policy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scrape", type=float, default=1.0, help="seconds between scrapes (1)")
    p.add_argument("--step", type=float, default=2.0, help="seconds between points (2)")
    p.add_argument("--rate-interval", type=int, default=15, help="$__rate_interval, s (15)")
    p.add_argument("--out", type=Path, default=Path("out/dashboard"))
    p.add_argument("--copy-to", type=Path, default=None, help="also copy the PNG here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    a = _parse(argv)
    settings = LiveSettings(
        replicas=a.replicas,
        conversations=a.conversations,
        rate=a.rate,
        surge=a.surge,
        seed=a.seed,
        scrape_s=a.scrape,
        policy=a.policy,
    )
    logs = a.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    wall = time.monotonic()
    print(f"dashboard bench: logs in {logs}", file=sys.stderr)
    run = asyncio.run(run_live(settings, logs))
    dashboard = json.loads(DASHBOARD.read_text())
    steps = int((run.ended - run.started) / a.step) + 1
    times = [run.started + i * a.step for i in range(steps)]
    series = panel_series(dashboard, run.store, times, a.rate_interval)
    png = a.out / "dashboard.png"
    title = (
        f"kvgate dashboard, panels from a live run: {a.replicas} emulated vLLM replicas, "
        f"{run.requests} chat requests ({a.policy}), {when}"
    )
    draw(dashboard, series, title, png)
    report = {
        "started_utc": when,
        "wall_s": time.monotonic() - wall,
        "settings": {**asdict(settings), "step_s": a.step, "rate_interval_s": a.rate_interval},
        "requests": run.requests,
        "client_errors": run.errors,
        "targets": run.targets,
        "panels": {title: {k: v for k, v in s.items()} for title, s in series.items()},
    }
    (a.out / "dashboard.json").write_text(json.dumps(report, indent=1) + "\n")
    if a.copy_to is not None:
        shutil.copyfile(png, a.copy_to)
    empty = sorted(t for t, s in series.items() if not s)
    print(
        f"wrote {png} and dashboard.json; panels without data: {empty or 'none'}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
