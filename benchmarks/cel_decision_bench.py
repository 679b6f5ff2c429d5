"""Benchmark: the CEL cost of one gateway decision, compiled fast path against cel-python, in one run.

Renders the AuthPolicy and the TokenRateLimitPolicy of one model the way the controller does (S subscriptions
with an InferenceObjective each, two MaaSAuthPolicies naming users and groups), collects every CEL text in
them (`when` predicates, pattern predicates, value expressions, cache keys) and evaluates all of them against
the activation of an API-key request and of a token request, after the maas-api callbacks (the metadata the
policy's later steps read). A text that does not apply to a request (an API-key expression on a token
request, which its `when` keeps from running) errors in both modes: it is counted, not timed.

Each mode runs R rounds; the figure is the median time of one full pass (= the CEL part of one decision miss,
plus one TRLP memo miss), and the share of evaluations the fast path answered without cel-python.

    .venv/bin/python benchmarks/cel_decision_bench.py [--subscriptions 50] [--rounds 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Any

from maasctl.builders.authpolicy import (
    AuthPolicyInput,
    AuthPolicySource,
    AuthSettings,
    ObjectiveBinding,
    build_auth_policy,
)
from maasctl.builders.celcheck import cel_texts
from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import RateTier, SubscriptionLimits, TokenRateLimitInput, build_token_rate_limit_policy
from maasctl.contract.cel import CelEvaluationError, Program, compile_expression
from maasctl.contract.celfast import Unsure

MODEL = ObjectRef("llm", "granite")
ROUTE = ObjectRef("llm", "granite-route")


def policies(subscriptions: int) -> list[str]:
    subs = [ObjectRef("maas", f"sub-{i:03d}") for i in range(subscriptions)]
    auth = build_auth_policy(
        AuthPolicyInput(MODEL, ROUTE, (
            AuthPolicySource(ObjectRef("maas", "premium"), groups=("premium-users", "ops")),
            AuthPolicySource(ObjectRef("maas", "named"), users=("alice", "bob", "carol")),
        ), tuple(ObjectiveBinding(s, f"maas-{s.name}-0123456789") for s in subs)),
        AuthSettings("https://maas-api.opendatahub.svc:8443"))
    trlp = build_token_rate_limit_policy(TokenRateLimitInput(MODEL, ROUTE, tuple(
        SubscriptionLimits(s, (RateTier(1000, "1m"), RateTier(100000, "24h"))) for s in subs)))
    assert auth is not None and trlp is not None
    return sorted(set(cel_texts(auth)) | set(cel_texts(trlp)))


def activations() -> dict[str, dict[str, Any]]:
    info = {"name": "sub-007", "namespace": "maas", "organizationId": "acme", "costCenter": "", "labels": {}}
    identity = {"userid": "alice", "groups": ["premium-users"], "groups_str": "premium-users", "keyId": "k1",
                "selected_subscription": "sub-007", "selected_subscription_namespace": "maas",
                "selected_subscription_key": "maas/sub-007@llm/granite", "organization_id": "acme",
                "subscription_info": info}
    headers = {"content-type": "application/json", "accept": "*/*", "user-agent": "bench/1", "host": "gw.local"}
    path = "/llm/granite/v1/chat/completions"
    request = {"method": "POST", "path": path, "url_path": path, "host": "gw.local", "scheme": "http", "query": "",
               "protocol": "HTTP/1.1"}
    return {
        "api-key": {
            "request": {**request, "headers": {**headers, "authorization": "Bearer sk-oai-0123456789abcdef"}},
            "auth": {"identity": identity, "metadata": {
                "apiKeyValidation": {"valid": True, "username": "alice", "groups": ["premium-users"],
                                     "subscription": "maas/sub-007", "keyId": "k1"},
                "subscriptionInfo": info}},
        },
        "token": {
            "request": {**request, "headers": {**headers, "authorization": "Bearer eyJhbGciOi",
                                               "x-maas-subscription": "sub-007"}},
            "auth": {"identity": {**identity, "user": {"username": "alice", "groups": ["premium-users", "ops"]}},
                     "metadata": {"subscriptionInfo": info}},
        },
    }


def one_pass(programs: list[Program], activation: dict[str, Any], interpreted: bool) -> int:
    errors = 0
    for program in programs:
        try:
            program.interpret(activation) if interpreted else program.evaluate(activation)
        except CelEvaluationError:
            errors += 1
    return errors


def fast_share(programs: list[Program], activation: dict[str, Any]) -> float:
    answered = 0
    for program in programs:
        if program.fast is None:
            continue
        try:
            program.fast(activation)
        except Unsure:
            continue
        answered += 1
    return answered / len(programs)


def measure(programs: list[Program], activation: dict[str, Any], interpreted: bool, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        one_pass(programs, activation, interpreted)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscriptions", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    texts = policies(args.subscriptions)
    programs = [compile_expression(t) for t in texts]
    rows = []
    for name, activation in activations().items():
        applicable = [p for p in programs if one_pass([p], activation, interpreted=True) == 0]
        assert one_pass(applicable, activation, interpreted=False) == 0
        interpreted = measure(applicable, activation, True, args.rounds)
        compiled = measure(applicable, activation, False, args.rounds)
        rows.append({"request": name, "expressions": len(applicable),
                     "not_applicable": len(programs) - len(applicable),
                     "compiled_share": round(fast_share(applicable, activation), 3),
                     "cel_python_ms": round(interpreted, 2), "compiled_ms": round(compiled, 2),
                     "speedup": round(interpreted / compiled, 1)})
    result = {"machine": f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}",
              "subscriptions": args.subscriptions, "rounds": args.rounds, "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['machine']}; {args.subscriptions} subscriptions; median of {args.rounds} passes")
    print("| request | expressions (+ n/a) | answered compiled | cel-python (ms) | compiled (ms) | speed-up |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['request']} | {r['expressions']} (+{r['not_applicable']}) | {r['compiled_share']:.0%} | "
              f"{r['cel_python_ms']} | {r['compiled_ms']} | {r['speedup']}x |")


if __name__ == "__main__":
    main()
