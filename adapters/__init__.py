"""Engine adapters: how to read each inference engine's view of itself.

One module per engine maps that engine's Prometheus metric names onto the engine-neutral
`routing.types.EngineMetrics`; `registry` finds an adapter by engine name. Adapters are
pure: no I/O and no clock (the scrape time is passed in); `health.scraper` does the polling.
"""
