"""`kvgate epp`'s process settings (no gRPC import, so the CLI can show the defaults without
loading it). The ports are the reference endpoint picker's; so is one endpoint per answer
(`max_endpoints`): an `ORIGINAL_DST` cluster reads one address, and only a proxy that walks
a list (Envoy's `override_host` policy) can use fallbacks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EppSettings:
    host: str = "127.0.0.1"
    grpc_port: int = 9002  # ext_proc
    health_port: int = 9003  # grpc.health.v1
    metrics_port: int = 9090  # Prometheus
    max_endpoints: int = 1  # addresses in x-gateway-destination-endpoint: the pick, then fallbacks
    secure_serving: bool = True  # ext_proc over TLS (gateway.epp.tls)
    cert_path: str | None = None  # tls.crt and tls.key, reloaded; None: self-signed


DEFAULT_EPP = EppSettings()
