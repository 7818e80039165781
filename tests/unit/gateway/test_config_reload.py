"""Config reloads: what applies live, what waits for a restart, what is rejected whole."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.app import GatewayApp, build_app
from gateway.config_reload import ConfigReloader, changed_fields, is_live
from health.prober import Prober, ProbeSettings
from health.scraper import Scraper, ScrapeSettings
from routing.config.schema import ConfigError, GatewayConfig, load_config, parse_config
from tests.support.waiting import async_wait_until

BASE: dict[str, Any] = {
    "backends": [{"url": "http://a:1", "id": "a"}, {"url": "http://b:2", "id": "b"}],
    "routing": {"policy": "round-robin"},
}


def _with(**sections: Any) -> GatewayConfig:
    return parse_config({**BASE, **sections})


def _app() -> GatewayApp:
    return build_app(parse_config(BASE))


def test_changed_fields_are_the_differing_leaves() -> None:
    old = {"server": {"port": 1, "host": "h"}, "backends": [1], "routing": {"profiles": {}}}
    new = {
        "server": {"port": 2, "host": "h"},
        "backends": [1, 2],
        "routing": {"profiles": {"x": {}}},
    }
    assert changed_fields(old, new) == ["backends", "routing.profiles.x", "server.port"]


@pytest.mark.parametrize(
    ("path", "live"),
    [
        ("backends", True),
        ("routing.policy", True),
        ("routing.profiles.mine.scorers", True),
        ("routing.prefix.block_tokens", False),
        ("routing.ttft.decay", False),
        ("health.probe_interval_s", True),
        ("health.probe_timeout_s", False),
        ("server.port", False),
        ("upstream.read_timeout_s", False),
        ("admission.max_queue", False),
    ],
)
def test_which_fields_apply_live(path: str, live: bool) -> None:
    assert is_live(path) is live


def test_a_new_policy_and_profile_weights_route_the_next_request() -> None:
    app = _app()
    profile = {
        "scorers": [{"type": "in-flight-scorer", "weight": 3.0}],
        "picker": {"type": "max-score-picker"},
    }
    report = app.runtime.reconfigure(
        _with(routing={"policy": "mine", "profiles": {"mine": profile}})
    )
    assert report["routing_changed"] and report["policy"] == "mine"
    assert (
        app.runtime.scheduler.default_profile == "mine"
        and app.runtime.router.scheduler is app.runtime.scheduler
    )
    [weighted] = app.runtime.scheduler.profiles["mine"].scorers
    assert weighted.weight == 3.0
    assert app.runtime.config.routing.policy == "mine"


def test_restart_fields_are_reported_and_keep_their_running_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _app()
    caplog.set_level(logging.WARNING, logger="gateway.config_reload")
    report = app.runtime.reconfigure(
        _with(
            server={"port": 9999},
            routing={"policy": "session", "prefix": {"chars_per_token": 3.0}},
            health={"probe_timeout_s": 9.0, "probe_interval_s": 1.0},
        )
    )
    assert report["restart_required"] == [
        "health.probe_timeout_s",
        "routing.prefix.chars_per_token",
        "server.port",
    ]
    assert (
        app.runtime.config.server.port == 8000
        and app.runtime.config.routing.prefix.chars_per_token == 4.0
    )
    assert (
        app.runtime.config.health.probe_interval_s == 1.0
        and app.runtime.config.routing.policy == "session"
    )
    assert "server.port" in caplog.text and "restart" in caplog.text


def test_a_profile_that_does_not_build_rejects_the_whole_reload() -> None:
    app = _app()
    bad = {"picker": {"type": "no-such-picker"}}
    with pytest.raises(ConfigError, match=r"routing: .*no-such-picker"):
        app.runtime.reconfigure(
            parse_config(
                {
                    "backends": [{"url": "http://c:3", "id": "c"}],
                    "routing": {"policy": "bad", "profiles": {"bad": bad}},
                }
            )
        )
    assert sorted(b.id for b in app.runtime.pool) == [
        "a",
        "b",
    ]  # the backends did not change either
    assert app.runtime.scheduler.default_profile == "round-robin"


def test_a_config_without_backends_is_rejected() -> None:
    app = _app()
    with pytest.raises(ConfigError, match="backends: none left"):
        app.runtime.reconfigure(parse_config({"routing": {"policy": "round-robin"}}))
    assert len(app.runtime.pool) == 2


def test_health_thresholds_and_poll_settings_apply_to_running_pollers() -> None:
    app = _app()
    prober = Prober(app.runtime.pool, None, ProbeSettings(timeout_s=2.0))  # type: ignore[arg-type]
    scraper = Scraper(app.runtime.pool, None, ScrapeSettings(timeout_s=0.5))  # type: ignore[arg-type]
    app.runtime.live.watch_health(prober, scraper)
    app.runtime.reconfigure(
        _with(
            health={"fail_threshold": 7, "probe_interval_s": 0.5, "scrape_interval_s": 0.2},
        )
    )
    assert all(b.state.policy.fail_threshold == 7 for b in app.runtime.pool)
    assert prober.settings.interval_s == 0.5 and prober.settings.timeout_s == 2.0
    assert scraper.settings.interval_s == 0.2


def _write(path: Path, raw: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(raw))
    tmp.replace(path)


async def test_a_bad_file_is_logged_by_field_path_and_the_running_config_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kvgate.yaml"
    _write(path, BASE)
    app = build_app(load_config(path))
    reloader = ConfigReloader(lambda: load_config(path), app.runtime.reconfigure, str(path))
    _write(path, {**BASE, "health": {"fail_threshold": 0}})
    with pytest.raises(ConfigError):
        await reloader.reload("test")
    assert "health.fail_threshold" in caplog.text and "rejected" in caplog.text
    assert app.runtime.config.health.fail_threshold == 3


async def test_a_watched_file_reloads_when_it_changes_and_on_request(tmp_path: Path) -> None:
    path = tmp_path / "kvgate.yaml"
    _write(path, BASE)
    app = build_app(load_config(path))
    reloads: list[str] = []

    def apply(new: GatewayConfig) -> dict[str, Any]:
        reloads.append(new.routing.policy)
        return app.runtime.reconfigure(new)

    reloader = ConfigReloader(lambda: load_config(path), apply, str(path), watch_s=0.02)
    task = asyncio.create_task(reloader.run())
    try:
        await asyncio.sleep(0.1)
        assert reloads == []  # unchanged: nothing to do
        _write(path, {**BASE, "routing": {"policy": "session"}})
        await async_wait_until(lambda: reloads == ["session"])
        reloader.request()  # SIGHUP: reloads an unchanged file too
        await async_wait_until(lambda: reloads == ["session", "session"])
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert app.runtime.scheduler.default_profile == "session"
