"""The HTTP emulator: engine-model replicas behind vLLM's (or SGLang's) HTTP surface.

Unlike `sim.engine`, this package does I/O (asyncio, uvicorn, prometheus_client); the
simulator core never imports it.
"""
