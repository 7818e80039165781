"""`open_trace`: a trace file's bytes, decompressed when the file is gzip or xz.

The compression is told by the file's first bytes, not its name, so `trace.jsonl.gz` and a
renamed copy read the same. `plain_name` drops a compression suffix (`.gz`, `.xz`) so that
format detection by suffix sees `.csv` in `azure.csv.gz`.
"""

from __future__ import annotations

import gzip
import lzma
from io import BufferedIOBase
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
COMPRESSED_SUFFIXES = (".gz", ".xz")


def open_trace(path: str | Path) -> BufferedIOBase:
    """The file opened for reading bytes; gzip and xz files are decompressed as read."""
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(len(XZ_MAGIC))
    if head.startswith(GZIP_MAGIC):
        return gzip.open(path, "rb")
    if head == XZ_MAGIC:
        return lzma.open(path, "rb")
    return path.open("rb")


def plain_name(path: str | Path) -> Path:
    """The path without a compression suffix: `a.csv.gz` → `a.csv`."""
    path = Path(path)
    return path.with_suffix("") if path.suffix.lower() in COMPRESSED_SUFFIXES else path
