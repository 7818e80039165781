"""Self-signed server certificates for TLS tests, made with the `openssl` command line."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A P-256 certificate for 127.0.0.1 (CN `kvgate-<name>`) and its key: (cert, key)."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2",
            "-subj", f"/CN=kvgate-{name}", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
