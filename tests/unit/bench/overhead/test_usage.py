"""CPU and peak memory of a process tree, from /proc."""

from __future__ import annotations

import os
import time

from bench.overhead.tracing import cpu_s
from bench.overhead.usage import usage


def test_proc_usage_of_this_process() -> None:
    u = usage(os.getpid())
    assert u.cpu_s > 0
    assert u.peak_rss_bytes > 1 << 20


def test_the_tracing_bench_reads_a_processs_cpu_clock_in_ns() -> None:
    sum(i * i for i in range(200_000))  # some CPU
    mine, clock = cpu_s(os.getpid()), time.process_time()
    assert abs(mine - clock) < 0.05
    assert mine != round(mine, 2)  # not in 10 ms ticks
