"""Benchmark the pure billing paths: compiling a Plan (with its CEL check) and the gateway's request limit.

Run: ``.venv/bin/python benchmarks/billing_bench.py``. No control plane needed.

Method:
  * compile: `compile_plan` for the seed's Plan with 1, 100 and 1,000 tenants, then `check_cel` on every
    object (what the reconciler does before applying), median of 20 runs after a warm-up;
  * admit: `RequestLimiter.admit` for one request of a Plan tenant against the compiled RateLimitPolicy
    (applicability memoised as in the gateway), 20,000 calls over 100 tenants, per-call mean.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import time
from typing import Any

from maasctl.api import parse
from maasctl.billing.api import Plan
from maasctl.billing.rules.compile import PlanInput, Tenant, compile_plan
from maasctl.builders.celcheck import check_cel
from maasctl.gateway.counters import MemoryCounterStore
from maasctl.gateway.requestlimit import RequestLimiter, compile_rate_limit_policy

SPEC: dict[str, Any] = {
    "limits": {"requestsPerMinute": 1_000_000, "tokensPerMinute": 2000000, "tokensPerDay": 400000000},
    "modelScopes": ["llama-3-*", "granite-*"],
    "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
}


def plan_input(tenants: int) -> PlanInput:
    plan = parse(Plan, {"apiVersion": "billing.opendatahub.io/v1alpha1", "kind": "Plan",
                        "metadata": {"name": "p", "namespace": "billing"}, "spec": SPEC})
    return PlanInput("billing", "p", "uid", plan.spec, tuple(Tenant(f"t{i}", f"org-{i}") for i in range(tenants)))


def compile_ms(tenants: int) -> float:
    inp = plan_input(tenants)
    for obj in compile_plan(inp).objects:
        check_cel(obj)
    runs = []
    for _ in range(20):
        start = time.perf_counter()
        for obj in compile_plan(inp).objects:
            check_cel(obj)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000


def admit_us(calls: int = 20_000) -> float:
    rlp = next(o for o in compile_plan(plan_input(100)).objects if o["kind"] == "RateLimitPolicy")
    rlp["metadata"] |= {"uid": "u", "generation": 1}
    policy = compile_rate_limit_policy(rlp)
    limiter = RequestLimiter(MemoryCounterStore())
    activations = [{"request": {"url_path": "/llm/m/v1"}, "auth": {"billing": {"tenant": f"org-{i}"}}}
                   for i in range(100)]

    async def run() -> float:
        for act in activations:
            await limiter.admit(policy, "llm/route", act)
        start = time.perf_counter()
        for i in range(calls):
            await limiter.admit(policy, "llm/route", activations[i % 100])
        return (time.perf_counter() - start) / calls * 1_000_000

    return asyncio.run(run())


def main() -> None:
    print(f"python {platform.python_version()} on {platform.machine()}")
    for tenants in (1, 100, 1000):
        print(f"compile + CEL check, {tenants} tenant(s): {compile_ms(tenants):.2f} ms")
    print(f"request limit admit: {admit_us():.1f} us per request")


if __name__ == "__main__":
    main()
