"""The regime map (`python -m bench regime`): where kvgate's default wins or loses.

- `__main__`: the command line and the loop over cells × routers, live and simulated
- `grid`: the cells (pressure × popularity × traffic) and the fleet they run on
- `simulate`: round-robin's saturation, closed loops as fixed points, replays per policy
- `live`: the cells as live traffic through each router in front of a fresh fleet
- `report`: tables, ratios to sglang-router and round-robin, `regime.json`, heat maps
"""
