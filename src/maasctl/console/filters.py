"""Jinja2 filters: token quantities and windows the way administrators write them (contract.quantities),
dates, and inline SVG charts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import jinja2

from maasctl.console.charts import bar_chart
from maasctl.contract.quantities import format_tokens, format_window


def tier(limit: Mapping[str, Any]) -> str:
    """{"limit": 100000000, "window": "1h"} -> "100M tokens per Hour"."""
    return f"{format_tokens(int(limit['limit']))} tokens per {format_window(str(limit['window']))}"


def plan_limit(limit: Mapping[str, Any]) -> str:
    """{"kind": "requests", "limit": 30, "window": "1m"} -> "30 requests per Minute"."""
    return f"{format_tokens(int(limit['limit']))} {limit['kind']} per {format_window(str(limit['window']))}"


def tiers(limits: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(tier(x) for x in limits)


def when(value: Any) -> str:
    if not value:
        return ""
    try:
        ts = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    return ts.strftime("%Y-%m-%d %H:%M UTC")


def number(value: Any) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def install(env: jinja2.Environment) -> None:
    env.filters["tokens"] = lambda v: format_tokens(int(v))
    env.filters["window"] = lambda w: format_window(str(w))
    env.filters["tier"] = tier
    env.filters["tiers"] = tiers
    env.filters["plan_limit"] = plan_limit
    env.filters["when"] = when
    env.filters["number"] = number
    env.globals["bar_chart"] = bar_chart
