"""The Responses API's stored responses: each lives on the backend that made it (config
`responses:`).

`ids` finds a stored response's id in a path or in the answer that made it, `owners` is the
local id → backend map (LRU, TTL), `affinity` adds Redis and gives the `Pin` that binds a
follow-up (`previous_response_id`) or a `GET`/`DELETE /v1/responses/{id}`, `/cancel` to that
backend (`gateway.router.RequestRouter`); the front door serves those paths in `gateway.inference`.
How it works: docs/responses.md.
"""
