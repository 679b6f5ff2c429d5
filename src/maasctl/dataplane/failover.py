"""Several providers for one model: the order of attempts, the circuit breaker, and the attempt loop
(docs/providers.md, "Several providers for one model"). Pure: no I/O of its own - the loop calls the `send` it
is given (the local gateway's or the provider relay's, `gateway.providers`), the clock and the random draw are
arguments.

The rules:
- order: Ordered plans try the providers as written; Weighted plans draw the first by weight, then the next
  by weight among the rest. A provider of weight 0 is never tried. At most `max_attempts` requests are sent.
- another attempt follows a connection failure (or timeout) and an answer head of 429 or 5xx
  (`contract.providers.worth_another_attempt`); nothing else. The decision is made on the head, before any
  byte of the answer reaches the client: an answer once chosen is never retried, however it ends.
- a provider that cannot take this request (its key missing, the request not translatable to its format) is
  passed over without counting as an attempt or a failure.
- the circuit breaker is per provider (and per process): `failures` consecutive failures open it; after
  `cooldown` seconds one trial request is let through (half-open); its success closes it, its failure opens it
  again. An open provider is passed over; when every provider is open the first one in order is tried anyway
  (a breaker never refuses a request by itself).
- when every attempt failed, the answer is the last provider's own failure: its answer (status and body, as a
  single provider's would be) or, when it could not be reached, the data plane's 503/504.
"""

from __future__ import annotations

import enum
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

from maasctl.contract.errors import Refusal
from maasctl.contract.providers import ProviderPlan, ProviderTarget, worth_another_attempt

__all__ = [
    "AttemptFailed",
    "Breaker",
    "BreakerState",
    "Breakers",
    "Outcome",
    "attempt_order",
    "run_attempts",
]

MAX_BREAKERS: Final = 4096  # providers remembered per process (the oldest forgotten first)


class BreakerState(enum.IntEnum):
    """As the metric reports it: 0 closed, 1 half-open, 2 open."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class Breaker:
    """One provider's circuit breaker (see the module docstring)."""

    def __init__(self, failures: int, cooldown: float, clock: Callable[[], float]) -> None:
        self.failures_to_open = max(1, failures)
        self.cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial = False  # the half-open trial request is in flight

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._clock() - self._opened_at >= self.cooldown:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def allow(self) -> bool:
        """May a request go to this provider now? Half-open lets exactly one trial through at a time."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and not self._trial:
            self._trial = True
            return True
        return False

    def force(self) -> None:
        """A request goes to this provider although the breaker would not let it (every provider open)."""
        self._trial = self.state is not BreakerState.CLOSED

    def success(self) -> None:
        self._failures, self._opened_at, self._trial = 0, None, False

    def failure(self) -> None:
        self._failures += 1
        if self._trial or self._failures >= self.failures_to_open:
            self._opened_at = self._clock()
        self._trial = False

    def release(self) -> None:
        """The request let through went nowhere (the provider could not take it): no verdict."""
        self._trial = False


class Breakers:
    """The breakers of this process, by provider key (route and provider name), created on first use."""

    def __init__(self, failures: int = 5, cooldown: float = 30.0, clock: Callable[[], float] | None = None) -> None:
        self.failures = failures
        self.cooldown = cooldown
        self.clock = clock or time.monotonic
        self._all: OrderedDict[tuple[str, str], Breaker] = OrderedDict()

    def get(self, route: str, provider: str) -> Breaker:
        key = (route, provider)
        breaker = self._all.get(key)
        if breaker is None:
            breaker = self._all[key] = Breaker(self.failures, self.cooldown, self.clock)
            if len(self._all) > MAX_BREAKERS:
                self._all.popitem(last=False)
        else:
            self._all.move_to_end(key)
        return breaker

    def states(self) -> dict[tuple[str, str], BreakerState]:
        return {key: breaker.state for key, breaker in self._all.items()}


def attempt_order(plan: ProviderPlan, rng: Callable[[], float] = random.random) -> list[ProviderTarget]:
    """The providers a request may go to, in the order it tries them (weight 0 never; see the module
    docstring), at most `plan.max_attempts` of them ahead of the ones passed over."""
    enabled = [p for p in plan.providers if p.weight > 0]
    if plan.selection == "ordered":
        return enabled
    order: list[ProviderTarget] = []
    rest = list(enabled)
    while rest:
        point = rng() * sum(p.weight for p in rest)
        chosen = rest[-1]
        for p in rest:
            point -= p.weight
            if point < 0:
                chosen = p
                break
        order.append(chosen)
        rest.remove(chosen)
    return order


class Answer(Protocol):
    """What `send` gets back from a provider: an answer whose head has arrived (its body not read yet)."""

    @property
    def status(self) -> int: ...


A = TypeVar("A", bound=Answer)


class AttemptFailed(Exception):
    """`send` could not get an answer: `refusal` is what the client gets if no other provider answers;
    `counts`: the provider failed (connection, timeout: the breaker counts it) or merely could not take this
    request (no key, not translatable: passed over)."""

    def __init__(self, refusal: Refusal, *, counts: bool, kind: str) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
        self.counts = counts
        self.kind = kind  # unreachable | timeout | no_key | untranslatable


@dataclass
class Outcome(Generic[A]):
    """The answer for the client: the provider's `answer` (from `provider`), else the `refusal` of the last
    failure. `attempts`: (provider name, what happened) in order - served, failed (the status), unreachable,
    timeout, no_key, untranslatable, open (passed over by its breaker)."""

    provider: ProviderTarget | None = None
    answer: A | None = None
    refusal: Refusal | None = None
    attempts: list[tuple[str, str]] = field(default_factory=list)

    @property
    def failovers(self) -> list[str]:
        """The providers that failed and were followed by another attempt."""
        sent = [(name, what) for name, what in self.attempts if what not in ("open", "no_key", "untranslatable")]
        return [name for name, what in sent[:-1] if what != "served"]


async def run_attempts(order: Sequence[ProviderTarget], max_attempts: int, breaker: Callable[[ProviderTarget], Breaker],
                       send: Callable[[ProviderTarget], Awaitable[A]],
                       discard: Callable[[A], Awaitable[None]]) -> Outcome[A]:
    """Try `order` until a provider answers with something other than 429/5xx (see the module docstring).
    `discard` closes an answer that is not used (a failed one, once a later one is chosen)."""
    loop: _Loop[A] = _Loop(send, discard)
    for provider in order:
        if loop.sent >= max_attempts:
            break
        guard = breaker(provider)
        if not guard.allow():
            loop.out.attempts.append((provider.name, "open"))
            continue
        if await loop.attempt(provider, guard):
            return loop.out
    if loop.sent == 0 and loop.held is None and loop.out.refusal is None and order:
        guard = breaker(order[0])  # every provider open: the first is tried anyway
        guard.force()
        if await loop.attempt(order[0], guard):
            return loop.out
    if loop.held is not None:
        loop.out.provider, loop.out.answer, loop.out.refusal = loop.held[0], loop.held[1], None
    return loop.out


class _Loop(Generic[A]):
    """The state of one request's attempts."""

    def __init__(self, send: Callable[[ProviderTarget], Awaitable[A]],
                 discard: Callable[[A], Awaitable[None]]) -> None:
        self.send, self.discard = send, discard
        self.out: Outcome[A] = Outcome()
        self.held: tuple[ProviderTarget, A] | None = None  # the last failed answer: the client's if nothing better
        self.sent = 0
        self._failed = False  # a provider failed (the refusal is a real failure, not "could not take it")

    async def _drop_held(self) -> None:
        if self.held is not None:
            await self.discard(self.held[1])
            self.held = None

    async def attempt(self, provider: ProviderTarget, guard: Breaker) -> bool:
        """One attempt; True when its answer is the client's."""
        out = self.out
        try:
            answer = await self.send(provider)
        except AttemptFailed as failed:
            out.attempts.append((provider.name, failed.kind))
            if not failed.counts:  # passed over: the answer so far stands
                guard.release()
                if self.held is None and not self._failed:
                    out.provider, out.refusal = provider, failed.refusal
                return False
            self.sent += 1
            guard.failure()
            await self._drop_held()
            self._failed = True
            out.provider, out.refusal = provider, failed.refusal
            return False
        self.sent += 1
        self._failed = True
        await self._drop_held()
        if worth_another_attempt(answer.status):
            guard.failure()
            out.attempts.append((provider.name, str(answer.status)))
            self.held, out.refusal = (provider, answer), None
            return False
        guard.success()
        out.attempts.append((provider.name, "served"))
        out.provider, out.answer, out.refusal = provider, answer, None
        return True
