"""What a worker of `kvgate serve --workers N` knows about itself and its siblings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """Worker `index` of `count`, forked by the master (`gateway.workers.master`).

    `run_dir` is the master's private directory (mode 0700) where each worker listens for
    its siblings on a Unix socket (`socket_path`); `ready_fd` is the pipe on which a worker
    tells the master it serves (`notify_started`).
    """

    index: int
    count: int
    run_dir: Path
    ready_fd: int

    def socket_path(self, index: int) -> str:
        return str(self.run_dir / f"worker-{index}.sock")

    @property
    def siblings(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.count) if i != self.index)

    def notify_started(self) -> None:
        """Tell the master this worker's server listens (one line, its index)."""
        os.write(self.ready_fd, f"{self.index}\n".encode())

    def describe(self) -> dict[str, int]:
        """The `worker` entry of `/ready` and `/admin/backends`."""
        return {"index": self.index, "count": self.count, "pid": os.getpid()}
