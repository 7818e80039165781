"""The Grafana dashboard rendered from a live run's metrics: `python -m bench dashboard`."""
