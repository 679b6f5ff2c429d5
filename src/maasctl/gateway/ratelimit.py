"""TokenRateLimitPolicy (`kuadrant.io/v1alpha1`) enforced as the wasm-shim + Limitador pair would.

- Each limit applies when the policy's and the limit's `when` predicates hold and every counter expression
  resolves (Limitador: "all its variables resolve"); the counter values split the limit per caller.
- Fixed windows, per (route domain, limit name, window, counter values): a counter starts at its first hit
  and resets `window` seconds later, as Limitador's expiring counters do. Windows are whole seconds
  (`duration_seconds`, Kuadrant's truncation); a 0 s window is never enforced.
- Request phase (`check`, `hits_addend` 0): a request is refused with 429 when any applicable counter is
  already *over* its limit (`used > limit`, Limitador's check with delta 0). The request that crosses a limit
  is still served.
- Response phase (`report`): `usage.total_tokens` of the response is added to every applicable counter of
  every rate; all rates are enforced, the most restrictive wins.
- A limit with no rates (an `unlimited` subscription) applies but never refuses: it is metered only.

Counters live in process memory (Limitador's default storage): one gateway replica, lost on restart.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from maasctl.contract.cel import CelError, Program, compile_expression
from maasctl.contract.windows import InvalidWindowError, duration_seconds
from maasctl.gateway.expressions import PolicyError, Predicates, predicates

__all__ = [
    "AppliedLimit",
    "CompiledLimit",
    "CompiledTokenRateLimitPolicy",
    "CounterStore",
    "Rate",
    "RateDenial",
    "RateState",
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


CounterKey = tuple[str, str, int, tuple[str, ...]]
"""(domain, limit name, window seconds, counter values)."""


class CounterStore:
    """In-memory fixed-window counters (Limitador's default storage)."""

    def __init__(self, clock: Callable[[], float] = time.time, max_entries: int = 1_000_000) -> None:
        self.clock = clock
        self._data: dict[CounterKey, list[float]] = {}  # key -> [used, expires_at]
        self._max = max_entries
        self._ops = 0

    def read(self, key: CounterKey) -> tuple[int, float | None]:
        """(used, resets_at); resets_at is None while the window has not started."""
        entry = self._data.get(key)
        if entry is None or entry[1] <= self.clock():
            return 0, None
        return int(entry[0]), entry[1]

    def add(self, key: CounterKey, delta: int) -> int:
        """Add `delta` (starting the window if needed); the new value."""
        now = self.clock()
        entry = self._data.get(key)
        if entry is None or entry[1] <= now:
            entry = [0.0, now + key[2]]
            self._data[key] = entry
        entry[0] += delta
        self._ops += 1
        if self._ops % 1024 == 0 or len(self._data) > self._max:
            self._sweep(now)
        return int(entry[0])

    def _sweep(self, now: float) -> None:
        for k in [k for k, (_, exp) in self._data.items() if exp <= now]:
            del self._data[k]

    def clear(self) -> None:
        self._data.clear()


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


class TokenRateLimiter:
    """Applies compiled TRLPs against a `CounterStore`."""

    def __init__(self, store: CounterStore | None = None, memo_size: int = 50_000) -> None:
        self.store = store or CounterStore()
        self._memo: dict[str, list[AppliedLimit]] = {}
        self._memo_size = memo_size

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

    def check(self, applied: list[AppliedLimit]) -> RateDenial | None:
        """The first rate already over its limit (Limitador's check with hits_addend 0), or None."""
        for item in applied:
            for rate in item.limit.rates:
                if rate.seconds <= 0:
                    continue
                used, resets_at = self.store.read(item.key(rate))
                if used > rate.limit:
                    retry = max(1, int((resets_at or self.store.clock()) - self.store.clock() + 0.999))
                    return RateDenial(item.limit.name, rate.limit, rate.window, used, retry)
        return None

    def report(self, applied: list[AppliedLimit], tokens: int) -> None:
        """Charge `tokens` to every rate of every applied limit."""
        if tokens <= 0:
            return
        for item in applied:
            for rate in item.limit.rates:
                if rate.seconds > 0:
                    self.store.add(item.key(rate), tokens)

    def states(self, applied: list[AppliedLimit]) -> list[RateState]:
        """Used and remaining quota of every rate (read only)."""
        now = self.store.clock()
        out = []
        for item in applied:
            for rate in item.limit.rates:
                used, resets_at = self.store.read(item.key(rate))
                out.append(
                    RateState(
                        item.limit.name,
                        rate.limit,
                        rate.window,
                        used,
                        max(0, rate.limit - used),
                        None if resets_at is None else round(resets_at - now, 3),
                        rate.seconds > 0 and used > rate.limit,
                    )
                )
        return out
