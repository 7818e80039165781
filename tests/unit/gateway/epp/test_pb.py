"""The generated ext_proc modules: importable beside OpenTelemetry's protos, no top-level
`envoy`/`xds`/`udpa`/`validate` package loaded, no xds-protos required, and the checked-in code
what proto/generate.py makes from proto/."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
_FOREIGN = ("envoy", "xds", "udpa", "validate")


def test_the_picker_and_the_otlp_exporters_import_together() -> None:
    # In a fresh interpreter: what one process of `kvgate epp` with tracing on loads.
    code = (
        "import sys\n"
        "import gateway.epp.server\n"
        "from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope\n"
        "from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter\n"
        "from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter\n"
        "from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb\n"
        "assert pb.ProcessingRequest.DESCRIPTOR.full_name == "
        "'envoy.service.ext_proc.v3.ProcessingRequest'\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({_FOREIGN!r})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_grpc_method_is_envoys() -> None:
    from gateway.epp.pb.envoy.service.ext_proc.v3 import external_processor_pb2 as pb

    [service] = pb.DESCRIPTOR.services_by_name.values()
    assert service.full_name == "envoy.service.ext_proc.v3.ExternalProcessor"
    assert [m.name for m in service.methods] == ["Process"]


def test_no_extra_needs_xds_protos() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"].values()
    wanted = [*project["dependencies"], *(d for extra in extras for d in extra)]
    assert not [d for d in wanted if d.startswith("xds-protos")]


def test_the_generated_code_is_current(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools is not installed (the dev extra has it)")
    script = REPO / "proto" / "generate.py"
    out = subprocess.run(
        [sys.executable, str(script), "--check", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr + "run: python proto/generate.py"
