"""The billing pages' part of the console test world (docs/billing-console.md): which of the world's users hold
which billing role, the console flags that say so, and the port the billing operator's /metrics will be served on
(the console is started before the billing operator: `test_billing_pages.py` starts it on that port).

Roles: `ops` (maas-admins) is a billing operator; `bob` (free-users) and the OIDC user `erin` (oidc:analysts) are
viewers; `alice` has no billing role.
"""

from __future__ import annotations

from typing import Final

from maasctl.contract.billing_console import ROLE_FLAGS, Role
from maasctl.testenv.controlplane import free_port

GROUPS: Final[dict[Role, tuple[str, ...]]] = {"operator": ("maas-admins",), "viewer": ("free-users", "oidc:analysts")}
_port: list[int] = []


def metrics_port() -> int:
    if not _port:
        _port.append(free_port())
    return _port[0]


def console_args() -> tuple[str, ...]:
    """The `maasctl console` flags of the billing pages, as the billing operator renders them."""
    return (*(f"{ROLE_FLAGS[role]}={g}" for role, groups in GROUPS.items() for g in groups),
            f"--billing-metrics-url=http://127.0.0.1:{metrics_port()}/metrics")
