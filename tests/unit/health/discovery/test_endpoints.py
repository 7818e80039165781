from __future__ import annotations

import pytest

from health.discovery.endpoints import (
    DP_SIZE_LABEL,
    KV_EVENTS_PORT,
    KV_EVENTS_REPLAY_PORT,
    KV_EVENTS_TOPIC,
    KvEventsSource,
    PoolSpec,
    PoolSpecError,
    label_selector,
    parse_pool,
    pod_endpoints,
    pod_ready,
    pool_endpoints,
)
from tests.support.fake_kube import Obj, inference_pool, pod

POOL = PoolSpec(selector=(("app", "llm"),), target_ports=(8000, 8001))


def test_parse_pool_reads_selector_ports_and_protocol() -> None:
    obj = inference_pool("p", selector={"b": "2", "a": "1"}, ports=(8000, 9000))
    obj["spec"]["appProtocol"] = "kubernetes.io/h2c"
    spec = parse_pool(obj)
    assert spec == PoolSpec((("a", "1"), ("b", "2")), (8000, 9000), "kubernetes.io/h2c")
    assert label_selector(spec) == "a=1,b=2"
    assert parse_pool(inference_pool("p")).app_protocol == "http"


@pytest.mark.parametrize(
    "spec",
    [None, {"selector": {"matchLabels": {"a": "1"}}}, {"targetPorts": [{"number": 0}]}],
)
def test_parse_pool_rejects_pools_without_usable_ports(spec: object) -> None:
    with pytest.raises(PoolSpecError):
        parse_pool({"spec": spec})


def test_one_endpoint_per_target_port_of_a_ready_selected_pod() -> None:
    eps = pod_endpoints(pod("a", "10.1.2.3"), POOL)
    assert [e.url for e in eps] == ["http://10.1.2.3:8000", "http://10.1.2.3:8001"]
    assert eps[0].address == "10.1.2.3:8000"
    assert {e.pod for e in eps} == {"a"}


def test_ipv6_pod_ips_are_bracketed() -> None:
    [ep, _] = pod_endpoints(pod("a", "fd00::5"), POOL)
    assert ep.url == "http://[fd00::5]:8000"


@pytest.mark.parametrize(
    ("labels", "engine"),
    [
        ({"app": "llm"}, "vllm"),
        ({"app": "llm", "kvgate.dev/engine": "sglang"}, "sglang"),
        ({"app": "llm", "kvgate.dev/engine": "made-up"}, "vllm"),
        ({"app": "llm", "inference.networking.k8s.io/engine-type": "sglang"}, "sglang"),
        (
            {
                "app": "llm",
                "kvgate.dev/engine": "trtllm",
                "inference.networking.k8s.io/engine-type": "sglang",
            },
            "trtllm",
        ),
    ],
)
def test_engine_comes_from_the_pod_label(labels: dict[str, str], engine: str) -> None:
    assert {e.engine for e in pod_endpoints(pod("a", labels=labels), POOL)} == {engine}


@pytest.mark.parametrize(
    "obj",
    [
        pod("a", ready=False),
        pod("a", ip=None),
        pod("a", terminating=True),
        pod("a", labels={"app": "web"}),
        pod("a", labels={}),
    ],
)
def test_unready_unaddressed_terminating_or_unselected_pods_give_nothing(obj: Obj) -> None:
    assert pod_endpoints(obj, POOL) == []


def test_ready_needs_the_ready_condition_true() -> None:
    no_conditions = pod("a")
    no_conditions["status"]["conditions"] = []
    assert not pod_ready(no_conditions)
    assert pod_ready(pod("a"))


def test_an_empty_selector_selects_nothing_and_no_pool_means_no_endpoints() -> None:
    assert pod_endpoints(pod("a"), PoolSpec((), (8000,))) == []
    assert pool_endpoints(None, [pod("a")]) == frozenset()
    assert len(pool_endpoints(POOL, [pod("a", "10.0.0.1"), pod("b", "10.0.0.2")])) == 4


def _warned(obj: Obj, pool: PoolSpec = POOL) -> tuple[list[KvEventsSource | None], list[str]]:
    problems: list[str] = []
    eps = pod_endpoints(obj, pool, lambda name, problem: problems.append(f"{name}: {problem}"))
    return [e.kv_events for e in eps], problems


def test_kv_event_annotations_give_each_rank_its_offset_publisher() -> None:
    notes = {KV_EVENTS_PORT: "5557", KV_EVENTS_REPLAY_PORT: "6557", KV_EVENTS_TOPIC: "kv"}
    sources, problems = _warned(pod("a", "10.1.2.3", annotations=notes))
    assert sources == [
        KvEventsSource("tcp://10.1.2.3:5557", "tcp://10.1.2.3:6557", "kv"),
        KvEventsSource("tcp://10.1.2.3:5558", "tcp://10.1.2.3:6558", "kv"),  # rank 1: + 1
    ]
    assert problems == []
    one_port = PoolSpec(selector=(("app", "llm"),), target_ports=(8000,))
    [source], _ = _warned(pod("a", "fd00::1", annotations={KV_EVENTS_PORT: "5557"}), one_port)
    assert source == KvEventsSource("tcp://[fd00::1]:5557")  # no replay, every topic


def test_pods_without_the_port_annotation_publish_nothing() -> None:
    assert _warned(pod("a")) == ([None, None], [])
    assert _warned(pod("a", annotations={KV_EVENTS_REPLAY_PORT: "5558"})) == ([None, None], [])


@pytest.mark.parametrize("port", ["", "0", "65536", "65535", "http", "-1", "55٥7", " 5557x"])
def test_an_invalid_port_annotation_means_no_events_and_a_warning(port: str) -> None:
    sources, problems = _warned(pod("a", annotations={KV_EVENTS_PORT: port}))
    assert sources == [None, None]  # 65535: rank 1 would need 65536
    assert len(problems) == 1 and problems[0].startswith(f"a: {KV_EVENTS_PORT}")


@pytest.mark.parametrize("replay", ["x", "0", "5557", "5558", "5556", "65535"])
def test_an_unusable_replay_port_drops_only_the_replay(replay: str) -> None:
    notes = {KV_EVENTS_PORT: "5557", KV_EVENTS_REPLAY_PORT: replay}
    sources, problems = _warned(pod("a", "10.0.0.1", annotations=notes))
    assert [s.endpoint if s else None for s in sources] == [
        "tcp://10.0.0.1:5557",
        "tcp://10.0.0.1:5558",
    ]
    assert all(s is not None and s.replay is None for s in sources)
    assert len(problems) == 1 and KV_EVENTS_REPLAY_PORT in problems[0]


def test_odd_annotation_values_never_break_discovery() -> None:
    obj = pod("a", "10.0.0.1", annotations={KV_EVENTS_PORT: "5557"})
    obj["metadata"]["annotations"][KV_EVENTS_TOPIC] = 7
    sources, problems = _warned(obj)
    assert sources[0] == KvEventsSource("tcp://10.0.0.1:5557")
    assert len(problems) == 1
    obj["metadata"]["annotations"] = ["not", "a", "map"]
    assert _warned(obj) == ([None, None], [])
    obj["metadata"]["annotations"] = {KV_EVENTS_PORT: 5557}  # not a string as the API sends
    assert _warned(obj)[0] == [None, None]
    # pool_endpoints passes the warnings on, and the default ignores them
    assert len(pool_endpoints(POOL, [obj])) == 2


def test_the_dp_size_label_makes_one_port_ranks() -> None:
    one_port = PoolSpec(selector=(("app", "llm"),), target_ports=(8000,))
    labels = {"app": "llm", DP_SIZE_LABEL: "4"}
    [ep] = pod_endpoints(pod("a", labels=labels), one_port)
    assert ep.dp_size == 4
    problems: list[str] = []
    eps = pod_endpoints(pod("a", labels=labels), POOL, lambda n, p: problems.append(p))
    assert [e.dp_size for e in eps] == [None, None] and "a port per rank" in problems[0]
    bad = {"app": "llm", DP_SIZE_LABEL: "lots"}
    [ep] = pod_endpoints(pod("a", labels=bad), one_port, lambda n, p: problems.append(p))
    assert ep.dp_size is None and len(problems) == 2
