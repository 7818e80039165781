from __future__ import annotations

from collections.abc import Callable

import pytest

from kvgate.cli import main
from sim.emulator.lora import LoraSettings
from sim.engine.profiles import PROFILES


def test_emulate_help_lists_every_engine_profile_below(help_text: Callable[..., str]) -> None:
    out = help_text("emulate")
    assert "(default demo; see below)" in out
    below = out.split("engine profiles (--profile):", 1)[1]
    for profile in PROFILES.values():
        assert f"{profile.name} {' '.join(profile.description.split())}" in below


def test_emulate_help_default_is_the_emulators_own(help_text: Callable[..., str]) -> None:
    assert f"as vLLM's flag (default {LoraSettings().max_loras})" in help_text("emulate")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "65535", "--replicas", "2"], "replica ports 65535-65536 out of 0-65535"),
        (["--port", "-1"], "out of 0-65535"),
        (["--tokenizer", "/nonexistent/tokenizer.json"], "no such file"),
        (["--profile", "nope"], "unknown engine profile 'nope'; known: "),
        (["--replicas", "0"], "--replicas must be >= 1"),
        (["--lora", "a", "a"], "duplicate LoRA adapter names"),
        (["--lora", "a", "--max-loras", "0"], "max_loras must be >= 1"),
        (["--model", "m", "--lora", "m"], "'m' is the served model's own name"),
        (["--kv-events-replay-port", "7000"], "--kv-events-replay-port needs --kv-events-port"),
        (["--kv-events-port", "65534", "--replicas", "2"], "ports 65534-65537 out of 0-65535"),
        (["--kv-events-port", "-1"], "--kv-events-port: ports -1"),
        (["--kv-events-port", "0", "--kv-events-replay-port", "7000"], "both 0"),
        (
            ["--port", "7000", "--replicas", "2", "--kv-events-port", "7001"],
            "ranges overlap",
        ),
        (["--prefill", "1", "--replicas", "2"], "--prefill/--decode make the fleet"),
        (["--decode", "1", "--role", "decode"], "--prefill/--decode make the fleet"),
        (["--prefill", "-1"], "--prefill and --decode must be >= 0"),
        (["--kv-lease", "0"], "--kv-lease must be > 0"),
        (["--prefill", "1", "--bootstrap-port", "9000"], "is for SGLang prefill replicas"),
        (
            ["--pd-protocol", "sglang", "--prefill", "2", "--bootstrap-port", "65535"],
            "--bootstrap-port: ports 65535-65536 out of 0-65535",
        ),
        (
            [
                *("--port", "7000", "--prefill", "1", "--decode", "1"),
                *("--pd-protocol", "sglang", "--bootstrap-port", "7001"),
            ],
            "ranges overlap",
        ),
    ],
)
def test_emulate_bad_arguments_exit_2_before_listening(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["emulate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvgate: ") and message in err
    assert err.count("\n") == 1
