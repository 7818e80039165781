"""`python -m bench pd`: kvgate on disaggregated prefill/decode pools against peers' P/D modes
(comparison A) and its conditional, always and never modes, live and simulated (comparison B);
see `bench.pd.__main__`."""
