"""Test support: a fake vLLM-shaped engine and real uvicorn servers on 127.0.0.1."""
