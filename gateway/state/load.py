"""In-flight requests and queued prefill per gateway and backend, pushed to the other gateways.

Every `interval_s` a channel asks `outgoing()` for this gateway's report: its counts per
backend (requests in flight, predicted uncached prompt tokens sent and not yet prefilled),
returned when they changed since the last report sent or `heartbeat_s` after it, else None.
Each report received replaces that gateway's previous one and is a lease: one not renewed
within `ttl_s` expires (`expire`), so a gateway that dies or loses its channel stops counting
within `ttl_s`. While the channel itself is down, `clear` drops every report and the gateway
routes on its own counts. `remote` sums the current reports per backend; every change of it
goes to `on_remote` (the app sets each backend's `remote_in_flight` and
`remote_pending_prefill_tokens`, which the in-flight scorer, the load-imbalance filter and
the TTFT estimate add to the gateway's own counts).

Staleness: a report leaves at most `interval_s` after a change and takes the channel's
delay to arrive (`lags_ms`: sent → received, wall clock).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgpack  # type: ignore[import-untyped]

from gateway.state.codec import BadEntryError
from gateway.state.outbox import now_ms

Counts = Mapping[str, tuple[int, int]]  # backend → (in flight, pending prefill tokens)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One gateway's counts per backend, as of `at_ms` (wall clock)."""

    gateway: str
    counts: Mapping[str, tuple[int, int]]
    at_ms: float


def encode_report(r: LoadReport) -> bytes:
    counts = {b: [n, p] for b, (n, p) in r.counts.items()}
    return bytes(msgpack.packb([r.gateway, r.at_ms, counts]))


def decode_report(data: bytes) -> LoadReport:
    try:
        gateway, at_ms, counts = msgpack.unpackb(data)
        return LoadReport(
            str(gateway), {str(b): (int(n), int(p)) for b, (n, p) in counts.items()}, float(at_ms)
        )
    except (ValueError, TypeError, AttributeError, msgpack.UnpackException) as exc:
        raise BadEntryError(f"not a load report: {exc!r}") from None


class LoadSharing:
    """This gateway's reports out, the other gateways' summed counts in."""

    def __init__(
        self,
        gateway_id: str,
        local: Callable[[], Counts],
        on_remote: Callable[[Counts], None] = lambda remote: None,
        *,
        interval_s: float = 0.05,
        heartbeat_s: float = 1.0,
        ttl_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gateway_id = gateway_id
        self.interval_s = interval_s
        self.heartbeat_s = heartbeat_s
        self.ttl_s = ttl_s
        self._local = local
        self._on_remote = on_remote
        self._clock = clock
        self._reports: dict[str, tuple[Counts, float]] = {}  # gateway → (counts, received at)
        self._last: Counts | None = None
        self._sent_at = -1e18
        self.remote: dict[str, tuple[int, int]] = {}
        self.sent = 0
        self.received = 0
        self.lags_ms: deque[float] = deque(maxlen=4096)

    @property
    def peers(self) -> int:
        """Other gateways with a current report."""
        return len(self._reports)

    def outgoing(self) -> LoadReport | None:
        """The report to send now, if any (see the module docstring)."""
        now = self._clock()
        counts = {b: c for b, c in self._local().items() if c[0] or c[1]}
        if counts == self._last and now - self._sent_at < self.heartbeat_s:
            return None
        self._last, self._sent_at = counts, now
        self.sent += 1
        return LoadReport(self.gateway_id, counts, now_ms())

    def receive(self, report: LoadReport) -> None:
        if report.gateway == self.gateway_id:
            return
        self.received += 1
        self.lags_ms.append(now_ms() - report.at_ms)
        self._reports[report.gateway] = (report.counts, self._clock())
        self._sum()

    def expire(self) -> None:
        """Drop the reports whose lease ran out."""
        deadline = self._clock() - self.ttl_s
        gone = [g for g, (_, at) in self._reports.items() if at < deadline]
        for g in gone:
            del self._reports[g]
        if gone:
            self._sum()

    def resend(self) -> None:
        """The last report was not delivered: the next `outgoing` gives one whatever."""
        self._last = None

    def clear(self) -> None:
        """The channel is down: route on this gateway's own counts."""
        if self._reports:
            self._reports.clear()
            self._sum()
        self.resend()  # tell everything again once the channel is back

    def _sum(self) -> None:
        remote: dict[str, tuple[int, int]] = {}
        for counts, _ in self._reports.values():
            for b, (n, p) in counts.items():
                n0, p0 = remote.get(b, (0, 0))
                remote[b] = (n0 + n, p0 + p)
        if remote != self.remote:
            self.remote = remote
            self._on_remote(remote)
