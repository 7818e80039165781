"""Calibration of the engine model against the real vLLM CPU engine (`make calibrate`).

Pure parts (no I/O): `grid` (cells and the train/test split), `plan` (burst prompts),
`records` (measurement values), `nnls` (least squares), `replay` (a burst through the engine
model), `fit`, `evaluate`, `compare`, `errors`. Parts that run things: `venv` (the vLLM venv),
`tinymodel` (the model directory), `server` (vLLM as a child process), `client` and
`measure` (HTTP), `plot`, `report`, and the CLI in `__main__`.
"""
