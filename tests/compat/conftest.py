"""The compatibility suite runs against the real local stack (control plane, controller, maas-api, gateway and
test models as separate processes, all over HTTP), through the same fixtures as the e2e journeys. Each test
is written from the reference MaaS API's public description (its OpenAPI document and user docs), as a client
written for the reference would use maasctl."""

from __future__ import annotations

from e2e.conftest import stack, world  # noqa: F401  (fixtures)
