from __future__ import annotations

from collections.abc import Callable

from sim.demo import DEMO_POLICIES


def test_demo_help_default_policies_are_the_demos_own(help_text: Callable[..., str]) -> None:
    assert f"(default: {','.join(DEMO_POLICIES)})" in help_text("demo")
