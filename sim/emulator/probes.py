"""Answers to what peer routers probe on a worker, beyond vLLM's own surface.

SGLang's router asks `/server_info` (then `/get_server_info`) and `/model_info` (then
`/get_model_info`) when a worker registers, and its `/get_loads` reads each worker's
`/get_load`; vllm-router posts `/v1/completions/render` (or the chat one) to every worker
before each request. The shapes here are the fields those routers read, named as SGLang
names them; no `model_path`/`tokenizer_path` is given, so no router tries to fetch a
tokenizer for a model that does not exist. A P/D replica also says its role and bootstrap
port, as SGLang's `/server_info` does (`disaggregation_mode`, `disaggregation_bootstrap_port`).
"""

from __future__ import annotations

from typing import Any

from sim.emulator import openai_api as api
from sim.emulator.disagg.coordinator import Disaggregation
from sim.emulator.replica import Replica

SERVER_INFO = ("/server_info", "/get_server_info")
MODEL_INFO = ("/model_info", "/get_model_info")
RENDER = ("/v1/completions/render", "/v1/chat/completions/render")


def server_info(replica: Replica, pd: Disaggregation, dp_size: int = 1) -> dict[str, Any]:
    config = replica.profile.config
    role = pd.settings.role
    return {
        "served_model_name": replica.model_name,
        "model_path": None,
        "tokenizer_path": None,
        "page_size": config.block_size,
        "max_total_num_tokens": config.num_blocks * config.block_size,
        "max_running_requests": config.max_num_seqs,
        "context_length": config.max_model_len,
        "tp_size": 1,
        "dp_size": dp_size,
        "version": "kvgate-emulator",
        # SGLang's names: "null" when not disaggregated.
        "disaggregation_mode": "null" if role == "both" else role,
        "disaggregation_bootstrap_port": pd.bootstrap_port,
    }


def model_info(replica: Replica) -> dict[str, Any]:
    return {
        "model_path": None,
        "tokenizer_path": None,
        "served_model_name": replica.model_name,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
    }


def load(replica: Replica) -> dict[str, Any]:
    waiting, running, free_blocks = replica.engine.load()
    config = replica.profile.config
    return {
        "load": replica.in_flight,
        "num_reqs": running,
        "num_waiting_reqs": waiting,
        "num_tokens": (config.num_blocks - free_blocks) * config.block_size,
    }


def render_refused() -> api.ApiError:
    # 403 tells vllm-router to route on the text (a 404 would make it call /tokenize on
    # every worker for every request); rendering would need the chat template anyway.
    return api.ApiError(
        403, "Rendering prompts is disabled on this server.", "PermissionDeniedError"
    )
