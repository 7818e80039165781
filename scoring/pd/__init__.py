"""Disaggregated prefill/decode: which decode backend, whether and which prefill backend."""
