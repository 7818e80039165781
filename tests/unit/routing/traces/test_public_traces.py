"""The repository's copies of the public traces are the upstream files, byte for byte."""

from __future__ import annotations

import hashlib

from routing.traces.files import open_trace
from tests.support.public_traces import AZURE_CODE, MOONCAKE

SHA256 = {
    MOONCAKE: "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
    AZURE_CODE: "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
}


def test_the_copies_decompress_to_the_upstream_files() -> None:
    for path, digest in SHA256.items():
        with open_trace(path) as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, path.name
