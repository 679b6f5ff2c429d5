"""RateLimitPolicy (`kuadrant.io/v1`) enforced as the wasm-shim + Limitador pair would: request counts.

A RateLimitPolicy has the same shape as a TokenRateLimitPolicy (`limits` of `rates`, `counters`, `when`), so
it is compiled by the same function (`ratelimit.compile_token_rate_limit_policy`) and its counters live in the
same `CounterStore`, under a domain of their own (`<route>#requests`, as Limitador keeps the two apart).
What differs is when counting happens: on the request, one hit per request (`hits_addend` 1). Limitador's
`check_rate_limited_and_update` refuses the request when any applicable rate would go over its limit
(`used + 1 > limit`) and then counts nothing; otherwise every rate of every applicable limit counts 1.
So a limit of 600 per minute serves 600 requests and refuses the 601st with 429 and `Retry-After`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from maasctl.contract.errors import Refusal
from maasctl.contract.limits import describe_limit
from maasctl.gateway.counters import CounterStore, MemoryCounterStore, Slot
from maasctl.gateway.ratelimit import (
    AppliedLimit,
    CompiledTokenRateLimitPolicy,
    RateDenial,
    RateState,
    TokenRateLimiter,
    compile_token_rate_limit_policy,
)

__all__ = ["CompiledRateLimitPolicy", "RequestLimiter", "compile_rate_limit_policy", "denial_response"]

CompiledRateLimitPolicy = CompiledTokenRateLimitPolicy
"""A compiled RateLimitPolicy (the same structure as a compiled TokenRateLimitPolicy)."""


def compile_rate_limit_policy(policy: Mapping[str, Any]) -> CompiledRateLimitPolicy:
    """Compile a RateLimitPolicy (implicit, `defaults` or `overrides` form). Raises `PolicyError`."""
    return compile_token_rate_limit_policy(policy)


class RequestLimiter:
    """Counts requests against compiled RateLimitPolicies, sharing the token limiter's counter store."""

    def __init__(self, store: CounterStore | None = None) -> None:
        self._limits = TokenRateLimiter(store or MemoryCounterStore())

    @property
    def store(self) -> CounterStore:
        return self._limits.store

    def applicable(self, policy: CompiledRateLimitPolicy, route: str, activation: Mapping[str, Any]
                   ) -> list[AppliedLimit]:
        return self._limits.applicable(policy, f"{route}#requests", activation)

    async def admit(self, policy: CompiledRateLimitPolicy, route: str, activation: Mapping[str, Any]
                    ) -> RateDenial | None:
        """Count this request, or return why it is refused (then nothing is counted). Atomic across replicas:
        one reservation of 1 on every rate with room for it (`used + 1 <= limit`), settled at once."""
        applied = self.applicable(policy, route, activation)
        pairs = [(item, rate) for item in applied for rate in item.limit.rates if rate.seconds > 0]
        slots = [Slot(item.key(rate), rate.limit - 1) for item, rate in pairs]
        denied = await self.store.reserve(slots, 1)
        if denied is not None:
            item, rate = pairs[slots.index(denied.slot)]
            retry = max(1, int((denied.usage.resets_in or 1) + 0.999))
            return RateDenial(item.limit.name, rate.limit, rate.window, denied.usage.used, retry)
        await self.store.settle([s.key for s in slots], 1, 1)
        return None

    async def states(self, applied: Sequence[AppliedLimit]) -> list[RateState]:
        """Used and remaining requests of every rate of `applied` (read only; simulate). `over` says the next
        request is refused (`used + 1 > limit`, as `admit` decides), not that the count passed the limit."""
        rates = [rate for item in applied for rate in item.limit.rates]
        states = await self._limits.states(applied)
        return [replace(s, over=rate.seconds > 0 and s.used + s.reserved + 1 > s.limit)
                for s, rate in zip(states, rates, strict=True)]

    async def check(self, policy: CompiledRateLimitPolicy, route: str, activation: Mapping[str, Any]
                    ) -> RateDenial | None:
        """What `admit` would answer, counting nothing (simulate): the first rate with no room for one more."""
        applied = self.applicable(policy, route, activation)
        pairs = [(item, rate) for item in applied for rate in item.limit.rates if rate.seconds > 0]
        usages = await self.store.read([item.key(rate) for item, rate in pairs])
        for (item, rate), usage in zip(pairs, usages, strict=True):
            if usage.used + usage.reserved > rate.limit - 1:
                retry = max(1, int((usage.resets_in or 1) + 0.999))
                return RateDenial(item.limit.name, rate.limit, rate.window, usage.used, retry)
        return None


def denial_response(denial: RateDenial) -> Refusal:
    """The 429 of a request limit, in the data plane's error format (`contract.errors`)."""
    return Refusal(429, "rate_limited", f"request limit {denial.limit} per {denial.window} exceeded: "
                   f"{describe_limit(denial.limit_name)}", {"retry-after": str(denial.retry_after)})
