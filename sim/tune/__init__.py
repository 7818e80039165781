"""Self-tuning: recent traffic replayed under candidate routing profiles, a proposal made.

- `candidates`: the profiles to try (named ones, and a bounded search around the live one)
- `evaluate`: one window of a trace replayed per candidate and seed; fidelity to observed TTFT
- `proposal`: the best candidate, its predicted gain and spread across seeds, and the rule
- `controller`: what `shadow` and `apply` do with a proposal (switch, keep, roll back)
- `offline`: `kvgate sim tune TRACE`, the loop run over a whole trace, window after window
- `live`: `kvgate tune`, the loop beside a running gateway (its recording and admin API)
"""
