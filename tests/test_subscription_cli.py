"""`maasctl subscription`: limits as administrators write them, checked by the real API server."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from maasctl.subscription_cli import SubscriptionCliError, parse_tier, render


@pytest.mark.parametrize(
    ("text", "tier"),
    [("100M per Hour", (100_000_000, "1h")), ("1000M per Day", (1_000_000_000, "24h")),
     ("1.5B/day", (1_500_000_000, "24h")), ("250k tokens per minute", (250_000, "1m")),
     ("5000 / 30m", (5000, "30m")), ("  1T per 24h ", (10**12, "24h"))],
)
def test_parse_tier(text: str, tier: tuple[int, str]) -> None:
    assert parse_tier(text) == {"limit": tier[0], "window": tier[1]}


@pytest.mark.parametrize("text", ["100M", "per hour", "1.0005k per hour", "100M per week", "0 per hour", "3T/day"])
def test_bad_tiers_are_explained(text: str) -> None:
    with pytest.raises(SubscriptionCliError):
        parse_tier(text)


def args(**kw: Any) -> argparse.Namespace:
    base: dict[str, Any] = {"name": "s", "namespace": "models-as-a-service", "model": None, "unlimited": None,
                            "limit": None, "user": None, "group": None, "priority": None}
    return argparse.Namespace(**(base | kw))


def test_render_needs_models_limits_and_owners() -> None:
    for bad in (args(), args(model=["llm/m"], user=["a"]), args(model=["llm/m"], limit=["1M per Hour"]),
                args(model=["no-namespace"], limit=["1M per Hour"], user=["a"])):
        with pytest.raises(SubscriptionCliError):
            render(bad)
