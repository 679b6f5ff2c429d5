"""TokenRateLimitPolicy (`kuadrant.io/v1alpha1`) enforced as the wasm-shim + Limitador pair would.

- Each limit applies when the policy's and the limit's `when` predicates hold and every counter expression
  resolves (Limitador: "all its variables resolve"); the counter values split the limit per caller.
- Fixed windows, per (route domain, limit name, window, counter values): a counter starts at its first hit
  and resets `window` seconds later, as Limitador's expiring counters do. Windows are whole seconds
  (`duration_seconds`, Kuadrant's truncation); a 0 s window is never enforced.
- Request phase (`reserve`): a request is admitted only while every applicable counter has room
  (`used + reserved <= limit`) and then reserves an estimate of its tokens on all of them at once; otherwise 429.
  Where Limitador checks with delta 0 (`used > limit`) and reports afterwards, so that a burst of concurrent
  requests all pass the check before any is counted, reservations make concurrent requests see each other:
  the overshoot is about one request's worth whatever the concurrency (BENCHMARKS.md).
- Response phase (`settle`): the tokens charged for the response (`dataplane.charge.charge_for`: its usage, or a
  conservative estimate) are added to every rate and the reservation is released; all rates are enforced,
  the most restrictive wins.
- A limit with no rates (an `unlimited` subscription) applies but never refuses: it is metered only.

Counters live in a `CounterStore` (`gateway.counters`): process memory for one replica, Redis when several
replicas must share them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from maasctl.contract.cel import CelError, Program, compile_expression
from maasctl.contract.windows import InvalidWindowError, duration_seconds
from maasctl.gateway.counters import CounterKey, CounterStore, Denied, MemoryCounterStore, Slot
from maasctl.gateway.expressions import PolicyError, Predicates, predicates

__all__ = [
    "AppliedLimit",
    "CompiledLimit",
    "CompiledTokenRateLimitPolicy",
    "Rate",
    "RateDenial",
    "RateState",
    "Reservation",
    "TokenRateLimiter",
    "compile_token_rate_limit_policy",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rate:
    limit: int
    window: str
    seconds: int


@dataclass(frozen=True)
class CompiledLimit:
    name: str
    rates: tuple[Rate, ...]
    counters: tuple[Program, ...]
    when: Predicates


@dataclass(frozen=True)
class CompiledTokenRateLimitPolicy:
    """A TRLP ready to evaluate; rebuilt only when its (uid, generation) changes."""

    namespace: str
    name: str
    uid: str
    generation: int
    when: Predicates
    limits: tuple[CompiledLimit, ...]
    request_attributes: tuple[str, ...] = ()  # `request.<attr>` the expressions read (memo key)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def compile_token_rate_limit_policy(policy: Mapping[str, Any]) -> CompiledTokenRateLimitPolicy:
    """Compile a TokenRateLimitPolicy (implicit defaults, `defaults` or `overrides` form).

    Raises:
        PolicyError: an expression that does not compile or an invalid window.
    """
    meta = policy["metadata"]
    spec = policy.get("spec") or {}
    block = spec.get("overrides") or spec.get("defaults") or spec
    limits = []
    for name, limit in sorted((block.get("limits") or {}).items()):
        rates = []
        for rate in limit.get("rates") or ():
            try:
                seconds = duration_seconds(str(rate["window"]))
            except InvalidWindowError as exc:
                raise PolicyError(f"limit {name!r}: {exc}") from exc
            rates.append(Rate(max(0, int(rate["limit"])), str(rate["window"]), seconds))
        try:
            counters = tuple(compile_expression(str(c["expression"])) for c in limit.get("counters") or ())
        except CelError as exc:
            raise PolicyError(f"limit {name!r}: {exc}") from exc
        limits.append(CompiledLimit(str(name), tuple(rates), counters, predicates(limit.get("when"))))
    texts = [p.text for lim in limits for p in (*lim.when.programs, *lim.counters)]
    texts += [p.text for p in predicates(block.get("when")).programs]
    attrs = sorted({m.group(1) for t in texts for m in re.finditer(r"request\.(\w+)", t)})
    return CompiledTokenRateLimitPolicy(
        request_attributes=tuple(attrs),
        namespace=str(meta.get("namespace", "")),
        name=str(meta["name"]),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation", 0)),
        when=predicates(block.get("when")),
        limits=tuple(limits),
    )


@dataclass(frozen=True)
class AppliedLimit:
    """A limit that applies to one request, with its resolved counter values."""

    policy: str
    domain: str
    limit: CompiledLimit
    counter_values: tuple[str, ...]

    def key(self, rate: Rate) -> CounterKey:
        return (self.domain, self.limit.name, rate.seconds, self.counter_values)


@dataclass(frozen=True)
class RateState:
    """One rate of one applied limit, as simulate reports it."""

    limit_name: str
    limit: int
    window: str
    used: int
    remaining: int
    resets_in: float | None
    over: bool
    reserved: int = 0


@dataclass(frozen=True)
class RateDenial:
    """Why a request got 429."""

    limit_name: str
    limit: int
    window: str
    used: int
    retry_after: int


def _counter_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


@dataclass(frozen=True)
class Reservation:
    """What one admitted request holds until it settles."""

    slots: tuple[Slot, ...]
    amount: int


class TokenRateLimiter:
    """Applies compiled TRLPs against a `CounterStore` (see `gateway.counters` for reservations)."""

    def __init__(self, store: CounterStore | None = None, memo_size: int = 50_000) -> None:
        self.store: CounterStore = store or MemoryCounterStore()
        self._memo: dict[str, list[AppliedLimit]] = {}
        self._memo_size = memo_size
        self._slot_names: dict[CounterKey, tuple[str, str]] = {}  # for messages: limit name and window text

    def applicable(
        self, policy: CompiledTokenRateLimitPolicy, domain: str, activation: Mapping[str, Any]
    ) -> list[AppliedLimit]:
        """The limits of `policy` that apply to a request (its `when` holds and its counters resolve).

        A pure function of the policy, the request attributes its expressions read and the identity, so the
        answer is memoised on exactly those (CEL evaluation costs about a millisecond per expression).
        """
        request = activation.get("request") or {}
        try:
            key = json.dumps(
                [policy.uid, policy.generation, domain, [request.get(a) for a in policy.request_attributes],
                 activation.get("auth")],
                sort_keys=True, default=str,
            )
        except (TypeError, ValueError):
            return self._applicable(policy, domain, activation)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._applicable(policy, domain, activation)
            if len(self._memo) >= self._memo_size:
                self._memo.clear()
            self._memo[key] = hit
        return list(hit)

    def _applicable(
        self, policy: CompiledTokenRateLimitPolicy, domain: str, activation: Mapping[str, Any]
    ) -> list[AppliedLimit]:
        try:
            if policy.when and not policy.when.holds(activation):
                return []
        except CelError as exc:
            log.debug("policy %s condition not evaluable: %s", policy.key, exc)
            return []
        out = []
        for limit in policy.limits:
            try:
                if limit.when and not limit.when.holds(activation):
                    continue
                raw = [c.evaluate(activation) for c in limit.counters]
            except CelError as exc:
                log.debug("limit %s of %s does not apply: %s", limit.name, policy.key, exc)
                continue
            if any(v is None or v == "" for v in raw):
                continue
            out.append(AppliedLimit(policy.key, domain, limit, tuple(_counter_text(v) for v in raw)))
        return out

    @staticmethod
    def _slots(applied: Sequence[AppliedLimit]) -> tuple[Slot, ...]:
        return tuple(Slot(item.key(rate), rate.limit) for item in applied for rate in item.limit.rates
                     if rate.seconds > 0)

    @staticmethod
    def estimate(applied: Sequence[AppliedLimit], bound: int) -> int:
        """Tokens to reserve for a request: its own bound (`dataplane.charge.request_bound`: the prompt estimate
        plus its completion limit for each completion, the completion ceiling when it states none), at most one
        more than the smallest limit that applies: admission compares what is already used and reserved with the
        limit, so such a request still fits an empty window, and what it holds then overfills the limit, so
        requests whose bound reaches the limit pass one at a time (reserving exactly the limit let a second one
        in: `used + reserved` was not over it). Never a learned average: a caller could lower that with small
        requests and then burst long ones past the limit."""
        limits = [rate.limit + 1 for item in applied for rate in item.limit.rates if rate.seconds > 0]
        return max(1, min([bound, *limits]))

    def _denial(self, denied: Denied) -> RateDenial:
        slot, usage = denied.slot, denied.usage
        # Full of used tokens: retry when the window resets; full of reservations: as soon as they settle.
        retry = max(1, int((usage.resets_in or 1) + 0.999)) if usage.used > slot.limit else 1
        name, window = self._slot_names.get(slot.key, (slot.key[1], f"{slot.key[2]}s"))
        return RateDenial(name, slot.limit, window, usage.used + usage.reserved, retry)

    async def check(self, applied: Sequence[AppliedLimit]) -> RateDenial | None:
        """The first rate that is over (`used + reserved > limit`), read only (simulate)."""
        slots = self._slots(applied)
        self._remember(applied)
        for slot, usage in zip(slots, await self.store.read([s.key for s in slots]), strict=True):
            if usage.used + usage.reserved > slot.limit:
                return self._denial(Denied(slot, usage))
        return None

    async def reserve(self, applied: Sequence[AppliedLimit], amount: int) -> Reservation | RateDenial:
        """Admit a request and hold `amount` tokens on every rate that applies, or say which rate is full."""
        slots = self._slots(applied)
        self._remember(applied)
        denied = await self.store.reserve(slots, amount)
        if denied is not None:
            return self._denial(denied)
        return Reservation(slots, amount)

    async def settle(self, reservation: Reservation, applied: Sequence[AppliedLimit], tokens: int) -> None:
        """Count the request's `tokens` and release its reservation."""
        await self.store.settle([s.key for s in reservation.slots], reservation.amount, max(0, tokens))

    async def report(self, applied: Sequence[AppliedLimit], tokens: int) -> None:
        """Count `tokens` without a reservation (a request admitted elsewhere)."""
        await self.settle(Reservation(self._slots(applied), 0), applied, tokens)

    def _remember(self, applied: Sequence[AppliedLimit]) -> None:
        for item in applied:
            for rate in item.limit.rates:
                self._slot_names[item.key(rate)] = (item.limit.name, rate.window)
        if len(self._slot_names) > 100_000:
            self._slot_names.clear()

    async def states(self, applied: Sequence[AppliedLimit]) -> list[RateState]:
        """Used, reserved and remaining quota of every rate (read only)."""
        pairs = [(item, rate) for item in applied for rate in item.limit.rates]
        usages = await self.store.read([item.key(rate) for item, rate in pairs])
        out = []
        for (item, rate), usage in zip(pairs, usages, strict=True):
            used = usage.used
            out.append(
                RateState(
                    item.limit.name,
                    rate.limit,
                    rate.window,
                    used,
                    max(0, rate.limit - used),
                    None if usage.resets_in is None else round(usage.resets_in, 3),
                    rate.seconds > 0 and used + usage.reserved > rate.limit,
                    usage.reserved,
                )
            )
        return out
