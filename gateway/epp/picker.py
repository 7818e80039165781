"""The endpoint picker's side of a request: ext_proc events mapped onto the `Director`.

Per request (`Exchange`): `admit` waits for its place in admission (`docs/flow-control.md`);
`pick` parses and routes the body as the front door does (a rewritten model in it) and
dispatches it to the first-ranked backend; `served` moves the dispatch to the endpoint the
proxy used; `response_status`, `response_chunk` (the model asked named back) and `finish`
(once, ended or cut; the place given back) tell the director the answer's status, events and
end. Endpoints are `host:port` of each backend's URL (an `ORIGINAL_DST` cluster needs IP
addresses). On a prefill/decode pool the destination is D; a split request also names P for
D's sidecar in llm-d's `x-prefiller-host-port` (a client's own is removed); P's leg is over
once D's answer starts. Stored responses: `pin` finds the backend holding the one a request
names, its only destination; `settle` learns a new one's backend (or forgets a deleted one)
before the chunk holding its id is answered. Data-parallel ranks behind one port share its
address; the rank is named as the front door names it (`gateway.dp_rank`), with no fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway.admission.controller import AdmissionController, Grant
from gateway.control_headers import MODEL_REWRITE
from gateway.director import Attempt, Director
from gateway.dp_rank import rank_body, rank_header
from gateway.epp.request_metrics import EppRequestMetrics, RequestLabels
from gateway.errors import GatewayError, MethodNotAllowedError, NoHealthyBackendError
from gateway.inference_request import API_BY_PATH, InferenceRequest, parse_inference_body
from gateway.model_names import ModelNameRestorer, with_model
from gateway.request_record import RequestRecord
from gateway.responses.affinity import Pin
from gateway.responses.ids import STORED_METHODS, ResponseIdReader, object_path, replays
from gateway.router import Route
from gateway.usage import STREAM_USAGE_APIS, UsageEventFilter, UsageReader, UsageTap, ask_for_usage

PREFILLER_HEADER = b"x-prefiller-host-port"  # llm-d's routing sidecar reads it
Parsed = InferenceRequest | GatewayError  # a body as parsed: the request, or why it is refused
Admitted = Grant | GatewayError | None  # a place in admission, why there is none, or not asked


@dataclass(slots=True)
class Exchange:
    """One request's state between its pick and the end of its response."""

    rec: RequestRecord | None  # None: not an inference call (nothing is accounted)
    destination: str  # the header value: ip:port[,fallback...]
    route: Route | None = None
    attempt: Attempt | None = None
    status: int = 0
    body: bytes | None = None  # the body to forward instead, when it was changed
    asked_usage: bool = False  # the body asks the engine for the usage the client did not
    reader: UsageReader = field(default_factory=UsageTap)
    streamed: bool = False  # the answer is an event stream
    done: bool = False
    prefill: Attempt | None = None  # a split request's prefill leg (run by D's sidecar) until over
    prefiller: str | None = None  # its host:port
    ids: ResponseIdReader | None = None  # reads a stored response's id off the answer
    learned: str | None = None  # that id, found and not yet told to the director
    deleting: str | None = None  # DELETE /v1/responses/{id}: forgotten once it succeeds
    labels: RequestLabels | None = None  # its llm_d_epp_* labels, while counted as running
    rank: tuple[bytes, bytes] | None = None  # the header naming a vLLM data-parallel rank
    grant: Grant | None = None  # its place in admission, given back when it ends
    rewritten: str | None = None  # the model the engine gets, when a rewrite replaced the client's
    restore: ModelNameRestorer | None = None  # names the client's model back in the answer

    def request_headers(self) -> list[tuple[bytes, bytes]]:
        """Headers set on the request besides the destination: `traceparent` (and
        `tracestate`) naming the routing span as the engine's parent, while tracing is on;
        the prefiller's address when the request is split."""
        t = self.rec.trace if self.rec is not None else None
        out = t.propagation(t.route_id) if t is not None and t.route_id else []
        if self.prefiller is not None:
            out.append((PREFILLER_HEADER, self.prefiller.encode()))
        if self.rank is not None:
            out.append(self.rank)
        if self.rewritten is not None:
            out.append((MODEL_REWRITE[0].encode(), self.rewritten.encode()))
        return out

    def removed_headers(self) -> list[bytes]:
        """Headers taken off the request: a client's own prefiller header when the request is
        not split (only the picker names P to D's sidecar); the old name of the model rewrite
        header when the request is rewritten (the current one says the target)."""
        out = [] if self.prefiller is not None else [PREFILLER_HEADER]
        if self.rewritten is not None:
            out.append(MODEL_REWRITE[1].encode())
        return out

    def response_headers_removed(self) -> list[str]:
        """Headers taken off the answer: its length when a whole answer's model is renamed."""
        return ["content-length"] if self.restore is not None and not self.streamed else []


class EndpointPicker:
    """Routes ext_proc requests with the director's router and accounting."""

    def __init__(
        self,
        director: Director,
        max_fallbacks: int = 0,
        metrics: EppRequestMetrics | None = None,
        *,
        admission: AdmissionController | None = None,
    ) -> None:
        self._director = director
        self._metrics = metrics
        self._admission = admission  # None: requests are not admitted (all go at once)
        self._pool = director.pool
        self._max_endpoints = 1 + max_fallbacks
        self._address: dict[str, str] = {}
        self._by_address: dict[str, str] = {}
        self._by_host: dict[str, list[str]] = {}
        self._learn_addresses()

    def pick(
        self,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        request_id: str,
        subset: list[str] | None = None,
        *,
        token_ids: list[int] | None = None,
        parsed: Parsed | None = None,
        pin: Pin | None = None,
        admitted: Admitted = None,
    ) -> Exchange:
        """Route one request (`parsed`: its body as `parse` gave it, else parsed here; `pin`:
        the backend of the stored response it names, from `pin`; `admitted`: what `admit`
        gave, the error answered as one of routing); raises a `GatewayError` (400, 404, 429,
        503, ...) it cannot. A grant is the caller's until the exchange is returned."""
        allowed = None if subset is None else self._allowed(subset)
        path, _, query = path.partition("?")
        api = API_BY_PATH.get(path)
        stored = object_path(path) if api is None else None
        if api is None and stored is None:  # not an inference call (GET /v1/models): any
            return Exchange(None, self._destination(self._least_busy(allowed)))
        director = self._director
        method = headers.get(":method", "POST")
        if stored is not None and method not in STORED_METHODS[stored[1]]:
            allow = STORED_METHODS[stored[1]]
            raise MethodNotAllowedError(f"method {method} not allowed on {path}", allow=allow)
        rec = director.start(method, path, headers, request_id=request_id)
        try:
            if stored is not None:
                stream = replays(query)
                route = director.pick_stored(rec, stored[0], pin, stream=stream, subset=allowed)
                return self._lookup(rec, route, stored[0] if method == "DELETE" else None)
            req = (
                director.resolve(parse_inference_body(api or "", body), headers)
                if parsed is None
                else parsed
            )
            if isinstance(req, GatewayError):
                raise req
            if isinstance(admitted, GatewayError):  # shed, or its deadline passed in the queue
                rec.request, rec.model, rec.stream = req, req.model, req.stream
                raise admitted
            route = director.pick(rec, req, headers, subset=allowed, token_ids=token_ids, pin=pin)
        except GatewayError as exc:
            rec.status, rec.error = exc.status, exc.message
            director.finish(rec)
            if self._metrics is not None:
                asked = rec.request.model_asked if rec.request is not None else None
                labels = self._labels(asked or rec.model or "", rec.model or "", headers)
                self._metrics.refused(labels, exc.status)
            raise
        ex = Exchange(rec, self._destination(route.decision.ranked), route)
        if isinstance(admitted, Grant):
            ex.grant = admitted
        if self._metrics is not None:
            ex.labels = self._labels(req.model_asked or req.model, req.model, headers)
            self._metrics.picked(ex.labels, len(body))
        body = self._forwarded_body(ex, req, api, body)
        leg = "whole"
        if route.prefill is not None and (p := self._pool.find(route.prefill)) is not None:
            ex.prefill = director.dispatch(rec, route, p, leg="prefill")
            ex.prefiller, leg = self._destination((p.id,)), "decode"
        target = self._pool.get(route.decision.ranked[0])
        ex.attempt = director.dispatch(rec, route, target, leg=leg)
        if target.spec.rank is not None:  # one port, several ranks: name the rank
            ex.rank = rank_header(target)
            if ex.rank is None:  # SGLang: in the body
                ex.body = rank_body(target, ex.body or body)
            # The rank named holds for one engine: no fallback to another with it.
            ex.destination = self._destination(route.decision.ranked[:1])
        return ex

    @staticmethod
    def _forwarded_body(ex: Exchange, req: InferenceRequest, api: str | None, body: bytes) -> bytes:
        """The body as the engine gets it (in `ex.body` when changed): a rewrite's target model
        in it (its answer to be named back), and a stream asking for the usage the client did
        not ask for."""
        if req.model_asked is not None:
            body = ex.body = with_model(body, req.model)
            ex.rewritten, ex.restore = req.model, ModelNameRestorer(req.model, req.model_asked)
        if req.stream and api in STREAM_USAGE_APIS and (usage := ask_for_usage(body)) is not None:
            body = ex.body = usage
            ex.asked_usage = True
        return body

    def _lookup(self, rec: RequestRecord, route: Route, deleting: str | None) -> Exchange:
        """A request on a stored response, to its backend alone."""
        ex = Exchange(rec, self._destination(route.decision.ranked), route, deleting=deleting)
        backend = self._pool.get(route.decision.ranked[0])
        ex.attempt = self._director.dispatch(rec, route, backend, leg="lookup")
        return ex

    async def pin(self, path: str, parsed: Parsed | None) -> Pin | None:
        """The backend of the stored response the request names, if known (`Director.pin`):
        by its path (`/v1/responses/{id}`), else by its body's `previous_response_id`."""
        stored = object_path(path.split("?", 1)[0])
        if stored is not None:
            return await self._director.pin(stored[0])
        if isinstance(parsed, InferenceRequest) and parsed.previous_response_id is not None:
            return await self._director.pin(parsed.previous_response_id)
        return None

    async def settle(self, ex: Exchange) -> None:
        """Tell the director what the answer so far says of stored responses: a new one's
        id (awaited before the chunk holding it is answered), a deletion once it is done."""
        if ex.learned is not None and ex.attempt is not None:
            learned, ex.learned = ex.learned, None
            await self._director.stored(ex.attempt, learned)
        if ex.deleting is not None and ex.done and 200 <= ex.status < 300:
            deleted, ex.deleting = ex.deleting, None
            await self._director.deleted(deleted)

    async def parse(
        self, path: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> Parsed | None:
        """An inference call's body parsed (`Director.parse`: a large one off the event loop,
        its model resolved), or the error `pick` will answer with; None for other paths."""
        api = API_BY_PATH.get(path.split("?", 1)[0])
        if api is None:
            return None
        try:
            return await self._director.parse(api, body, headers)
        except GatewayError as exc:
            return exc

    async def admit(
        self, headers: Mapping[str, str], parsed: Parsed | None, body_bytes: int
    ) -> Admitted:
        """An inference call's place in admission (`AdmissionController.admit`: its band from
        its InferenceObjective, its tenant from its fairness id), waited for in the queue while
        the proxy holds the request; or the 429/503 `pick` answers. None when admission is
        off or the request is not admitted (a bad body, not an inference call)."""
        admission = self._admission
        if admission is None or not admission.section.enabled:
            return None
        if not isinstance(parsed, InferenceRequest):
            return None
        try:
            return await admission.admit(admission.identify({}, headers), body_bytes)
        except GatewayError as exc:
            return exc

    def give_back(self, admitted: Admitted) -> None:
        """A grant no exchange took (its request was refused after all) goes back."""
        if isinstance(admitted, Grant) and self._admission is not None:
            self._admission.give_back(admitted, None)

    async def token_ids(self, parsed: Parsed | None) -> list[int] | None:
        """The prompt's token ids for the precise index (`Director.token_ids`); None also for
        a body `pick` will refuse (it answers the error)."""
        if not isinstance(parsed, InferenceRequest):
            return None
        return await self._director.token_ids(parsed)

    def served(self, ex: Exchange, address: str) -> None:
        """The proxy says `address` served: credit it, and if it is not the backend picked,
        that one was skipped (it refused or failed: a passive failure)."""
        backend_id = self._backend_at(address)
        a, rec = ex.attempt, ex.rec
        if a is None or rec is None or ex.route is None or ex.done:
            return
        if backend_id is None or self._address.get(a.endpoint.id) == address:
            return  # the picked backend, or a rank at its address
        self._director.skipped(a)
        backend = self._pool.get(backend_id)
        ex.attempt = self._director.dispatch(rec, ex.route, backend, 2, leg=a.leg)

    def response_status(self, ex: Exchange, status: int, content_type: str = "") -> None:
        ex.status = status
        ex.streamed = content_type.startswith("text/event-stream")
        if ex.asked_usage and status < 400 and ex.streamed:
            ex.reader = UsageEventFilter()  # the usage event we asked for is not relayed
        if (p := ex.prefill) is not None:  # D answers after P's prefill (or without it)
            ex.prefill = None
            self._director.settled(p)
            self._director.end(p)
        if (a := ex.attempt) is None:
            return
        self._director.answered(a, status)
        if not ex.streamed:
            self._director.settled(a)
        rec = ex.rec
        if status < 400 and a.leg != "lookup" and rec is not None and self._director.learns(rec):
            ex.ids = ResponseIdReader(ex.streamed)

    def response_chunk(self, ex: Exchange, data: bytes, end: bool) -> bytes:
        """What to relay of this response body chunk (the usage event we added is not)."""
        out = ex.reader.feed(data)
        if end:
            out += ex.reader.finish()
        if ex.restore is not None:
            out = ex.restore.feed(out, end)
        if ex.ids is not None and (stored := ex.ids.feed(out, end)) is not None:
            ex.learned = stored  # told to the director (`settle`) before `out` is answered
        a, rec = ex.attempt, ex.rec
        if a is None or rec is None or not ex.streamed or ex.done:
            return out
        if b"data:" in out and not out.startswith(b"data: [DONE]"):
            self._director.event(rec, a)
        return out

    def finish(self, ex: Exchange, completed: bool) -> None:
        """The response ended (`completed`) or the stream was cut: settle the accounting."""
        if ex.done:
            return
        ex.done = True
        rec, a = ex.rec, ex.attempt
        if rec is None:
            return
        answered = completed and ex.status > 0
        usage = ex.reader.usage() if answered else None
        if a is not None:
            if answered:
                self._director.completed(rec, a, ex.status, usage)
            self._director.end(a)
        if ex.labels is not None and self._metrics is not None:
            seconds = self._director.clock() - rec.started if answered else None
            self._metrics.finished(ex.labels, ex.status, seconds, usage)
        if ex.prefill is not None:  # cut before D answered
            self._director.end(ex.prefill)
            ex.prefill = None
        rec.status = ex.status
        rec.client_gone = not answered
        if ex.grant is not None and self._admission is not None:
            self._admission.give_back(ex.grant, ex.reader.usage())
            ex.grant = None
        self._director.finish(rec)

    def _least_busy(self, allowed: set[str] | None) -> tuple[str, ...]:
        ready = [b for b in self._pool.healthy() if allowed is None or b.id in allowed]
        if not ready:
            raise NoHealthyBackendError("no healthy backend")
        return tuple(b.id for b in sorted(ready, key=lambda b: b.in_flight))

    def _destination(self, ranked: tuple[str, ...] | list[str]) -> str:
        chosen = ranked[: self._max_endpoints]
        if any(i not in self._address for i in chosen):  # joined the pool since
            self._learn_addresses()
        # Ranks behind one port share an address: each address once, in rank order.
        return ",".join(dict.fromkeys(self._address[i] for i in chosen))

    def _backend_at(self, address: str) -> str | None:
        if address not in self._by_address:
            self._learn_addresses()
        return self._by_address.get(address)

    def _labels(self, model: str, target: str, headers: Mapping[str, str]) -> RequestLabels:
        """The request's llm_d_epp_* labels: the model asked, the target, its fairness id and
        its objective's priority."""
        assert self._metrics is not None
        admission = self._admission
        priority = admission.priority(headers) if admission is not None else 0
        return self._metrics.labels(model, target, headers, priority)

    def _allowed(self, subset: list[str]) -> set[str]:
        """The backends a subset hint allows: the one at each entry's address, else (ports
        differ) every one at its IP, as the reference matches; an empty hint allows none."""
        if any(a not in self._by_address for a in subset):
            self._learn_addresses()
        allowed: set[str] = set()
        for address in subset:
            exact = self._by_address.get(address)
            allowed.update((exact,) if exact else self._by_host.get(_host(address), ()))
        return allowed

    def _learn_addresses(self) -> None:
        self._address = {b.id: urlsplit(b.spec.url).netloc for b in self._pool}
        self._by_address = {}
        for i, a in self._address.items():
            self._by_address.setdefault(a, i)  # ranks behind one port: the first
        self._by_host = {}
        for address, backend_id in self._by_address.items():
            self._by_host.setdefault(_host(address), []).append(backend_id)


def _host(address: str) -> str:
    """`ip:port` (or `[v6]:port`, or a bare IP) to its IP."""
    if address.startswith("["):
        return address[1 : address.find("]")]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address
