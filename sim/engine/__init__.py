"""The engine model: a pure, stdlib-only model of one vLLM v1 engine in virtual time.

- `types`: shared value types and the linear step-time model
- `tokenizer`: the built-in deterministic tokenizer and a Hugging Face wrapper
- `kv_cache`: paged KV cache with automatic prefix caching (`free_queue`: its free queue;
  `block_runs`: its fast paths)
- `request`, `batch_scheduler`: per-request state and vLLM's scheduling decision
- `model`: `EngineModel`, the façade a caller steps
- `decode_run`: fast-forwarding through decode-only steps in closed form
- `profiles`: named capacity and timing profiles
"""
