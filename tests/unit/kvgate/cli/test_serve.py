from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvgate.cli import build_parser, main
from routing.config.profiles import BUILTIN_PROFILES, RoutingSection


def test_serve_help_documents_the_backend_syntax(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--backend" in out
    assert "engine=vllm|sglang|trtllm|openai" in out


def test_serve_policy_help_lists_every_builtin_profile_and_the_default(
    help_text: Callable[..., str],
) -> None:
    out = help_text("serve")
    policy_help = out.split("options:", 1)[1].split("--policy NAME", 1)[1].split("--host", 1)[0]
    for name in BUILTIN_PROFILES:
        assert name in policy_help
    assert f"else {RoutingSection().policy})" in policy_help


def test_serve_help_quotes_the_backend_example_with_a_pipe(
    help_text: Callable[..., str],
) -> None:
    out = help_text("serve")
    assert "'http://10.0.0.5:8000,engine=sglang,models=llama|qwen,id=gpu-5'" in out


def test_serve_help_lists_the_admin_port(help_text: Callable[..., str]) -> None:
    assert "--admin-port" in help_text("serve")


def test_serve_rejects_a_bad_backend_flag_before_starting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--backend", "http://127.0.0.1:99999"]) == 2
    assert "url: Value error, port in '127.0.0.1:99999'" in capsys.readouterr().err


def test_workers_come_from_the_flag_or_kvgate_workers_and_default_to_one() -> None:
    def parse(env: dict[str, str], *argv: str) -> int:
        return int(build_parser(env).parse_args(["serve", *argv]).workers)

    assert parse({}) == 1
    assert parse({"KVGATE_WORKERS": "4"}) == 4
    assert parse({"KVGATE_WORKERS": "4"}, "--workers", "2") == 2


@pytest.mark.parametrize("n", ["0", "-1", "257"])
def test_a_worker_count_out_of_range_fails_the_start_with_status_2(
    n: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--backend", "http://127.0.0.1:1", "--workers", n], environ={}) == 2
    assert f"--workers: {n} is not between 1 and 256" in capsys.readouterr().err


def test_workers_refuse_a_trace_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--backend", "http://127.0.0.1:1", "--port", "0", "--workers", "2"]
    assert main([*argv, "--record", str(tmp_path / "t.jsonl")], environ={}) == 2
    assert "cannot be used with --workers" in capsys.readouterr().err


def test_serve_refuses_a_documented_example_admin_key_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVGATE_ADMIN_KEY", raising=False)
    example = "c940f8ab676f2428dd7bc347e18d3ef916b44e91244863a1ca555141b3b25048"
    config = tmp_path / "kvgate.yaml"
    config.write_text(f"security:\n  admin_key_sha256: {example}\n")
    argv = ["serve", "--config", str(config), "--backend", "http://127.0.0.1:1", "--port", "0"]
    assert main(argv, environ={}) == 2
    err = capsys.readouterr().err
    assert "security.admin_key_sha256" in err
    assert "documented example key 'kvgate-example-admin-key' (SHA-256 c940f8ab676f2428" in err
    monkeypatch.setenv("KVGATE_ADMIN_KEY", "kvgate-example-admin-key")
    assert main(argv[:1] + argv[3:], environ={}) == 2
    assert "security: KVGATE_ADMIN_KEY is the documented example key" in capsys.readouterr().err
