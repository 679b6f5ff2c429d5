"""Metering tests run against the real local stack over HTTP, through the same fixtures as the e2e journeys."""

from __future__ import annotations

from e2e.conftest import stack, world  # noqa: F401  (fixtures)
