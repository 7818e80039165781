"""The public traces kept in the repository (`traces/`, gzip): what the docs' simulator
commands and the loaders' tests read. A missing file fails a test; it never skips one."""

from __future__ import annotations

from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "traces"
MOONCAKE = TRACES / "mooncake_fast25_conversation_trace.jsonl.gz"
AZURE_CODE = TRACES / "azure_llm_2023_code.csv.gz"
