"""Server TLS whose certificate can be replaced without a restart.

`ReloadingTls.listener` is the `SSLContext` the listening socket uses. Its servername
callback, which OpenSSL runs on every ClientHello (with or without SNI), checks the two
files' modification stamps at most once per `check_interval_s`; when either changed it
builds a new context from them and hands it to that and every later handshake
(`SSLObject.context = ...`). Connections already open keep their certificate. A pair that
fails to load (a rotation caught half-written, a key that does not match) leaves the
previous certificate serving, with one warning, and is tried again a second later.

The check costs two `stat` calls a second at most, made inside a handshake; the reload
itself (reading two small PEM files) only when they changed. No task or thread is kept.
A handshake happens before the HTTP protocol sees the connection, so the server limits
start after it; asyncio bounds the handshake itself (60 s).
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)
Stamp = tuple[tuple[int, int, int], ...]


def read_stamp(files: Sequence[Path]) -> Stamp:
    """What tells a changed file here: each file's modification time, size and inode."""
    stats = [os.stat(f) for f in files]
    return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in stats)


class ReloadingTls:
    """A server TLS context that follows changes of its certificate and key files."""

    def __init__(
        self,
        cert_file: str | Path,
        key_file: str | Path,
        *,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._files = (Path(cert_file), Path(key_file))
        self._interval = check_interval_s
        self._clock = clock
        self._stamp = read_stamp(self._files)
        self.listener = self._load()  # bad files at start-up raise: fail before listening
        self.listener.sni_callback = self._on_client_hello
        self.current = self.listener
        self._checked = clock()

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])  # the only protocol served: no h2 offers taken
        ctx.load_cert_chain(*self._files)
        return ctx

    def _on_client_hello(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        self.refresh()
        if conn.context is not self.current:
            conn.context = self.current

    def refresh(self) -> bool:
        """Reload the files if they changed and the last check is old enough; True if a new
        certificate now serves."""
        now = self._clock()
        if now - self._checked < self._interval:
            return False
        self._checked = now
        try:
            stamp = read_stamp(self._files)
            if stamp == self._stamp:
                return False
            fresh = self._load()
        except (OSError, ssl.SSLError) as exc:
            log.warning("TLS certificate not reloaded, the previous one still serves: %s", exc)
            return False
        self._stamp, self.current = stamp, fresh
        log.info("TLS certificate reloaded from %s", self._files[0])
        return True
