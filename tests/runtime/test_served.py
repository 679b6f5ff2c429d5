"""`until_served`: only the API server's "kind not available yet" 503 is repeated, and never without a bound."""

from __future__ import annotations

import json

import pytest

from maasctl.runtime.errors import ApiError, NotFound, ServerError, error_from_response
from maasctl.runtime.served import not_yet_served, until_served

LAG = ("Resource kind maas.opendatahub.io/v1alpha1, Kind=MaaSSubscription not found. There can be a delay between "
       "when CustomResourceDefinitions are created and when they are available.")


def status(code: int, reason: str, message: str) -> ApiError:
    """The typed error the client raises for this Status body."""
    return error_from_response(code, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                 "code": code, "reason": reason, "message": message}))


@pytest.mark.parametrize("message", [
    LAG,
    LAG.replace("maas.opendatahub.io/v1alpha1, Kind=MaaSSubscription", "billing.opendatahub.io/v1alpha1, Kind=Plan"),
    LAG.replace("maas.opendatahub.io/v1alpha1", "t-1f3a.example.com/v1"),
])
def test_the_lag_503_is_repeated(message: str) -> None:
    assert not_yet_served(status(503, "ServiceUnavailable", message))


@pytest.mark.parametrize(("code", "reason", "message"), [
    (503, "ServiceUnavailable", "the server is currently unable to handle the request"),
    (503, "ServiceUnavailable", "etcdserver: leader changed"),
    (503, "ServiceUnavailable", ""),
    (503, "ServiceUnavailable", "admission webhook said: " + LAG),  # not the API server's own answer
    (500, "InternalError", LAG),
    (504, "Timeout", LAG),
    (404, "NotFound", LAG),
    (404, "NotFound", 'the server could not find the requested resource'),
    (422, "Invalid", LAG),
    (409, "Conflict", LAG),
    (403, "Forbidden", LAG),
    (429, "TooManyRequests", LAG),
    (400, "BadRequest", LAG),
])
def test_every_other_error_is_not(code: int, reason: str, message: str) -> None:
    assert not not_yet_served(status(code, reason, message))


def test_a_connection_error_is_not() -> None:
    assert not not_yet_served(ServerError(0, "ConnectionError", LAG))
    assert not not_yet_served(ValueError(LAG))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Calls:
    """Fails with the given errors in order, then answers "ok"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.count = 0

    async def __call__(self) -> str:
        self.count += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


@pytest.mark.parametrize("lags", [0, 1, 3, 12])
async def test_it_repeats_the_lag_until_the_kind_is_served(lags: int) -> None:
    clock = Clock()
    call = Calls(*(status(503, "ServiceUnavailable", LAG) for _ in range(lags)))
    assert await until_served(call, timeout=60, sleep=clock.sleep, clock=clock) == "ok"
    assert call.count == lags + 1
    assert len(clock.slept) == lags
    assert clock.slept == sorted(clock.slept) and all(0 < s <= 1.0 for s in clock.slept)  # backoff, capped


@pytest.mark.parametrize("error", [
    status(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
    status(422, "Invalid", "spec.caps[0].amount: Invalid value"),
    status(404, "NotFound", LAG),
    status(403, "Forbidden", "nope"),
])
async def test_any_other_error_is_raised_at_once(error: ApiError) -> None:
    clock = Clock()
    call = Calls(error)
    with pytest.raises(type(error)) as raised:
        await until_served(call, sleep=clock.sleep, clock=clock)
    assert raised.value is error and call.count == 1 and clock.slept == []


async def test_a_lag_after_other_lags_then_another_error_is_raised() -> None:
    clock = Clock()
    other = NotFound(404, "NotFound", "namespaces \"x\" not found")
    call = Calls(status(503, "ServiceUnavailable", LAG), status(503, "ServiceUnavailable", LAG), other)
    with pytest.raises(NotFound):
        await until_served(call, sleep=clock.sleep, clock=clock)
    assert call.count == 3


@pytest.mark.parametrize("timeout", [0, 0.5, 5, 60])
async def test_the_lag_is_raised_once_the_bound_is_reached(timeout: float) -> None:
    clock = Clock()
    call = Calls(*(status(503, "ServiceUnavailable", LAG) for _ in range(10_000)))
    with pytest.raises(ServerError) as raised:
        await until_served(call, timeout=timeout, sleep=clock.sleep, clock=clock)
    assert not_yet_served(raised.value)
    assert sum(clock.slept) <= timeout  # never waits past its bound
    assert call.count <= timeout / 0.05 + 2
