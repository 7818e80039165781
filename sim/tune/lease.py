"""One tuner per pool: a leader lease in Redis (`SET key id NX PX ttl`, renewed by its holder
with a compare-and-extend script). A tuner that does not hold the lease stands by and
evaluates nothing; when the leader stops renewing, the lease lapses after `ttl_s` and the
next tuner to ask takes it. The holder also publishes the profile it switched the pool to
(`publish`), for gateways that start or reload later (`gateway.tuning.follow`), and takes it
back when a reload won (`withdraw`). `redis` is imported only when a lease is used."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

# Extend the lease only if this holder still has it (atomic on the server).
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""


class Lease:
    """A leader lease on `key` for `ttl_s` seconds at the Redis server `url`."""

    def __init__(self, url: str, key: str, ttl_s: float, client: Any = None) -> None:
        if client is None:
            import redis

            client = redis.Redis.from_url(url, socket_timeout=5.0)
        self._client = client
        self.key = key
        self.holder = secrets.token_hex(8)
        self._ttl_ms = max(1, int(ttl_s * 1000))

    def acquire(self) -> bool:
        """True when this tuner holds the lease (taken now, or renewed)."""
        if self._client.set(self.key, self.holder, nx=True, px=self._ttl_ms):
            return True
        return bool(self._client.eval(_RENEW, 1, self.key, self.holder, self._ttl_ms))

    def publish(self, key: str, switch: Mapping[str, Any]) -> int:
        """Publish a switch's body under `key` with the next sequence number (returned)."""
        seq = int(self._client.incr(key + ":seq"))
        self._client.set(key, json.dumps({**switch, "seq": seq, "tuner": self.holder}))
        return seq

    def withdraw(self, key: str) -> None:
        """Take the published profile back: gateways keep what they run."""
        self._client.delete(key)

    def release(self) -> None:
        """Let the lease go at once if this tuner holds it (a clean stop)."""
        if self._client.get(self.key) == self.holder.encode():
            self._client.delete(self.key)
        self._client.close()
