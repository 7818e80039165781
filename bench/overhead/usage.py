"""Per-process CPU time and peak memory of a process tree, from /proc (Linux only).

Everything in the overhead benchmark shares two cores, so wall-clock throughput alone cannot
say which process paid; CPU seconds per process tree can.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class TreeUsage:
    """CPU seconds (user + system, reaped children included) and summed VmHWM of a tree."""

    cpu_s: float
    peak_rss_bytes: int


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    # The command name is in parentheses and may contain spaces: split after its ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    # Each thread lists the children it forked, so read every thread's list.
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def tree(pid: int) -> list[int]:
    """`pid` and all its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _hwm_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def usage(pid: int) -> TreeUsage:
    """The tree's CPU so far and its peak RSS (sum over the live processes)."""
    cpu, rss = 0.0, 0
    for p in tree(pid):
        try:
            f = _stat_fields(p)
            # Fields 14-17 of stat (utime, stime, cutime, cstime) are 11-14 after the name.
            cpu += sum(int(x) for x in f[11:15]) * _TICK_S
            rss += _hwm_bytes(p)
        except (OSError, ValueError, IndexError):
            continue  # exited between listing and reading
    return TreeUsage(cpu, rss)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of process `pid` (its main thread's id is `pid`)."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            raw = (task / "stat").read_text()
            f = raw[raw.rindex(")") + 2 :].split()
            out[int(task.name)] = (int(f[11]) + int(f[12])) * _TICK_S
        except (OSError, ValueError, IndexError):
            continue
    return out
