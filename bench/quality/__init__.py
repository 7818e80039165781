"""Routing quality of kvgate against peer routers (`python -m bench quality`).

- `__main__`: the command line and the loop over workloads × routers
- `workloads`: the synthetic chats and the Mooncake slice, and the fleet each runs on
- `report`: table, the issue's targets, `quality.json` and the TTFT CDF plot
"""
