"""Tests against a real vLLM (CPU) server (`make test-vllm`, marker `vllm`)."""
