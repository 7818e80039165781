"""Routing state that outlives a request: the prefix index and its feed, the precise index,
the TTFT model, and the events gateways share to mirror each other's state."""
