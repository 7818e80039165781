"""Two (or more) real vLLM CPU servers as a `sim.live.experiment.FleetLauncher`.

The servers (`bench.calibrate.server.vllm_server`, the tiny dummy-weight model, a KV cache
of `num_blocks` blocks) start once, each engine's compute threads bound to its own core,
and are warmed up. Every `launch` then makes their prefix caches cold: `POST
/reset_prefix_cache` (vLLM's development endpoint, `VLLM_SERVER_DEV_MODE=1`) on every
server, checked: a fresh probe prompt sent twice must be cached the second time (prefix
caching works), the cache reset, the probe sent again must report 0 cached tokens
(`usage.prompt_tokens_details.cached_tokens`), and a last reset drops the probe. A reset
that does not report success is retried; one that the probe shows did not work stops the
run. `restart=True` restarts the servers for every launch instead (slower, ~45 s a server
on 2 cores) and still resets them after their warm-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.calibrate.server import ServerSettings, vllm_server

log = logging.getLogger(__name__)

PROBE_TOKENS = 128  # 4 blocks of 32
RESET_ATTEMPTS = 5
RESET_BACKOFF_S = 0.5  # times the attempt number
WARM_UP_PROMPTS = (1500, 600, 100)  # prompt tokens; what a chat of the bench sends


class ColdCacheError(RuntimeError):
    """A server's prefix cache could not be made cold."""


class VllmFleet:
    """`with VllmFleet(...) as fleet:` — `replicas` vLLM servers, healthy and warm inside."""

    def __init__(
        self,
        python: Path,
        model_dir: Path,
        settings: ServerSettings,
        *,
        replicas: int,
        log_dir: Path,
        niceness: int = 0,
        restart: bool = False,
    ) -> None:
        if settings.served_model_name is None:
            raise ValueError("the fleet's settings need a served_model_name")
        self.model = settings.served_model_name
        self.settings = settings
        self.replicas = replicas
        self.restart = restart
        self._python, self._model_dir, self._log_dir = python, model_dir, log_dir
        self._niceness = niceness
        self._servers = contextlib.ExitStack()
        self._starts = 0
        self._used = False  # a launch has handed the servers out since they started
        self._rng = random.Random(0)  # probe prompts
        self.urls: list[str] = []

    def __enter__(self) -> VllmFleet:
        try:
            self._start()
        except BaseException:
            self._servers.close()  # the servers that did start; no __exit__ will run
            raise
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._servers.close()

    def _start(self) -> None:
        self._servers.close()
        self._starts += 1
        cores = os.cpu_count() or 1
        urls = []
        for i in range(self.replicas):
            settings = replace(self.settings, dev_mode=True, cpu_bind=str(i % cores))
            log_path = self._log_dir / f"vllm-{i}-start{self._starts}.log"
            server = vllm_server(self._python, self._model_dir, settings, log_path, self._niceness)
            urls.append(self._servers.enter_context(server))
        self.urls = urls
        self._used = False
        with httpx.Client(timeout=120.0) as client:
            for url in urls:
                self._warm_up(client, url)

    def _warm_up(self, client: httpx.Client, url: str) -> None:
        rng = random.Random(1)
        for tokens in WARM_UP_PROMPTS:
            prompt = [rng.randrange(10, 1000) for _ in range(tokens)]
            complete(client, url, self.model, prompt, max_tokens=24)

    @contextlib.contextmanager
    def launch(self, log_dir: Path, tag: str) -> Iterator[Sequence[str]]:
        """The servers' URLs, their prefix caches cold (see the module docstring)."""
        if self.restart and self._used:
            self._start()
        self._used = True
        started = time.monotonic()
        with httpx.Client(timeout=120.0) as client:
            for url in self.urls:
                make_cold(client, url, self.model, self._rng)
        log.info("prefix caches reset and checked in %.1f s", time.monotonic() - started)
        yield list(self.urls)

    def cache_config(self) -> dict[str, str]:
        """The first server's `vllm:cache_config_info` labels (num_gpu_blocks, ...)."""
        with httpx.Client(timeout=30.0) as client:
            text = client.get(self.urls[0] + "/metrics").raise_for_status().text
        return parse_cache_config(text)

    def tokens(self, text: str) -> int:
        """How many tokens the servers' tokenizer makes of `text` (no special tokens)."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        with httpx.Client(timeout=30.0) as client:
            resp = client.post(self.urls[0] + "/tokenize", json=body).raise_for_status()
        count: int = resp.json()["count"]
        return count


def complete(
    client: httpx.Client, url: str, model: str, prompt: list[int], max_tokens: int = 1
) -> int:
    """Send one completion of token ids; return the tokens the server found cached."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
    resp = client.post(url + "/v1/completions", json=body).raise_for_status()
    details = resp.json()["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def reset(client: httpx.Client, url: str) -> None:
    """`POST /reset_prefix_cache` until it reports success (it fails while blocks are held)."""
    for attempt in range(RESET_ATTEMPTS):
        resp = client.post(url + "/reset_prefix_cache")
        if resp.status_code == 404:
            raise ColdCacheError(f"{url}: no /reset_prefix_cache (VLLM_SERVER_DEV_MODE unset?)")
        resp.raise_for_status()
        if resp.json().get("success"):
            return
        time.sleep(RESET_BACKOFF_S * (attempt + 1))
    raise ColdCacheError(f"{url}: /reset_prefix_cache failed {RESET_ATTEMPTS} times")


def make_cold(client: httpx.Client, url: str, model: str, rng: random.Random) -> None:
    """Reset, and prove it: a probe cached before a reset must be a miss after it."""
    probe = [rng.randrange(1000, 2000) for _ in range(PROBE_TOKENS)]
    complete(client, url, model, probe)
    if complete(client, url, model, probe) == 0:
        raise ColdCacheError(f"{url}: a prompt sent twice was not cached (prefix caching off?)")
    reset(client, url)
    cached = complete(client, url, model, probe)
    if cached:
        raise ColdCacheError(f"{url}: {cached} probe tokens still cached after a reset")
    reset(client, url)


def parse_cache_config(metrics_text: str) -> dict[str, str]:
    """The labels of `vllm:cache_config_info` in a `/metrics` page."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                return dict(sample.labels)
    raise ValueError("no vllm:cache_config_info in the metrics")
