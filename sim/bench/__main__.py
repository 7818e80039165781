"""`python -m sim.bench {quality,overhead,decision,all}`: kvgate against peer routers.

`quality` replays the same workloads through kvgate and each peer router in front of one
emulated fleet (sim/bench/quality.py); `overhead` measures the latency and CPU each router
adds under open-loop load (sim/bench/overhead.py); `decision` times one routing decision
(sim/bench/decision.py); `all` runs the three in turn. Arguments after the subcommand go to
it (`python -m sim.bench quality --help`); `all` takes only `--quick`, passed on to the
subcommands that have it.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = ("quality", "overhead", "decision")
# Subcommands that take `--quick` (the decision microbenchmark is quick already).
QUICK = ("quality", "overhead")


def _dispatch(name: str, argv: list[str]) -> int:
    # Imported lazily: each benchmark pulls in its own heavy dependencies.
    module = importlib.import_module(f"sim.bench.{name}")
    rc: int | None = module.main(argv)
    return rc or 0


def _shared(name: str, argv: list[str]) -> list[str]:
    """The arguments `all` hands to subcommand `name` (each keeps its own default `--out`)."""
    return ["--quick"] if "--quick" in argv and name in QUICK else []


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in (*SUBCOMMANDS, "all"):
        print(__doc__, file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    name, rest = args[0], args[1:]
    if name != "all":
        return _dispatch(name, rest)
    failures = 0
    for sub in SUBCOMMANDS:
        print(f"== sim.bench {sub} ==", file=sys.stderr, flush=True)
        try:
            failures += _dispatch(sub, _shared(sub, rest)) != 0
        except ModuleNotFoundError as exc:
            if exc.name != f"sim.bench.{sub}":
                raise
            print(f"sim.bench.{sub} is not there yet; skipped", file=sys.stderr)
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
