"""Disaggregated prefill/decode (P/D) on emulated replicas: roles, handoffs, both protocols.

A replica's role is `both` (serves whole requests), `prefill` (P) or `decode` (D); a fleet
speaks one protocol: `vllm` (NixlConnector: P holds a prefill's blocks under a lease, D pulls
them over HTTP) or `sglang` (bootstrap: P and D get the same request, D joins P's room on
P's bootstrap port and P pushes the KV). `settings` names them, `handoffs` keeps P's held
prefills, `legs` reads a request's part in a P/D pair, `coordinator` plays it on a replica,
`bootstrap` serves P's bootstrap port. How it works: docs/emulator.md.
"""
