"""Envoy's ext_proc API as Python protobuf and gRPC modules, generated from proto/ (do not edit).

`envoy.service.ext_proc.v3` and what it imports, from Envoy's data-plane API, cncf/xds and
protoc-gen-validate (all Apache-2.0; proto/README.md names the commits). Generated with
`python proto/generate.py`, imports rewritten under `gateway.epp.pb`: kvgate[epp] installs no
top-level `envoy` package, so it no longer needs xds-protos, whose copy of
`opentelemetry/proto` broke kvgate[otel]'s exporters.
"""
