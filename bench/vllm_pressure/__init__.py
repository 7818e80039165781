"""Routers in front of real vLLM servers under KV pressure (`python -m bench vllm-pressure`).

- `__main__`: the command line and the loop over repeats × cells × routers
- `cells`: the workloads (tenants, popularity, clients), sized in the engine's tokens
- `fleet`: the vLLM servers, warmed up once, their prefix caches reset before every router
- `report`: run figures, rows over repeats, the table, `vllm-pressure.json`, the bar chart
"""
