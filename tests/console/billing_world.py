"""The billing pages' part of the console test world (docs/billing-console.md): which of the world's users hold
which billing role, the console flags that say so, and the port the billing operator's /metrics will be served on
(the console is started before the billing operator: `test_billing_pages.py` starts it on that port).

Roles: `bea` (billing-admins) is a billing admin; `ops` (maas-admins) is a billing operator; `bob` (free-users)
and the OIDC user `erin` (oidc:analysts) are viewers; `alice` has no billing role. The tenant portal is on, and
reads the portal API of the billing operator `test_portal.py` starts (on `api_port()`); `nora` (north-team) and
`sam` (south-team) are the portal's tenants' users.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from kubernetes_asyncio import client as k8s

from maasctl.billing.api.install import install_billing_crds
from maasctl.console.billing import rbac
from maasctl.contract.billing_console import ROLE_FLAGS, Role
from maasctl.localstack import LocalStack, maasctl_argv
from maasctl.runtime import Client
from maasctl.runtime.served import apply_all
from maasctl.testenv.controlplane import ManagedProcess, free_port

GROUPS: Final[dict[Role, tuple[str, ...]]] = {"admin": ("billing-admins",), "operator": ("maas-admins",),
                                              "viewer": ("free-users", "oidc:analysts")}
_ports: dict[str, int] = {}


def _port(what: str) -> int:
    if what not in _ports:
        _ports[what] = free_port()
    return _ports[what]


def metrics_port() -> int:
    return _port("metrics")


def api_port() -> int:
    """Where the billing operator of the portal tests serves its portal API (the console is told before)."""
    return _port("api")


def console_args() -> tuple[str, ...]:
    """The `maasctl console` flags of the billing pages, as the billing operator renders them."""
    return (*(f"{ROLE_FLAGS[role]}={g}" for role, groups in GROUPS.items() for g in groups),
            f"--billing-metrics-url=http://127.0.0.1:{metrics_port()}/metrics",
            "--tenant-portal", f"--billing-api-url=http://127.0.0.1:{api_port()}")


async def billing_namespace(stack: LocalStack, namespace: str) -> None:
    """The billing kinds, a namespace for a test module's billing objects, and the console roles bound as the
    billing operator binds them from a BillingConsole."""
    await install_billing_crds(stack.api)
    await k8s.CoreV1Api(stack.api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    await apply_all(Client(stack.api), [*rbac.cluster_roles(), *rbac.role_bindings(GROUPS)],
                    field_manager="billing-console-tests")


def billing_operator(stack: LocalStack, namespace: str, ledger_url: str, directory: Path,
                     *flags: str) -> ManagedProcess:
    """`maasctl billing run` in its own process, as installed, on `namespace`, rating maas-api's database."""
    return ManagedProcess("billing-operator", maasctl_argv(
        "billing", "run", f"--kubeconfig={stack.kubeconfig}", f"--namespace={namespace}", f"--ledger-url={ledger_url}",
        f"--usage-database-url=sqlite+aiosqlite:///{stack.directory / 'maas-api.db'}",
        "--health-probe-bind-address=0", f"--leader-election-namespace={namespace}", "--log-format=json", *flags),
        directory / "billing-operator.log")
