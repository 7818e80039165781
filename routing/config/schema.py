"""The YAML config file: schema (validated with pydantic, errors name the field path) and loader.

Loading has two phases: `load_config` validates the file into a `GatewayConfig`; the
composition root then builds runtime objects from it (the gateway: pool, routing stack,
clients; the simulator: routing stack and the scrape cadence from `health:`). One schema and
one loader for both, so every default lives here once; the `routing:` section's schema is in
`routing.config.profiles`. No web library is imported, so the simulator can load it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from routing.config.checks import check_backend_url, check_zmq_endpoint, duplicate_id_errors
from routing.config.disaggregation import DisaggregationSection, Role
from routing.config.example_keys import check_not_example
from routing.config.objectives import ObjectiveEntry, RewriteEntry, check_unique_objectives
from routing.config.profiles import RoutingSection
from routing.config.responses import ResponsesSection
from routing.config.tuning import TuningSection
from routing.config.yaml_loader import load_yaml

EngineType = Literal["vllm", "sglang", "trtllm", "openai"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSection(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    access_log: bool = True
    record_path: str | None = Field(
        None, description="append a kvgate trace of the completed inference requests here"
    )
    admin_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="serve /admin/* and /metrics on this port only (404 on `port`), and the "
        "admin API's OpenAPI page /docs, which `port` never serves",
    )
    admin_host: str | None = Field(None, description="admin listener address (default: host)")
    header_timeout_s: float = Field(
        10.0, gt=0, description="request line and headers must arrive within this time"
    )
    body_timeout_s: float = Field(60.0, gt=0, description="the whole request body, once started")
    idle_timeout_s: float = Field(30.0, gt=0, description="keep-alive connection with no request")
    max_connections: int | None = Field(
        None,
        gt=0,
        description="open client connections; more are closed on accept (null: what the "
        "file-descriptor limit leaves beside upstream.max_connections)",
    )
    max_header_bytes: int = Field(
        65536, ge=1024, description="request line and headers; larger heads get 431"
    )
    max_headers: int = Field(100, ge=1, description="header lines per request; more get 431")
    drain_delay_s: float = Field(
        5.0, ge=0, description="SIGTERM: keep serving this long while /ready answers 503"
    )
    shutdown_grace_s: float = Field(
        30.0, ge=0, description="then in-flight responses get this long before being ended"
    )
    tls_cert_file: str | None = Field(
        None, description="PEM certificate chain: serve HTTPS (reloaded when the file changes)"
    )
    tls_key_file: str | None = Field(None, description="PEM private key of tls_cert_file")

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSection:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        return self


class UpstreamSection(_Section):
    connect_timeout_s: float = Field(2.0, gt=0)
    read_timeout_s: float = Field(300.0, gt=0, description="longest wait for the next byte")
    write_timeout_s: float = Field(30.0, gt=0)
    pool_timeout_s: float = Field(5.0, gt=0)
    max_connections: int = Field(1024, gt=0)
    max_keepalive_connections: int = Field(256, ge=0)
    keepalive_expiry_s: float = Field(
        4.0, gt=0, description="below the engines' keep-alive timeout (uvicorn's is 5 s)"
    )
    max_attempts: int = Field(2, ge=1, le=10, description="tries per request, failover included")
    # vLLM (and SGLang) send a stream's response head once the request is accepted, before
    # the first token; a non-streaming answer's head only when generation is done.
    first_byte_timeout_s: float = Field(
        30.0,
        gt=0,
        description="streaming requests: longest wait from request sent to response head; "
        "then fail over to the next backend (504 if none is left)",
    )
    first_byte_timeout_non_stream_s: float | None = Field(
        None,
        gt=0,
        description="the same for non-streaming requests, whose head comes only after the "
        "whole generation (null: no limit but read_timeout_s)",
    )
    retry_budget_ratio: float = Field(
        0.2, ge=0, description="failover retries allowed per request (over the last 10 s)"
    )
    retry_budget_min_per_s: float = Field(
        5.0, ge=0, description="failover retries per second allowed whatever the traffic"
    )


class HealthSection(_Section):
    probe_interval_s: float = Field(5.0, gt=0)
    probe_timeout_s: float = Field(2.0, gt=0)
    fail_threshold: int = Field(3, ge=1)
    success_threshold: int = Field(2, ge=1)
    passive_fail_threshold: int = Field(3, ge=1)
    ejection_base_s: float = Field(5.0, gt=0)
    ejection_max_s: float = Field(300.0, gt=0)
    model_refresh_s: float = Field(30.0, gt=0)
    scrape_interval_s: float = Field(0.05, gt=0, description="engine /metrics polling period")
    scrape_timeout_s: float = Field(0.5, gt=0)
    metrics_stale_after_s: float = Field(0.2, gt=0, description="older metrics count as unknown")
    max_scrape_bytes: int = Field(
        4 * 1024 * 1024,
        gt=0,
        description="longest /metrics, /health or /v1/models answer read; longer ones fail",
    )


class KvEventsEntry(_Section):
    """Where an engine publishes its KV-cache events (vLLM `--kv-events-config`)."""

    endpoint: str = Field(description="the engine's PUB socket, tcp://host:port or ipc://path")
    replay: str | None = Field(
        None, description="its replay ROUTER socket (vLLM replay_endpoint); null: gaps are lost"
    )
    topic: str = Field("", description="topic prefix subscribed to (vLLM's default is empty)")

    @field_validator("endpoint", "replay")
    @classmethod
    def _zmq_endpoint(cls, v: str | None) -> str | None:
        return None if v is None else check_zmq_endpoint(v)


class BackendEntry(_Section):
    url: str
    id: str | None = None
    engine: EngineType = "vllm"
    models: list[str] = Field(default_factory=list)
    kv_events: KvEventsEntry | None = Field(
        None, description="subscribe to the engine's KV-cache events (a bare URL: the endpoint)"
    )
    role: Role = Field("both", description="prefill, decode or both (disaggregated P/D pools)")
    bootstrap_port: int | None = Field(
        None, ge=1, le=65535, description="SGLang prefill backends: the KV bootstrap port"
    )
    dp_size: int | None = Field(
        None,
        ge=1,
        le=256,
        description="data-parallel ranks behind the URL, each a routing target (default: as "
        "the engine's metrics or server info say; 1: never split)",
    )
    dp_rank_field: Literal["routed_dp_rank", "data_parallel_rank"] = Field(
        "routed_dp_rank", description="SGLang: the body field naming the rank (older servers)"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        return check_backend_url(v)

    @field_validator("kv_events", mode="before")
    @classmethod
    def _endpoint_alone(cls, v: object) -> object:
        return {"endpoint": v} if isinstance(v, str) else v


class DiscoverySection(_Section):
    """Backends from the ready pods of a Kubernetes InferencePool (in addition to `backends`);
    off while `pool` is unset."""

    pool: str | None = Field(None, min_length=1, description="InferencePool name")
    namespace: str = Field("default", min_length=1)
    kube_api: str | None = Field(
        None, description="API server URL, no credentials (default: in-cluster or kubeconfig)"
    )
    watch_timeout_s: int = Field(300, gt=0, description="asked of the server per watch")
    backoff_max_s: float = Field(30.0, gt=0, description="longest wait between failed lists")
    objects_api: str | None = Field(
        "llm-d.ai/v1alpha2",
        pattern=r"^[a-z0-9.-]+/v[a-z0-9]+$",
        description="group/version of the InferenceObjective and InferenceModelRewrite objects "
        "watched beside the pool (those naming it); null: none",
    )


Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]


class ApiKeyEntry(_Section):
    """One client API key: stored as the SHA-256 of the key (`kvgate hash-key`), never the key."""

    name: str = Field(min_length=1, description="who holds the key (logs, fairness)")
    sha256: Sha256Hex = Field(description="hex SHA-256 of the key's UTF-8 bytes")
    tier: str = Field("default", min_length=1, description="admission tier of the key")
    requests_per_minute: int | None = Field(None, gt=0, description="per-key request limit")
    tokens_per_minute: int | None = Field(None, gt=0, description="per-key token limit")

    @field_validator("sha256")
    @classmethod
    def _lower_hex(cls, v: str) -> str:
        return check_not_example(v.lower())


def check_unique_keys(keys: list[ApiKeyEntry]) -> list[ApiKeyEntry]:
    """Names and hashes each appear once (the keys file is checked with this too)."""
    for field in ("name", "sha256"):
        seen: set[str] = set()
        for k in keys:
            value = getattr(k, field)
            if value in seen:
                raise ValueError(f"two API keys have the same {field} {value!r}")
            seen.add(value)
    return keys


class SecuritySection(_Section):
    """Client API keys, the admin credential, and which headers pass the gateway. Keys may
    also come from env KVGATE_API_KEYS, the admin key from KVGATE_ADMIN_KEY."""

    api_keys: list[ApiKeyEntry] = Field(default_factory=list, description="hashed client keys")
    api_keys_file: str | None = Field(
        None, description="YAML list of api_keys entries, re-read when it changes or on SIGHUP"
    )
    admin_key_sha256: Sha256Hex | None = Field(
        None, description="SHA-256 of the key that /admin/* and /metrics need"
    )
    backend_header: Literal["opaque", "id", "off"] = Field(
        "opaque", description="x-kvgate-backend: keyed hash of the backend id, the id, or none"
    )
    backend_header_salt: SecretStr | None = Field(
        None, description="key of the opaque ids (default: random per process); never printed"
    )
    upstream_authorization: Literal["pass", "strip", "replace"] | None = Field(
        None,
        description="client Authorization towards engines; replace: Bearer "
        "$KVGATE_UPSTREAM_API_KEY (default: strip with API keys, else pass)",
    )
    forwarded_for: bool = Field(
        True, description="append the client address to X-Forwarded-For, set X-Forwarded-Proto"
    )

    @field_validator("admin_key_sha256")
    @classmethod
    def _not_example(cls, v: str | None) -> str | None:
        return None if v is None else check_not_example(v.lower())

    @model_validator(mode="after")
    def _unique(self) -> SecuritySection:
        check_unique_keys(self.api_keys)
        return self


class AdmissionSection(_Section):
    """Admission control in front of routing: a bounded queue with priority bands and fair
    sharing between tenants, shedding with 429 when the fleet is full, and per-key limits."""

    enabled: bool = Field(True, description="queue and shed when every backend is saturated")
    max_queue: int = Field(1024, ge=0, description="requests waiting at most; 0: shed at once")
    queue_timeout_s: float = Field(
        30.0, gt=0, description="longest wait in the queue; then 503 (and no wait expected longer)"
    )
    max_in_flight_per_backend: int | None = Field(
        None,
        gt=0,
        description="admitted requests per healthy backend; null: the engines' saturation "
        "(the saturation-filter's thresholds) decides",
    )
    priority_header: str | None = Field(
        None, min_length=1, description="request header naming a band (null: not honoured)"
    )
    tenant_header: str | None = Field(
        None, min_length=1, description="request header naming the tenant when no API key does"
    )
    bands: list[str] = Field(
        default_factory=lambda: ["critical", "standard", "sheddable"],
        min_length=1,
        description="priority bands, highest first; requests default to 'standard' (else the last)",
    )
    tiers: dict[str, str] = Field(
        default_factory=dict, description="API key tier -> band (a key's tier beats the header)"
    )
    sheddable_holdback: float = Field(
        0.2,
        ge=0.0,
        lt=1.0,
        description="share of the fleet's places the last band (sheddable) never takes: kept "
        "for the other bands' next requests",
    )

    @field_validator("priority_header", "tenant_header")
    @classmethod
    def _lower(cls, v: str | None) -> str | None:
        return v.lower() if v is not None else None

    @model_validator(mode="after")
    def _known_bands(self) -> AdmissionSection:
        if len(set(self.bands)) != len(self.bands):
            raise ValueError("bands must be distinct")
        unknown = sorted({b for b in self.tiers.values() if b not in self.bands})
        if unknown:
            raise ValueError(f"tiers name unknown band(s) {', '.join(unknown)}")
        return self


class TokenizerEntry(_Section):
    """How the gateway turns one model's prompts into the engine's exact token ids (for
    tokenizer-exact block keys): a local tokenizer.json and chat template, or the engine's
    `/tokenize`. Models without an entry keep the byte approximation."""

    model: str = Field(min_length=1, description='a served model name, or "*" for any other')
    source: Literal["local", "engine"] = Field(
        description="local: tokenizer.json + chat template here; engine: ask POST /tokenize"
    )
    path: str | None = Field(
        None,
        min_length=1,
        description="local: a directory with tokenizer.json (+ tokenizer_config.json), or the "
        "tokenizer.json file",
    )
    chat_template: str | None = Field(
        None,
        min_length=1,
        description="local: a .jinja chat template file (default: tokenizer_config.json's)",
    )
    cache_entries: int = Field(4096, ge=0, description="engine: prompts whose ids are cached")
    timeout_s: float = Field(1.0, gt=0, description="engine: longest wait for /tokenize")

    @model_validator(mode="after")
    def _local_needs_path(self) -> TokenizerEntry:
        if self.source == "local" and self.path is None:
            raise ValueError("source local needs a path (a directory with tokenizer.json)")
        return self


def check_unique_models(entries: list[TokenizerEntry]) -> list[TokenizerEntry]:
    seen: set[str] = set()
    for entry in entries:
        if entry.model in seen:
            raise ValueError(f"two tokenizers entries name model {entry.model!r}")
        seen.add(entry.model)
    return entries


class StateSection(_Section):
    """Where the gateway's routing state is shared with other gateway replicas: `memory`
    keeps it in this process (and its sibling workers, `serve --workers N`); `redis`
    replicates it through a Redis server (placements, withdrawals, forgets, TTFT points,
    in-flight requests and queued prefill), while decisions keep reading the local mirror."""

    backend: Literal["memory", "redis"] = Field(
        "memory", description="memory: this process only; redis: shared through `url`"
    )
    url: str = Field(
        "redis://127.0.0.1:6379/0", description="the Redis server (used when backend is redis)"
    )
    namespace: str = Field(
        "kvgate",
        min_length=1,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="key prefix; keys are namespaced further by pool (hashes by model)",
    )

    @field_validator("url")
    @classmethod
    def _redis_url(cls, v: str) -> str:
        if not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v


class GatewayConfig(_Section):
    server: ServerSection = ServerSection()
    upstream: UpstreamSection = UpstreamSection()
    health: HealthSection = HealthSection()
    backends: list[BackendEntry] = Field(default_factory=list)
    discovery: DiscoverySection = DiscoverySection()
    routing: RoutingSection = RoutingSection()
    security: SecuritySection = SecuritySection()
    admission: AdmissionSection = AdmissionSection()
    tokenizers: list[TokenizerEntry] = Field(
        default_factory=list, description="per-model prompt tokenizers (exact block keys)"
    )
    state: StateSection = StateSection()
    disaggregation: DisaggregationSection = DisaggregationSection()
    responses: ResponsesSection = ResponsesSection()
    tuning: TuningSection = TuningSection()
    objectives: list[ObjectiveEntry] = Field(
        default_factory=list, description="InferenceObjectives by name (priority, sheddable)"
    )
    rewrites: list[RewriteEntry] = Field(
        default_factory=list, description="InferenceModelRewrite rules (weighted model targets)"
    )

    @field_validator("tokenizers")
    @classmethod
    def _one_entry_per_model(cls, v: list[TokenizerEntry]) -> list[TokenizerEntry]:
        return check_unique_models(v)

    @field_validator("objectives")
    @classmethod
    def _one_entry_per_objective(cls, v: list[ObjectiveEntry]) -> list[ObjectiveEntry]:
        return check_unique_objectives(v)

    @model_validator(mode="after")
    def _unique_backend_ids(self) -> GatewayConfig:
        if errors := duplicate_id_errors(self.backends):
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names each bad field's path."""


def load_config(path: str | Path | None) -> GatewayConfig:
    if path is None:
        return GatewayConfig()
    try:
        # Bytes: PyYAML detects the encoding and reports undecodable input as a YAMLError.
        raw = load_yaml(Path(path).read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    return parse_config(raw or {}, source=str(path))


def parse_config(raw: object, source: str = "config") -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: {exc.error_count()} invalid field(s)"]
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(root)"
        lines.append(f"  {path}: {err['msg']}")
    return "\n".join(lines)
