"""The security suite runs against the real local stack (control plane, controller, maas-api, gateway and test
models as separate processes, all over HTTP), through the same fixtures as the e2e journeys."""

from __future__ import annotations

from e2e.conftest import stack, world  # noqa: F401  (fixtures)
