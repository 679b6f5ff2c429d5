"""Writes of a kind the API server has only just learned: retried, with a bound, while it cannot admit them yet.

A CustomResourceDefinition is `Established` before every part of the API server knows its schema. A
MutatingAdmissionPolicy matching the kind (the controller's finalizer policy matches MaaSModelRefs and
MaaSSubscriptions) needs a type converter built from the published schema, which lags; until then every create
it matches is refused with 503 `Resource kind <group/version, Kind=...> not found. There can be a delay between
when CustomResourceDefinitions are created and when they are available`. Nothing was written, so the request is
safe to repeat: `until_served` repeats it (backoff from 50 ms to 1 s) until it gets another answer or `timeout`
seconds have passed, and only for that answer (`not_yet_served`); every other error is raised at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from maasctl.runtime.client import Client
from maasctl.runtime.errors import ServerError

__all__ = ["apply_all", "not_yet_served", "until_served"]

T = TypeVar("T")
log = logging.getLogger(__name__)

_NOT_SERVED = re.compile(r"\AResource kind .+ not found\. There can be a delay between when "
                         r"CustomResourceDefinitions are created and when they are available", re.DOTALL)
_FIRST_DELAY = 0.05
_MAX_DELAY = 1.0
DEFAULT_TIMEOUT = 60.0


def not_yet_served(exc: BaseException) -> bool:
    """True for the API server's 503 saying a just-installed kind is not available yet (worth repeating); False
    for any other error, other 503s and every 4xx included."""
    return isinstance(exc, ServerError) and exc.status == 503 and bool(_NOT_SERVED.match(exc.message))


async def until_served(call: Callable[[], Awaitable[T]], *, timeout: float = DEFAULT_TIMEOUT,
                       sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                       clock: Callable[[], float] = time.monotonic) -> T:
    """`await call()`, repeated while it fails with `not_yet_served`; after `timeout` seconds that error is raised.

    `sleep` and `clock` are injectable so the bound can be tested without waiting.
    """
    deadline = clock() + timeout
    delay = _FIRST_DELAY
    while True:
        try:
            return await call()
        except ServerError as exc:
            if not not_yet_served(exc) or clock() + delay > deadline:
                raise
            if delay == _FIRST_DELAY:
                log.info("the API server does not serve this kind yet; trying again",
                         extra={"error": exc.message[:300]})
        await sleep(delay)
        delay = min(delay * 2, _MAX_DELAY)


async def apply_all(client: Client, objects: Iterable[Mapping[str, Any]], *, field_manager: str,
                    timeout: float = DEFAULT_TIMEOUT) -> list[dict[str, Any]]:
    """Server-side apply `objects` in order, each through `until_served`: what installers and samples use right
    after installing the kinds (`maasctl dev`, the billing samples)."""
    out = []
    for obj in objects:
        out.append(await until_served(functools.partial(client.apply, obj, field_manager=field_manager),
                                      timeout=timeout))
    return out
