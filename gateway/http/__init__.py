"""The gateway's HTTP/1.1 stack: the upstream connection (`http1`) and its pooled client
(`client`), the health fetcher over that client (`fetcher`), and the uvicorn protocol the
gateway serves with (`server`)."""
