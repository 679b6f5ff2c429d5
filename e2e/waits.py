"""Waiting for the cluster, in both modes: one `eventually` and one enforcement wait with two sources.

Who says a model's policies are in force differs by data plane, so the wait asks the one in front of the
journeys: Kuadrant writes `Accepted`/`Enforced` conditions on the generated AuthPolicy and
TokenRateLimitPolicy (a real cluster), maasctl's local data plane (`maasctl gateway`, used by the local stack and
`maasctl dev`) says `/_gateway/readyz` once its informers have synced, and `/_gateway/simulate` whether the
caller's token limit has reached it (a call served before would not count towards the limit). Either way the
wait ends with one successful call through the gateway (journeys count its 15 tokens), and a timeout names the
last reason.

Timeouts are scaled for the whole session (`set_timeout_scale`, from `E2E_TIMEOUT_SCALE` or the data plane's
default), so journeys write the figure that fits the local stack and still wait long enough on a slower cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

from maasctl.builders import names
from maasctl.maasapi.keys import looks_like_key
from maasctl.reconcilers.indexes import kuadrant_ready
from maasctl.reconcilers.kinds import AUTH_POLICY, TOKEN_RATE_LIMIT_POLICY
from maasctl.runtime import Client, NotFound
from maasctl.tls import default_tls

__all__ = ["PROBE_BODY", "DataPlane", "KuadrantDataPlane", "MaasctlDataPlane", "detect_data_plane", "eventually",
           "scaled", "set_timeout_scale"]

MAASCTL = "maasctl"
PROBE_BODY = {"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}]}  # World.chat's request
KUADRANT = "kuadrant"
_scale = 1.0


def set_timeout_scale(scale: float) -> None:
    """Multiply every `eventually` timeout of this session (a slower cluster needs more time)."""
    global _scale
    if scale <= 0:
        raise ValueError(f"timeout scale must be positive, not {scale}")
    _scale = scale


def scaled(seconds: float) -> float:
    return seconds * _scale


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 60.0, interval: float = 0.2,
                     describe: Callable[[], str] | None = None) -> None:
    """Until `check()` is true; `timeout` is scaled for the session. `describe()` explains a timeout."""
    budget = scaled(timeout)
    deadline = asyncio.get_running_loop().time() + budget
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            detail = f": {describe()}" if describe is not None else ""
            raise AssertionError(f"condition not met within {budget:g}s{detail}")
        await asyncio.sleep(interval)


class DataPlane(Protocol):
    """The source of truth for "the generated policies of this model are enforced"."""

    name: str
    default_timeout_scale: float

    async def not_ready(self, namespace: str, model: str, credential: str) -> str | None:
        """None when the model's policies are in force for this caller; else why not (for the timeout message)."""
        ...


@dataclass
class MaasctlDataPlane:
    """`maasctl gateway`: enforces what it has read once its informers have synced."""

    gateway_url: str
    name: str = MAASCTL
    default_timeout_scale: float = 1.0

    async def not_ready(self, namespace: str, model: str, credential: str) -> str | None:
        """Synced, and the caller's token limit for the model is in the gateway's view: a subscription always
        has one (an unlimited model too), and a call served before it arrived would not count towards it."""
        try:
            async with httpx.AsyncClient(base_url=self.gateway_url, timeout=10, verify=default_tls()) as http:
                resp = await http.get("/_gateway/readyz")
                if resp.status_code != 200:
                    return f"local data plane not ready ({resp.status_code} {resp.text})"
                kind = "key" if looks_like_key(credential) else "token"
                call = {"model": f"{namespace}/{model}", kind: credential, "body": PROBE_BODY}
                resp = await http.post("/_gateway/simulate", json=call,
                                       headers={"Authorization": f"Bearer {credential}"})
        except httpx.HTTPError as exc:
            return f"the local data plane at {self.gateway_url} does not answer: {exc!r}"
        if resp.status_code == 403 and "loopback" in resp.text:
            return None  # a gateway that simulates for loopback clients only: its readiness is all it says
        if resp.status_code != 200:
            return f"the gateway cannot simulate the call ({resp.status_code} {resp.text[:200]})"
        if not resp.json().get("limits"):
            return f"the gateway holds no token limit of this caller for {namespace}/{model} yet: {resp.text[:600]}"
        return None


@dataclass
class KuadrantDataPlane:
    """Kuadrant: the generated AuthPolicy (and TokenRateLimitPolicy, once there is one) report `Enforced`."""

    client: Client
    name: str = KUADRANT
    default_timeout_scale: float = 3.0  # Authorino and Limitador pick changes up asynchronously

    async def not_ready(self, namespace: str, model: str, credential: str) -> str | None:
        for gvk, name, required in ((AUTH_POLICY, names.authpolicy_name(model), True),
                                    (TOKEN_RATE_LIMIT_POLICY, names.trlp_name(model), False)):
            try:
                live = await self.client.get(gvk, name, namespace)
            except NotFound:
                if required:
                    return f"{gvk.kind} {namespace}/{name} not generated yet"
                continue
            ready, reason = kuadrant_ready(live)
            if not ready:
                return f"{gvk.kind} {namespace}/{name} not enforced: {reason}"
        return None


async def detect_data_plane(gateway_url: str, client: Client, choice: str = "auto") -> DataPlane:
    """`choice` maasctl or kuadrant, or auto: maasctl's data plane answers `/_gateway/readyz` with its
    `synced` document; any other gateway is taken for Kuadrant's."""
    if choice == MAASCTL:
        return MaasctlDataPlane(gateway_url)
    if choice == KUADRANT:
        return KuadrantDataPlane(client)
    if choice != "auto":
        raise ValueError(f"E2E_DATA_PLANE must be auto, {MAASCTL} or {KUADRANT}, not {choice!r}")
    with contextlib.suppress(httpx.HTTPError, ValueError):
        async with httpx.AsyncClient(base_url=gateway_url, timeout=10, verify=default_tls()) as http:
            resp = await http.get("/_gateway/readyz")
        body = json.loads(resp.text)
        if resp.status_code in (200, 503) and isinstance(body, dict) and "synced" in body:
            return MaasctlDataPlane(gateway_url)
    return KuadrantDataPlane(client)
