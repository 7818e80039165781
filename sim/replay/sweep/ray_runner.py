"""`kvgate sim sweep --ray [ADDRESS]`: the runs of a sweep as tasks on a Ray cluster.

`ray.init(address=ADDRESS)` attaches to a cluster (`auto`, `HOST:6379`, `ray://HOST:10001`);
without an address Ray attaches to the instance `ray start` left on this machine, or starts a
local one (stopped again at the end). The trace at each rate scale and the engine profile are
put in the object store once; each task gets references to them, its policy and its settings
(the config's routing section with the run's weights) and returns the run's summary. A task
whose worker or node dies is run again, up to `MAX_RETRIES` times (Ray's `max_retries`); an
exception raised by the replay itself is not retried and reaches the caller as it would
locally. Ray is imported here only, and only when a runner is made: `sim` imports without it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType, TracebackType
from typing import Any, Self, TextIO

from sim.engine.types import EngineProfile
from sim.replay.report import PolicySummary
from sim.replay.sweep.runners import RunSpec, SweepRunError, Traces, run_point

MAX_RETRIES = 3
PROBE_TIMEOUT_S = 5.0
INSTALL_HINT = "pip install 'kvgate[ray]'"


class RayRunner:
    """Runs a sweep's replays as Ray tasks, one CPU each; see the module docstring."""

    def __init__(
        self,
        address: str,
        out: TextIO | None = None,
        function: Callable[..., PolicySummary] = run_point,
    ) -> None:
        self.address = address  # "" for this machine's instance
        self._out = out
        self._ray = _import_ray()
        self._function = function  # a test replaces it (a task that kills its worker)
        self._owned = False

    def __enter__(self) -> Self:
        if not self._ray.is_initialized():  # else the caller connected and will disconnect
            _connect(self._ray, self.address, self._out)
            self._owned = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._owned:
            self._ray.shutdown()
            self._owned = False

    def describe(self) -> str:
        ray = self._ray
        cpus = ray.cluster_resources().get("CPU", 0.0)
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        context = ray.get_runtime_context()
        return f"Ray at {context.gcs_address}, {cpus:g} CPUs on {nodes} node(s)"

    def run(
        self, specs: Sequence[RunSpec], traces: Traces, profile: EngineProfile
    ) -> Iterator[tuple[int, PolicySummary]]:
        ray = self._ray
        task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(self._function)
        # Shipped once: tasks get references, and a node fetches each object once.
        trace_refs = {scale: ray.put(list(trace)) for scale, trace in traces.items()}
        profile_ref = ray.put(profile)
        pending: dict[Any, RunSpec] = {
            task.remote(trace_refs[s.rate_scale], s.policy, profile_ref, s.settings): s
            for s in specs
        }
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                spec = pending.pop(ready[0])
                yield spec.index, _get(ray, ready[0], spec)
        finally:
            for ref in pending:  # an error or an abandoned sweep: free the cluster
                ray.cancel(ref, force=True)


def _get(ray: ModuleType, ref: Any, spec: RunSpec) -> PolicySummary:
    try:
        summary: PolicySummary = ray.get(ref)
    except ray.exceptions.RayTaskError:
        raise  # the replay's own exception (also an instance of its class), as locally
    except ray.exceptions.RayError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SweepRunError(
            f"run {spec.index + 1} ({spec.label}) failed on Ray after {MAX_RETRIES} retries: "
            f"{type(exc).__name__}: {reason}"
        ) from None
    return summary


def _connect(ray: ModuleType, address: str, out: TextIO | None) -> None:
    """`ray.init`, once the address it would use answers: where nothing listens, Ray retries
    for ~15 minutes (also at the address of an instance `ray start` left and that has gone:
    without ADDRESS, a new local instance is started instead)."""
    flag = f"--ray {address}".strip()
    try:
        target = _target(ray, address)
    except ConnectionError as exc:  # auto, and no instance on this machine
        raise ConnectionError(f"{flag}: {exc}") from None
    if target is not None and not _answers(target):
        if address or os.environ.get("RAY_ADDRESS"):
            raise ConnectionError(f"{flag}: nothing answers at {target}")
        if out is not None:
            print(f"note: the Ray instance last started here ({target}) is gone", file=out)
        address, target = "local", None
    try:
        ray.init(address=address or None)
    except ConnectionError as exc:
        hint = ""
        if target is not None:  # it answers, yet would not let us in
            hint = (
                " (a cluster with token authentication needs RAY_AUTH_MODE=token and its token "
                "in RAY_AUTH_TOKEN here: `ray get-auth-token` on its head)"
            )
        raise ConnectionError(f"{flag}: cannot attach: {exc}{hint}") from None


def _target(ray: ModuleType, address: str) -> str | None:
    """HOST:PORT that `ray.init(address)` would connect to; None when it would start an
    instance, or cannot tell (`ray://` addresses are probed at their client port)."""
    if address and address != "auto":
        return address.removeprefix("ray://")
    try:  # RAY_ADDRESS, else the instance `ray start` last left on this machine
        found: str | None = ray._private.services.get_ray_address_from_environment(
            address or None, None
        )
    except AttributeError:  # another Ray version: let ray.init find it
        return None
    return found if found and found != "auto" else None


def _answers(target: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return True  # a form only Ray understands: let it judge
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ValueError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray
