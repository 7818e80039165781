"""The gateway's HTTP/1.1 stack: the upstream connection (`http1`) and its pooled client
(`client`), the health checks' fetcher over that client (`fetcher`), and the server side
that uvicorn runs (`server`, with the protocol class in `uvicorn_protocol` and its write
coalescing in `coalescing`)."""
