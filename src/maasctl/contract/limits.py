"""The names of the rate and token limits the data plane enforces, and what a refusal says about each.

Two writers name limits: the TokenRateLimitPolicy builder (a subscription's window: `<sub ns>-<sub>-<model>-tokens`)
and the billing Plan compiler (`billing/<plan ns>/<plan>/<what>`: the Plan's own request or token limits, a
Prepaid tenant's daily allowance `allowance/<tenant>/<epoch>`, a throttled budget `budget/<budget>`). A 429 names
the limit that refused, so a caller (and the person they ask) can tell a subscription window from a Plan limit,
an exhausted wallet or a budget throttle. Every limit a request is counted against is its own tenant's or
subscription's (each applies only when the request's identity matches it), so naming it discloses nothing of
another tenant.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PLAN_LIMIT_PREFIX", "describe_limit", "plan_limit_name"]

PLAN_LIMIT_PREFIX: Final = "billing/"


def plan_limit_name(plan_namespace: str, plan: str, what: str) -> str:
    """The name of a billing Plan's limit (`what`: `tokens`, `requests`, `allowance/<tenant>/<epoch>`,
    `budget/<budget>`)."""
    return f"{PLAN_LIMIT_PREFIX}{plan_namespace}/{plan}/{what}"


def describe_limit(name: str) -> str:
    """What refused, in words, from a limit's name (unknown shapes are named as they are)."""
    if not name.startswith(PLAN_LIMIT_PREFIX):
        return f"subscription limit {name}"
    parts = name[len(PLAN_LIMIT_PREFIX):].split("/")
    if len(parts) < 3:
        return f"limit {name}"
    plan = f"billing Plan {parts[0]}/{parts[1]}"
    kind = parts[2:]
    if kind[0] == "allowance" and len(kind) >= 2:
        return (f"the prepaid allowance of tenant {kind[1]} ({plan}): what its wallet can pay for is used up "
                "(a payment or a reload raises it)")
    if kind[0] == "budget" and len(kind) >= 2:
        return f"budget {'/'.join(kind[1:])} throttles this tenant ({plan})"
    return f"the {'/'.join(kind)} limit of {plan}"
