"""`python -m bench dp`: routing to data-parallel ranks (see `bench.data_parallel.__main__`)."""
