"""`python -m bench precise`: the precise (KV-event-fed) index against the emulator.

Two parts, each on fresh `kvgate emulate` fleets that publish their KV-cache events:

- **accuracy** — `kvgate serve --policy precise-prefix` follows every replica's events and
  tokenizes each prompt through the engines' `/tokenize`; for every answer the gateway grades
  its prediction of the cached prompt tokens against the engine's
  `usage.prompt_tokens_details.cached_tokens` (`kvgate_precise_predictions_total`). The
  workload is a capacity-pressure cell of the regime map, so engines evict. The share of
  exact predictions is the figure; at the end the index's block count per replica is compared
  with the emulator's own cache (`GET /kvgate/cache`).
- **routing** — on the regime map's capacity-pressure cells (pressure ≥ 1.5), the approximate
  default (`prefix-aware`) against `precise-prefix`, same fleets (events on for both):
  client TTFT, the replicas' hit rate and the load share.
"""
