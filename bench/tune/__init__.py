"""`python -m bench tune`: the self-tuning loop against fixed profiles on a live emulated
fleet whose workload changes regime (`phases`, `fixed`, `live`, `__main__`)."""
