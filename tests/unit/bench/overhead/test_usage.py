"""CPU and peak memory of a process tree, from /proc."""

from __future__ import annotations

import os

from bench.overhead.usage import usage


def test_proc_usage_of_this_process() -> None:
    u = usage(os.getpid())
    assert u.cpu_s > 0
    assert u.peak_rss_bytes > 1 << 20
