"""Every manifest under deploy/kubernetes validates offline, and the pieces fit together.

Core kinds are checked against Kubernetes' own schemas (`kubernetes-validate`, strict: an
unknown field fails); InferencePool, HTTPRoute and ServiceMonitor against the OpenAPI
schemas of their CRDs, vendored in tests/data/crd (see its README), made strict the same
way (the API server would silently drop an unknown field). Then the cross-references: the
route reaches the pool, the pool names the picker's Service and selects the model pods,
RBAC covers what discovery watches, probes hit real endpoints, kvgate's args parse.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gateway.access_control import AccessControl
from gateway.app import build_app
from gateway.auth import ADMIN_KEY_ENV, admin_access
from health.discovery.endpoints import KV_EVENTS_PORT, KV_EVENTS_REPLAY_PORT, kv_events_sources
from kvgate.cli import build_parser
from kvgate.cli.effective import effective_config
from routing.config.schema import ConfigError, parse_config

REPO = Path(__file__).resolve().parents[3]
KUBERNETES = REPO / "deploy" / "kubernetes"
CRDS = REPO / "tests" / "data" / "crd"
KUBE_VERSION = "1.33.0"  # the oldest minor still supported upstream when this was written
CRD_FILES = {
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepool-v1.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute-v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-v1.json",  # test_alerts.py
}
SHAPES = ("epp", "frontdoor")

Doc = dict[str, Any]


def render(directory: Path) -> list[Doc]:
    """The documents a kustomization lists, and the Secrets its `secretGenerator` makes from
    literals, as kustomize writes them (no patches are used)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[Doc] = []
    for entry in kustomization["resources"]:
        path = directory / entry
        if path.is_dir():
            docs += render(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for generator in kustomization.get("secretGenerator", []):
        pairs = (literal.partition("=") for literal in generator["literals"])
        data = {k: base64.b64encode(v.encode()).decode() for k, _, v in pairs}
        meta = {"name": generator["name"]}
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data})
    return docs


def _all_docs() -> Iterator[tuple[str, Doc]]:
    for shape in SHAPES:
        for doc in render(KUBERNETES / shape):
            yield f"{shape}/{doc['kind']}/{doc['metadata']['name']}", doc


def _strict(schema: Any) -> Any:
    """The schema with unknown fields rejected wherever it lists the known ones."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def crd_schema(api_version: str, kind: str) -> Doc:
    data = json.loads((CRDS / CRD_FILES[(api_version, kind)]).read_text())
    return _strict(data["schema"])  # type: ignore[no-any-return]


def validate(doc: Doc) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_FILES:
        jsonschema.Draft7Validator(crd_schema(*key)).validate(doc)
    else:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


@pytest.mark.parametrize(("name", "doc"), list(_all_docs()), ids=[n for n, _ in _all_docs()])
def test_every_manifest_validates(name: str, doc: Doc) -> None:
    validate(doc)


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("InferencePool", ("spec", "endpointPickerRef", "failureMode"), "Sometimes"),
        ("InferencePool", ("spec", "targetPorts"), [{"number": "8000"}]),
        ("InferencePool", ("spec", "selectr"), {}),
        ("HTTPRoute", ("spec", "rules", 0, "backendRefs", 0, "kind"), 7),
        ("ServiceMonitor", ("spec", "endpoints", 0, "intervals"), "15s"),
        (
            "Deployment:kvgate-epp",
            ("spec", "template", "spec", "containers", 0, "readinessProbe", "grpc"),
            {"port": "x"},
        ),
        ("Service", ("spec", "portz"), []),
    ],
)
def test_the_validators_catch_mistakes(kind: str, path: tuple[Any, ...], value: Any) -> None:
    kind, _, name = kind.partition(":")
    doc = copy.deepcopy(_one(render(KUBERNETES / "epp"), kind, name or None))
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(doc)


def _one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _container(deployment: Doc) -> Doc:
    return deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("shape", SHAPES)
def test_the_pool_selects_the_model_servers_on_their_port(shape: str) -> None:
    docs = render(KUBERNETES / shape)
    pool = _one(docs, "InferencePool")
    vllm = _one(docs, "Deployment", "vllm-llama3-8b")
    labels = vllm["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(pool["spec"]["selector"]["matchLabels"], labels)
    assert labels["kvgate.dev/engine"] == "vllm"
    ports = {p["containerPort"] for p in _container(vllm)["ports"]}
    assert {p["number"] for p in pool["spec"]["targetPorts"]} <= ports
    args = _container(vllm)["args"]
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(args)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_model_servers_annotations_name_the_sockets_vllm_publishes_on(shape: str) -> None:
    docs = render(KUBERNETES / shape)
    vllm = _one(docs, "Deployment", "vllm-llama3-8b")
    ranks = len(_one(docs, "InferencePool")["spec"]["targetPorts"])
    annotations = vllm["spec"]["template"]["metadata"]["annotations"]
    problems: list[str] = []
    sources = kv_events_sources(annotations, "10.0.0.1", ranks, problems.append)
    assert problems == []
    assert all(s is not None for s in sources)
    [flag] = [a for a in _container(vllm)["args"] if a.startswith("--kv-events-config=")]
    config = json.loads(flag.partition("=")[2])
    assert config["enable_kv_cache_events"] is True and config["publisher"] == "zmq"
    source = sources[0]
    assert source is not None
    bound = {"endpoint": source.endpoint, "replay_endpoint": source.replay}
    assert {k: v.replace("10.0.0.1", "*") for k, v in bound.items() if v} == {
        k: config[k] for k in bound
    }
    assert source.topic == config.get("topic", "")
    ports = {p["containerPort"] for p in _container(vllm)["ports"]}
    assert {int(annotations[KV_EVENTS_PORT]), int(annotations[KV_EVENTS_REPLAY_PORT])} <= ports


@pytest.mark.parametrize(("shape", "name"), [("epp", "kvgate-epp"), ("frontdoor", "kvgate")])
def test_kvgate_runs_as_configured_with_the_rights_it_needs(shape: str, name: str) -> None:
    docs = render(KUBERNETES / shape)
    deployment = _one(docs, "Deployment", name)
    pod_spec = deployment["spec"]["template"]["spec"]
    container = _container(deployment)
    args = container["args"]
    pool = _one(docs, "InferencePool")
    assert f"--pool={pool['metadata']['name']}" in args
    assert "--namespace=$(POD_NAMESPACE)" in args
    # RBAC: the service account may get/list/watch pods, inferencepools and the pool's
    # objectives and model rewrites.
    assert pod_spec["serviceAccountName"] == name
    binding = _one(docs, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name}]
    role = _one(docs, "Role", binding["roleRef"]["name"])
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    watched = (
        ("", "pods"),
        ("inference.networking.k8s.io", "inferencepools"),
        ("llm-d.ai", "inferenceobjectives"),
        ("llm-d.ai", "inferencemodelrewrites"),
    )
    for group, resource in watched:
        assert {(group, resource, v) for v in ("get", "list", "watch")} <= granted
    # The config file it reads is valid kvgate config.
    config_map = _one(docs, "ConfigMap", pod_spec["volumes"][0]["configMap"]["name"])
    raw = yaml.safe_load(config_map["data"]["kvgate.yaml"])
    build_app(parse_config({**raw, "discovery": {"pool": pool["metadata"]["name"]}}))
    mount = container["volumeMounts"][0]["mountPath"]
    assert f"--config={mount}/kvgate.yaml" in args
    # Graceful termination, non-root, a disruption budget and a scrape target.
    assert pod_spec["terminationGracePeriodSeconds"] >= 30
    assert container["lifecycle"]["preStop"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert _one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector
    service = _one(docs, "Service", name)
    assert service["spec"]["selector"] == selector
    monitor = _one(docs, "ServiceMonitor")
    assert _labels_match(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {
        p["name"] for p in container["ports"]
    }


def test_the_epp_serves_what_the_pool_and_route_expect() -> None:
    docs = render(KUBERNETES / "epp")
    pool, route = _one(docs, "InferencePool"), _one(docs, "HTTPRoute")
    [backend] = route["spec"]["rules"][0]["backendRefs"]
    assert backend == {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": pool["metadata"]["name"],
    }
    picker = pool["spec"]["endpointPickerRef"]
    service = _one(docs, "Service", picker["name"])
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports == {"grpc": 9002, "grpc-health": 9003, "metrics": 9090}
    assert picker["port"]["number"] == ports["grpc"]
    container = _container(_one(docs, "Deployment", "kvgate-epp"))
    args = container["args"]
    assert args[0] == "epp"
    assert {"--grpc-port=9002", "--health-port=9003", "--metrics-port=9090"} <= set(args)
    assert container["livenessProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert container["readinessProbe"]["grpc"] == {"port": 9003, "service": "readiness"}


async def _status(app: Any, path: str) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
    await app(scope, receive, send)
    return int(sent[0]["status"])


async def test_the_front_doors_probes_and_args_are_real(tmp_path: Path) -> None:
    docs = render(KUBERNETES / "frontdoor")
    deployment = _one(docs, "Deployment", "kvgate")
    container = _container(deployment)
    # The args with the ConfigMap's file where the pod mounts it: the effective config.
    config_map = _one(docs, "ConfigMap", "kvgate")
    (tmp_path / "kvgate.yaml").write_text(config_map["data"]["kvgate.yaml"])
    args = [a.replace("/etc/kvgate", str(tmp_path)) for a in container["args"]]
    cfg = effective_config(build_parser().parse_args(args))
    assert (cfg.server.host, cfg.server.port) == ("0.0.0.0", 8000)
    assert cfg.discovery.pool == _one(docs, "InferencePool")["metadata"]["name"]
    assert container["ports"] == [
        {"name": "http", "containerPort": cfg.server.port},
        {"name": "admin", "containerPort": cfg.server.admin_port},
    ]
    app = build_app(cfg)
    live = container["livenessProbe"]["httpGet"]["path"]
    ready = container["readinessProbe"]["httpGet"]["path"]
    assert (live, ready) == ("/health", "/ready")
    assert await _status(app, live) == 200  # liveness: the process answers
    assert await _status(app, ready) == 503  # readiness: no healthy backend yet
    assert await _status(app, "/no-such-path") == 404
    assert await _status(app, "/metrics") == 404  # on the admin port only


def test_kvgate_subcommands_in_manifests_exist() -> None:
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for name, doc in _all_docs():
        if doc["kind"] != "Deployment" or _container(doc)["image"] != "kvgate":
            continue
        args = _container(doc)["args"]
        assert args[0] in commands, name
        parser.parse_args(args)


def test_the_front_doors_replicas_share_their_routing_state_through_redis() -> None:
    docs = render(KUBERNETES / "frontdoor")
    gateway = _one(docs, "Deployment", "kvgate")
    raw = yaml.safe_load(_one(docs, "ConfigMap", "kvgate")["data"]["kvgate.yaml"])
    state = parse_config({**raw, "discovery": {"pool": "p"}}).state
    assert gateway["spec"]["replicas"] > 1 and state.backend == "redis"
    host, _, port = state.url.removeprefix("redis://").partition("/")[0].partition(":")
    service = _one(docs, "Service", host)
    [service_port] = service["spec"]["ports"]
    assert service_port["port"] == int(port)
    redis = _one(docs, "Deployment", host)
    pod_labels = redis["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(service["spec"]["selector"], pod_labels)
    assert service_port["targetPort"] in {p["name"] for p in _container(redis)["ports"]}
    # Only the gateway's pods may reach it.
    policy = _one(docs, "NetworkPolicy", host)
    assert _labels_match(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    [allowed] = policy["spec"]["ingress"]
    [source] = allowed["from"]
    gateway_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(source["podSelector"]["matchLabels"], gateway_labels)
    assert allowed["ports"] == [{"protocol": "TCP", "port": int(port)}]


def test_the_front_doors_admin_port_needs_a_key_the_operator_must_set() -> None:
    directory = KUBERNETES / "frontdoor"
    docs = render(directory)
    container = _container(_one(docs, "Deployment", "kvgate"))
    [env] = [e for e in container["env"] if e["name"] == ADMIN_KEY_ENV]
    ref = env["valueFrom"]["secretKeyRef"]
    secret = _one(docs, "Secret", ref["name"])
    placeholder = base64.b64decode(secret["data"][ref["key"]]).decode()
    # Prometheus presents the same key; kustomize keeps the Secret's name for it to find.
    [endpoint] = _one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": ref}
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True
    # The shipped placeholder is no key: kvgate refuses to start with it.
    raw = yaml.safe_load(_one(docs, "ConfigMap", "kvgate")["data"]["kvgate.yaml"])
    cfg = parse_config({**raw, "discovery": {"pool": "p"}})
    assert cfg.server.admin_port is not None
    with pytest.raises(ValueError, match="documented example key"):
        admin_access(cfg, {ADMIN_KEY_ENV: placeholder})
    with pytest.raises(ConfigError, match=ADMIN_KEY_ENV):
        AccessControl(cfg, {ADMIN_KEY_ENV: placeholder})
    assert admin_access(cfg, {ADMIN_KEY_ENV: "a-key-of-the-operators-own"}).digest is not None
