from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.supervisor import Supervisor


async def _spin(counter: list[int]) -> None:
    while True:
        counter[0] += 1
        await asyncio.sleep(0)


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_crashing_loop_restarts_and_never_cancels_its_siblings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steady, starts = [0], [0]

    async def crashing() -> None:
        starts[0] += 1
        raise OverflowError("a bug")

    sup = Supervisor(first_backoff_s=0.0, max_backoff_s=0.0)
    sup.add("steady", lambda: _spin(steady))
    sup.add("crashing", crashing)
    task = asyncio.create_task(sup.run())
    await _turns(100)
    assert not task.done()
    assert starts[0] >= 3
    assert steady[0] >= 50
    assert sup.states()["steady"] == "running"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[0].exc_info  # the first crash with its traceback, later ones in a line
    assert not any(r.exc_info for r in errors[1:])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_loop_waiting_out_its_backoff_is_restarting() -> None:
    async def crashing() -> None:
        raise RuntimeError("down")

    sup = Supervisor(first_backoff_s=3600.0)
    sup.add("probes", crashing)
    assert sup.states() == {"probes": "restarting"}  # not started yet
    task = asyncio.create_task(sup.run())
    await _turns(5)
    assert sup.states() == {"probes": "restarting"}
    assert not sup.running("probes")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_loop_that_returns_has_failed_and_is_not_restarted() -> None:
    starts = [0]

    async def ends() -> None:
        starts[0] += 1

    sup = Supervisor(first_backoff_s=0.0)
    sup.add("recorder", ends)
    sup.add("steady", lambda: _spin([0]))
    task = asyncio.create_task(sup.run())
    await _turns(20)
    assert sup.states() == {"recorder": "failed", "steady": "running"}
    assert starts[0] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelling_run_cancels_every_loop() -> None:
    cancelled: list[str] = []

    async def waits(name: str) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    sup = Supervisor()
    sup.add("a", lambda: waits("a"))
    sup.add("b", lambda: waits("b"))
    task = asyncio.create_task(sup.run())
    await _turns(3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == ["a", "b"]
    assert sup.states() == {"a": "running", "b": "running"}  # never marked as crashed


def test_names_are_unique() -> None:
    sup = Supervisor()
    sup.add("a", lambda: _turns(1))
    with pytest.raises(ValueError, match="already supervised"):
        sup.add("a", lambda: _turns(1))


async def test_loops_added_while_running_start_at_once_and_removed_ones_stop() -> None:
    late, cancelled = [0], []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("late")
            raise

    sup = Supervisor(first_backoff_s=0.0)
    sup.add("steady", lambda: _spin([0]))
    task = asyncio.create_task(sup.run())
    await _turns(3)
    sup.add("late", lambda: _spin(late))
    await _turns(10)
    assert late[0] >= 5
    assert sup.states() == {"steady": "running", "late": "running"}
    sup.remove("late")
    seen = late[0]
    await _turns(10)
    assert late[0] == seen  # cancelled: it never ran again
    assert sup.states() == {"steady": "running"}
    assert not sup.running("late")
    sup.add("late", waits)  # the name is free again
    await _turns(3)
    sup.remove("late")
    await _turns(3)
    assert cancelled == ["late"]
    sup.remove("never-added")  # a no-op
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_removed_crashing_loop_never_comes_back_nor_marks_its_successor() -> None:
    starts = [0]

    async def crashing() -> None:
        starts[0] += 1
        raise RuntimeError("down")

    async def ends() -> None:
        return

    sup = Supervisor(first_backoff_s=0.01)
    task = asyncio.create_task(sup.run())  # nothing to run yet: it waits for loops
    await _turns(2)
    sup.add("kv", crashing)
    await _turns(3)
    assert sup.states() == {"kv": "restarting"}
    sup.remove("kv")
    sup.add("kv", lambda: _spin([0]))
    await asyncio.sleep(0.05)  # past the old loop's backoff
    assert starts[0] == 1
    assert sup.states() == {"kv": "running"}
    sup.remove("kv")
    sup.add("kv", ends)
    await _turns(3)
    assert sup.states() == {"kv": "failed"}
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
