"""The YAML config file: schema (validated with pydantic, errors name the field path) and loader.

Loading has two phases: `load_config` validates the file into a `GatewayConfig`; the
composition root then builds runtime objects from it (the gateway: pool, routing stack,
clients; the simulator: routing stack and the scrape cadence from `health:`). One schema and
one loader for both, so every default lives here once; the `routing:` section's schema is in
`scoring.profiles`. No web library is imported, so the simulator can load it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from scoring.profiles import RoutingSection

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


class BackendEntry(_Section):
    url: str
    id: str | None = None
    engine: EngineType = "vllm"
    models: list[str] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        v = v.rstrip("/")  # before the check, so "http:///" (no host) fails it too
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v


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


class GatewayConfig(_Section):
    server: ServerSection = ServerSection()
    upstream: UpstreamSection = UpstreamSection()
    health: HealthSection = HealthSection()
    backends: list[BackendEntry] = Field(default_factory=list)
    discovery: DiscoverySection = DiscoverySection()
    routing: RoutingSection = RoutingSection()
    admission: AdmissionSection = AdmissionSection()


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names each bad field's path."""


def load_config(path: str | Path | None) -> GatewayConfig:
    if path is None:
        return GatewayConfig()
    try:
        # Bytes: PyYAML detects the encoding and reports undecodable input as a YAMLError.
        raw = yaml.safe_load(Path(path).read_bytes())
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
