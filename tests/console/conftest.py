"""The console's test world: one local stack per session (real control plane, controller, maas-api, local
data plane, test models), the console process in front of it, and a fresh headless Chromium per test.

Users: alice (premium-users), bob (free-users), carol; `ops` is a MaaS administrator (group maas-admins,
bound to the admin ClusterRole); `vic` is in an administrator group of the console but has no RBAC, so the
API server refuses his writes.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from maasctl import samples
from maasctl.console.localrun import start_console
from maasctl.localstack import LocalStack, StackOptions
from maasctl.reconcilers.kinds import GATEWAY
from maasctl.runtime import Client
from maasctl.settings import ControllerSettings
from maasctl.testenv import TestUser
from maasctl.testenv.controlplane import free_port
from tests.console.browser import Browser

SETTINGS = ControllerSettings(gateway_name="maas-default-gateway", gateway_namespace="maas-gateway",
                              leader_election_namespace="opendatahub", max_concurrent_reconciles=4)
ADMIN_GROUPS = ("maas-admins", "console-viewers")


@dataclass
class ConsoleWorld:
    stack: LocalStack
    url: str

    def token(self, user: str) -> str:
        return self.stack.control_plane.users[user].token

    @property
    def client(self) -> Client:
        return Client(self.stack.api)


@pytest.fixture(scope="session")
async def world() -> AsyncIterator[ConsoleWorld]:
    extra = (TestUser("ops", secrets.token_urlsafe(24), ("maas-admins", "system:authenticated")),
             TestUser("vic", secrets.token_urlsafe(24), ("console-viewers", "system:authenticated")))
    with tempfile.TemporaryDirectory(prefix="maasctl-console-") as tmp:
        stack = LocalStack(StackOptions(directory=Path(tmp), settings=SETTINGS, extra_users=extra))
        await stack.start()
        try:
            client = Client(stack.api)
            port = int(stack.gateway_url.rsplit(":", 1)[1])
            await client.apply(samples.gateway(stack.settings, port), field_manager="console-tests")
            await client.patch(GATEWAY, SETTINGS.gateway_name, SETTINGS.gateway_namespace,
                               samples.gateway_status(), subresource="status")
            url = await start_console(stack, free_port(), admin_groups=ADMIN_GROUPS, rbac_groups=("maas-admins",))
            yield ConsoleWorld(stack, url)
        finally:
            await stack.stop()


@pytest.fixture
def browser(world: ConsoleWorld) -> Iterator[Browser]:
    b = Browser(world.url)
    try:
        yield b
    finally:
        b.close()
