"""Envoy + `kvgate epp` against Envoy round-robin and kvgate as the front door, in one run:
routing quality on one workload (`quality.py`) and the latency the picker's hop adds at a
fixed rate (`hop.py`). `python -m bench epp`; see `__main__.py`."""
