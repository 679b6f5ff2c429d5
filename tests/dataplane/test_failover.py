"""The attempt loop and the circuit breaker (dataplane.failover), on a fake clock and fake providers: which
provider serves, what the client gets when none does, that a failed answer is closed, and when a breaker opens,
lets a trial through and closes again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from maasctl.contract.errors import Refusal
from maasctl.contract.providers import ProviderPlan, ProviderTarget
from maasctl.dataplane.failover import (
    AttemptFailed,
    Breaker,
    Breakers,
    BreakerState,
    Outcome,
    attempt_order,
    run_attempts,
)

A, B, C = (ProviderTarget(n, f"https://{n}.test/v1", "m") for n in ("a", "b", "c"))
UNREACHABLE = Refusal(503, "upstream_unavailable", "upstream connect error")
TIMEOUT = Refusal(504, "upstream_timeout", "upstream request timeout")
NO_KEY = Refusal(503, "no_upstream_key", "upstream credentials are not available")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Answer:
    status: int
    provider: str
    closed: bool = False


@dataclass
class Providers:
    """What each provider does: an int is its answer's status; a Refusal a failure (counted unless no_key)."""

    behaviour: dict[str, int | Refusal]
    calls: list[str] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)

    async def send(self, p: ProviderTarget) -> Answer:
        self.calls.append(p.name)
        what = self.behaviour[p.name]
        if isinstance(what, Refusal):
            kind = {503: "unreachable", 504: "timeout"}[what.status] if what is not NO_KEY else "no_key"
            raise AttemptFailed(what, counts=what is not NO_KEY, kind=kind)
        answer = Answer(what, p.name)
        self.answers.append(answer)
        return answer

    async def discard(self, answer: Answer) -> None:
        answer.closed = True


def _run(providers: Providers, order: tuple[ProviderTarget, ...] = (A, B, C), attempts: int = 8,
         breakers: Breakers | None = None) -> Outcome[Answer]:
    breakers = breakers or Breakers(clock=Clock())
    return asyncio.run(run_attempts(order, attempts, lambda p: breakers.get("ns/route", p.name), providers.send,
                                    providers.discard))


@pytest.mark.parametrize("failure", [500, 502, 503, 504, 529, 429, UNREACHABLE, TIMEOUT])
def test_a_failing_first_provider_is_followed_by_the_next(failure: int | Refusal) -> None:
    providers = Providers({"a": failure, "b": 200, "c": 200})
    out = _run(providers)
    assert out.provider == B and out.answer is not None and out.answer.status == 200 and out.refusal is None
    assert providers.calls == ["a", "b"]
    assert out.failovers == ["a"]
    assert all(a.closed for a in providers.answers if a.provider == "a")  # the failed answer was closed
    assert out.answer.closed is False


@pytest.mark.parametrize("status", [200, 201, 400, 401, 403, 404, 413, 422])
def test_an_answer_that_is_not_429_or_5xx_is_the_answer(status: int) -> None:
    providers = Providers({"a": status, "b": 200, "c": 200})
    out = _run(providers)
    assert out.provider == A and out.answer is not None and out.answer.status == status
    assert providers.calls == ["a"] and out.failovers == []


def test_every_provider_failing_answers_the_last_failure() -> None:
    providers = Providers({"a": 503, "b": 429, "c": 500})
    out = _run(providers)
    assert out.provider == C and out.answer is not None and out.answer.status == 500 and not out.answer.closed
    assert [a.closed for a in providers.answers] == [True, True, False]
    assert out.failovers == ["a", "b"]

    providers = Providers({"a": 503, "b": 429, "c": UNREACHABLE})
    out = _run(providers)  # the last could not be reached: the data plane's 503, the held answer closed
    assert out.provider == C and out.answer is None and out.refusal is UNREACHABLE
    assert all(a.closed for a in providers.answers)

    providers = Providers({"a": UNREACHABLE, "b": TIMEOUT, "c": 502})
    out = _run(providers)
    assert out.provider == C and out.answer is not None and out.answer.status == 502


def test_max_attempts_bounds_the_requests_sent() -> None:
    providers = Providers({"a": 500, "b": 500, "c": 200})
    out = _run(providers, attempts=2)
    assert providers.calls == ["a", "b"] and out.provider == B and out.answer is not None
    assert out.answer.status == 500


def test_a_provider_that_cannot_take_the_request_is_passed_over_without_counting() -> None:
    breakers = Breakers(failures=1, clock=Clock())
    providers = Providers({"a": NO_KEY, "b": 200, "c": 200})
    out = _run(providers, attempts=1, breakers=breakers)  # the pass-over is not an attempt
    assert out.provider == B and providers.calls == ["a", "b"]
    assert breakers.get("ns/route", "a").state is BreakerState.CLOSED  # nor a failure
    # a real failure's refusal wins over "could not take it"
    out = _run(Providers({"a": UNREACHABLE, "b": NO_KEY, "c": NO_KEY}))
    assert out.refusal is UNREACHABLE and out.provider == A
    out = _run(Providers({"a": 503, "b": NO_KEY, "c": NO_KEY}))
    assert out.provider == A and out.answer is not None and out.answer.status == 503
    out = _run(Providers({"a": NO_KEY, "b": NO_KEY, "c": NO_KEY}))
    assert out.answer is None and out.refusal is NO_KEY


def test_the_breaker_opens_after_consecutive_failures_then_lets_one_trial_through() -> None:
    clock = Clock()
    breaker = Breaker(3, 30.0, clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.failure()
    breaker.success()  # consecutive: a success in between starts again
    for _ in range(3):
        assert breaker.allow()
        breaker.failure()
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    clock.now += 29.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    breaker.failure()  # the trial failed: open again for a whole cool-down
    assert breaker.state is BreakerState.OPEN
    clock.now += 30
    assert breaker.allow()
    breaker.release()  # the trial went nowhere: another may go
    assert breaker.allow()
    breaker.success()
    assert breaker.state is BreakerState.CLOSED and breaker.allow() and breaker.allow()


def test_an_open_provider_is_passed_over_and_tried_again_after_its_cool_down() -> None:
    clock = Clock()
    breakers = Breakers(failures=2, cooldown=10.0, clock=clock)
    down = Providers({"a": 503, "b": 200, "c": 200})
    for _ in range(2):
        assert _run(down, breakers=breakers).provider == B
    assert breakers.get("ns/route", "a").state is BreakerState.OPEN
    down.calls.clear()
    out = _run(down, breakers=breakers)
    assert down.calls == ["b"] and out.attempts == [("a", "open"), ("b", "served")] and out.failovers == []
    clock.now += 10
    healed = Providers({"a": 200, "b": 200, "c": 200})
    assert _run(healed, breakers=breakers).provider == A  # the half-open trial succeeded
    assert breakers.get("ns/route", "a").state is BreakerState.CLOSED
    assert breakers.get("other/route", "a").state is BreakerState.CLOSED  # per model route


def test_when_every_breaker_is_open_the_first_provider_is_tried_anyway() -> None:
    breakers = Breakers(failures=1, cooldown=60.0, clock=Clock())
    assert _run(Providers({"a": 500, "b": 500, "c": 500}), breakers=breakers).answer is not None
    providers = Providers({"a": 200, "b": 200, "c": 200})
    out = _run(providers, breakers=breakers)
    assert providers.calls == ["a"] and out.provider == A and out.answer is not None
    assert breakers.get("ns/route", "a").state is BreakerState.CLOSED


def test_the_breakers_remember_a_bounded_number_of_providers() -> None:
    breakers = Breakers()
    for i in range(5000):
        breakers.get(f"ns/r{i}", "a")
    assert len(breakers.states()) == 4096


def test_ordered_plans_keep_the_written_order_without_weight_zero() -> None:
    plan = ProviderPlan((A, ProviderTarget("z", "https://z.test", "m", weight=0), B, C))
    assert [p.name for p in attempt_order(plan)] == ["a", "b", "c"]


def test_weighted_plans_draw_the_first_by_weight_and_the_rest_among_the_others() -> None:
    plan = ProviderPlan((ProviderTarget("a", "https://a.test", "m", weight=3),
                         ProviderTarget("b", "https://b.test", "m"),
                         ProviderTarget("z", "https://z.test", "m", weight=0)), "weighted")
    draws = iter([0.0, 0.0])
    assert [p.name for p in attempt_order(plan, lambda: next(draws))] == ["a", "b"]
    draws = iter([0.8, 0.0])  # 0.8 * 4 = 3.2: past a's 3
    assert [p.name for p in attempt_order(plan, lambda: next(draws))] == ["b", "a"]
    import random

    rng = random.Random(7)
    firsts = [attempt_order(plan, rng.random)[0].name for _ in range(4000)]
    assert 0.70 < firsts.count("a") / len(firsts) < 0.80  # 3 : 1
