"""The console's test world: one local stack per session (real control plane, controller, maas-api, local
data plane, test models), the console process in front of it with its sessions in a real Redis (as installed:
replicas share them), and a fresh headless Chromium per test.

Users: alice (premium-users), bob (free-users), carol; `ops` is a MaaS administrator (group maas-admins,
bound to the admin ClusterRole); `vic` is in an administrator group of the console but has no RBAC, so the
API server refuses his writes; `nora` (north-team) and `sam` (south-team) are the tenant portal's users, `bea`
a billing admin. A real OpenID provider (npm oidc-provider) knows `dave` (group maas-admins,
seen by the API server as oidc:dave in oidc:maas-admins) and `erin` (oidc:analysts); `gail` (an administrator)
and `hank` get ID tokens of 10 seconds, hank's refresh token lives 2 (the refresh tests).
"""

from __future__ import annotations

import secrets
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from maasctl import samples
from maasctl.billing.api.install import install_billing_crds
from maasctl.console.localrun import OidcFlags, start_console
from maasctl.localstack import LocalStack, StackOptions
from maasctl.reconcilers.kinds import GATEWAY
from maasctl.runtime import Client
from maasctl.settings import ControllerSettings
from maasctl.testenv import TestUser
from maasctl.testenv.redis import RedisServer, start_redis
from tests.console import billing_world, oidc_provider
from tests.console.browser import Browser
from tests.console.oidc_provider import OidcProvider

SETTINGS = ControllerSettings(gateway_name="maas-default-gateway", gateway_namespace="maas-gateway",
                              leader_election_namespace="opendatahub", max_concurrent_reconciles=4)
ADMIN_GROUPS = ("maas-admins", "console-viewers", "oidc:maas-admins")
# The groups whose members hold the administrators' RBAC: not console-viewers (vic is a console administrator
# without RBAC: test_admin_models.py). Every console started on this world binds these, never ADMIN_GROUPS.
RBAC_GROUPS = ("maas-admins", "oidc:maas-admins")
OIDC_ACCOUNTS = {"dave": ["maas-admins"], "erin": ["analysts"], "gail": ["maas-admins"], "hank": ["analysts"]}
SHORT_ID_TOKEN_SECONDS = 10
OIDC_TTLS = {"gail": {"idTokenTtl": SHORT_ID_TOKEN_SECONDS},
             "hank": {"idTokenTtl": SHORT_ID_TOKEN_SECONDS, "refreshTokenTtl": 2}}


@dataclass
class ConsoleWorld:
    stack: LocalStack
    url: str
    oidc: OidcProvider
    redis: RedisServer  # the console's sessions

    def token(self, user: str) -> str:
        return self.stack.control_plane.users[user].token

    @property
    def client(self) -> Client:
        return Client(self.stack.api)


def fixed_port() -> int:
    """A free port below the kernel's ephemeral range (32768+), where the other processes' port-0 binds and
    outgoing connections never land: the console's URL must be known before the provider starts."""
    for _ in range(200):
        port = secrets.randbelow(12000) + 20000
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32000")


@pytest.fixture(scope="session")
async def world() -> AsyncIterator[ConsoleWorld]:
    extra = (TestUser("ops", secrets.token_urlsafe(24), ("maas-admins", "system:authenticated")),
             TestUser("vic", secrets.token_urlsafe(24), ("console-viewers", "system:authenticated")),
             # the tenant portal's users (test_portal.py): each in the group its organization's subscription names
             TestUser("nora", secrets.token_urlsafe(24), ("north-team", "system:authenticated")),
             TestUser("sam", secrets.token_urlsafe(24), ("south-team", "system:authenticated")),
             TestUser("bea", secrets.token_urlsafe(24), ("billing-admins", "system:authenticated")))
    with tempfile.TemporaryDirectory(prefix="maasctl-console-") as tmp:
        port = fixed_port()
        # The provider first: the API server is started trusting its ID tokens (users "oidc:<sub>").
        provider = oidc_provider.start(Path(tmp), f"http://127.0.0.1:{port}/signin/oidc/callback", OIDC_ACCOUNTS,
                                       OIDC_TTLS)
        stack = LocalStack(StackOptions(directory=Path(tmp) / "stack", settings=SETTINGS, extra_users=extra,
                                        extra_apiserver_flags=provider.apiserver_flags()))
        redis = start_redis()
        try:
            await stack.start()
            client = Client(stack.api)
            gateway_port = int(stack.gateway_url.rsplit(":", 1)[1])
            await client.apply(samples.gateway(stack.settings, gateway_port), field_manager="console-tests")
            await client.patch(GATEWAY, SETTINGS.gateway_name, SETTINGS.gateway_namespace,
                               samples.gateway_status(), subresource="status")
            await install_billing_crds(stack.api)  # Plans and TenantAccounts beside a subscription's limits
            url = await start_console(
                stack, port, admin_groups=ADMIN_GROUPS, rbac_groups=RBAC_GROUPS,
                oidc=OidcFlags(issuer=provider.issuer, client_id=oidc_provider.CLIENT_ID,
                               client_secret_file=provider.client_secret_file, ca_file=provider.ca_file),
                redis_url=redis.url, extra_args=billing_world.console_args())
            yield ConsoleWorld(stack, url, provider, redis)
        finally:
            await stack.stop()
            provider.stop()
            redis.stop()


@pytest.fixture
def browser(world: ConsoleWorld) -> Iterator[Browser]:
    """A fresh Chromium profile per test; it accepts the test OpenID provider's certificate (only that)."""
    b = Browser(world.url, trust_spki=world.oidc.spki)
    try:
        yield b
    finally:
        b.close()
