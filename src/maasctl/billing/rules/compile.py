"""The Plan compiler: a pure function from a Plan (and its tenants) to the Kuadrant and Kueue objects that
enforce it. No clock, no cluster, no environment: the reconciler gathers the inputs and applies the output.

What a Plan becomes, all attached to `spec.targetRef` in the Plan's namespace and named `billing-plan-<plan>`:

- TokenRateLimitPolicy (`tokensPerMinute`, `tokensPerDay`): one limit with a 1m and a 24h rate;
- RateLimitPolicy (`requestsPerMinute`): one limit with a 1m rate;
- AuthPolicy: exports the request's tenant as dynamic metadata `billing.tenant` (what the limits count on), and,
  when `modelScopes` or `geoScopes` restrict, an authorization rule admitting only matching models/regions; its
  own credential entries and `FAIL_CLOSED_RULE` keep a route no MaaS policy covers closed with the MaaS answers
  (`_fallback_authentication`);
- a ClusterQueue per tenant (`gpuQuota`): nominalQuota of nvidia.com/gpu from the configured ResourceFlavor,
  admitting the tenant's namespaces (label `billing.opendatahub.io/tenant=<organization id>`).

Every limit and rule applies only to the Plan's tenants (`identity.tenant_in`) and counts per tenant, so several
Plans can share one Gateway. All three policies use `overrides` with `strategy: merge`: Kuadrant then merges
their rules (by name) into every route's effective policy, on top of the MaaS per-route policies and the
gateway's default-deny, instead of replacing them (docs/billing.md, "Composition"). `queueClass` is passed
through as the annotation `billing.opendatahub.io/queue-class` on every generated object.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from maasctl.billing.api import API_VERSION as BILLING_API_VERSION
from maasctl.billing.api.plan import ALL_GEOS, PlanSpec
from maasctl.billing.rules import identity, names, wallet
from maasctl.billing.rules.budget import throttled_tokens_per_minute
from maasctl.builders import credentials
from maasctl.contract import identity as ids
from maasctl.contract.cel import cel_string, cel_string_list
from maasctl.contract.limits import plan_limit_name

__all__ = [
    "DESIRED_HASH_ANNOTATION",
    "FAIL_CLOSED_RULE",
    "FALLBACK_IDENTITY",
    "FALLBACK_MARK",
    "BudgetAction",
    "PlanInput",
    "Tenant",
    "compile_plan",
    "desired_hash",
    "glob_regex",
    "model_predicate",
    "resource_flavor",
]

AUTH_POLICY_API: Final = "kuadrant.io/v1"
RATE_LIMIT_POLICY_API: Final = "kuadrant.io/v1"
TOKEN_RATE_LIMIT_POLICY_API: Final = "kuadrant.io/v1alpha1"
KUEUE_API: Final = "kueue.x-k8s.io/v1beta2"
GPU: Final = "nvidia.com/gpu"
DESIRED_HASH_ANNOTATION: Final = "billing.opendatahub.io/desired-hash"
FAIL_CLOSED_RULE: Final = "billing-plan-fail-closed"
FALLBACK_MARK: Final = "billingPlanFallback"
"""The property marking an identity only the Plan's own credential entries established (no policy of the route
authenticated the request): `FAIL_CLOSED_RULE` refuses it."""
FALLBACK_IDENTITY: Final = f"type(auth.identity) == map && {cel_string(FALLBACK_MARK)} in auth.identity"
"""CEL: the identity is the Plan's fallback. The MaaS key identity is the key itself (a string), never a map."""
MODELS_LISTING: Final = '!request.url_path.endsWith("/v1/models")'
_PATH: Final = 'request.url_path.split("/")'


@dataclass(frozen=True, order=True)
class Tenant:
    """A TenantAccount on the Plan: its name (same namespace), the organization id requests carry and, when its
    wallet state is enforced (Frozen, Suspended, Closed), the message refused requests get and the GPU freeze
    mode (Drain or Preempt)."""

    name: str
    organization: str
    denied: str | None = None
    gpu_freeze_mode: str = "Drain"
    allowance: tuple[tuple[str, int], ...] = ()
    """A Prepaid wallet's (epoch, tokens) caps (`status.allowanceLimits`, `wallet.epoch_allowance`): one
    TokenRateLimitPolicy limit each, bounding its spend in money whatever the rater's lag."""


@dataclass(frozen=True, order=True)
class BudgetAction:
    """A BudgetPolicy whose Throttle or Freeze is in force (docs/billing.md, "Budgets"): its tenant's
    organization, the key labels it covers (empty: every request of the tenant) and, for Freeze, the 403 text."""

    name: str
    organization: str
    selector: tuple[tuple[str, str], ...]
    action: str  # "Throttle" or "Freeze"
    message: str = ""


@dataclass(frozen=True)
class PlanInput:
    """Everything a Plan's objects depend on. `target_geo` is the target's billing.opendatahub.io/geo label."""

    namespace: str
    name: str
    uid: str
    spec: PlanSpec
    tenants: tuple[Tenant, ...] = ()
    target_geo: str | None = None
    gpu_flavor: str = "billing-gpu"
    denials: tuple[tuple[str, str], ...] = ()
    """(organization, message) of every denied tenant of the namespace: every Plan's AuthPolicy carries the
    same messages, so whichever Plan's `response.unauthorized` wins the merge, each tenant reads its own."""
    fallback_denial: tuple[str, str] = ('"Access to this model is not allowed"', '"forbidden"')
    budgets: tuple[BudgetAction, ...] = ()
    """Budgets in force in the namespace: each Plan carries every Freeze's message (as for wallet denials), and
    the rules and limits of its own tenants' budgets."""
    """CEL of the message and `x-ext-auth-reason` of every other denial (the reconciler passes the MaaS
    AuthPolicy's, which the wallet denial replaces in the merged policy)."""


@dataclass(frozen=True)
class Compiled:
    """The desired objects (namespaced policies first, then ClusterQueues) and what could not be compiled."""

    objects: tuple[dict[str, Any], ...]
    unsupported: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())


def glob_regex(glob: str) -> str:
    """An anchored RE2/Python regular expression for a model glob: `*` and `?` never cross a `/`."""
    out = []
    for ch in glob:
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch.isalnum() or ch == "/":
            out.append(ch)
        else:
            out.append("\\" + ch)
    return "^" + "".join(out) + "$"


def model_predicate(globs: list[str]) -> str:
    """CEL: the model in the request path (`/<namespace>/<model>/...`) matches one of `globs`.

    A glob without `/` matches the model name, one with `/` matches `<namespace>/<name>`.
    """
    name = f"{_PATH}[2]"
    qualified = f'({_PATH}[1] + "/" + {_PATH}[2])'
    matches = [f"{qualified if '/' in g else name}.matches({cel_string(glob_regex(g))})" for g in sorted(set(globs))]
    return f"{_PATH}.size() > 2 && ({' || '.join(matches)})"


def desired_hash(obj: Mapping[str, Any]) -> str:
    """A stable hash of what the compiler wants (spec, labels, other annotations): equal hashes, same intent."""
    meta = obj.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != DESIRED_HASH_ANNOTATION}
    payload = {"spec": obj.get("spec"), "labels": meta.get("labels"), "annotations": annotations}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def _limit_name(inp: PlanInput, what: str) -> str:
    return plan_limit_name(inp.namespace, inp.name, what)


def _metadata(inp: PlanInput, name: str, namespace: str | None, owned: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": names.plan_labels(inp.namespace, inp.name)}
    if namespace is not None:
        meta["namespace"] = namespace
    if inp.spec.queue_class:
        meta["annotations"] = {names.QUEUE_CLASS_ANNOTATION: inp.spec.queue_class}
    if owned and inp.uid:
        meta["ownerReferences"] = [{"apiVersion": BILLING_API_VERSION, "kind": "Plan", "name": inp.name,
                                    "uid": inp.uid, "controller": True}]
    return meta


def _target(spec: PlanSpec) -> dict[str, Any]:
    ref = {"group": spec.target_ref.group, "kind": spec.target_ref.kind, "name": spec.target_ref.name}
    if spec.target_ref.section_name:
        ref["sectionName"] = spec.target_ref.section_name
    return ref


def _stamp(obj: dict[str, Any]) -> dict[str, Any]:
    annotations = obj["metadata"].setdefault("annotations", {})
    annotations[DESIRED_HASH_ANNOTATION] = desired_hash(obj)
    return obj


def _counted_limit(inp: PlanInput, rates: list[dict[str, Any]], tokens: bool) -> dict[str, Any]:
    when = [{"predicate": identity.tenant_in(t.organization for t in inp.tenants)}]
    if tokens:
        when.append({"predicate": MODELS_LISTING})
    return {"rates": rates, "counters": [{"expression": identity.TENANT}], "when": when}


def _allowance_limits(inp: PlanInput) -> dict[str, Any]:
    """One limit per Prepaid tenant and allowance epoch (the current and the previous UTC day). Each counts the
    tenant's tokens from the epoch's start (its name carries the epoch, so a new epoch is a new counter and a
    new cap never restarts the count of the epoch in force); the cap is what the ledger has rated since then
    plus what the wallet can still pay for (`wallet.epoch_allowance`). No headroom: the gateway admits a request
    while the counter plus what is in flight is within the cap, so the request that crosses it completes
    (seed: grace) and the overspend is bounded by the requests in flight, in tokens and so in money."""
    out: dict[str, Any] = {}
    for t in sorted(set(inp.tenants)):
        if t.denied:
            continue
        caps: dict[str, int] = {}
        for epoch, tokens in t.allowance:  # an epoch given twice keeps its lower cap (fail closed)
            caps[epoch] = min(max(0, tokens), caps.get(epoch, wallet.MAX_CAP))
        for epoch, cap in sorted(caps.items()):
            out[_limit_name(inp, f"allowance/{t.name}/{epoch}")] = {
                "rates": [{"limit": cap, "window": wallet.ALLOWANCE_WINDOW}],
                "counters": [{"expression": identity.TENANT}, {"expression": cel_string(f"allowance-{epoch}")}],
                "when": [{"predicate": identity.tenant_in([t.organization])}, {"predicate": MODELS_LISTING}],
            }
    return out


def _own_budgets(inp: PlanInput, action: str) -> list[BudgetAction]:
    orgs = {t.organization for t in inp.tenants}
    return sorted(b for b in set(inp.budgets) if b.action == action and b.organization in orgs)


def _throttle_limits(inp: PlanInput) -> dict[str, Any]:
    """One limit per throttled budget: its keys together get `budget.throttled_tokens_per_minute` (one counter
    per tenant and budget, so minting more keys with the label does not multiply it)."""
    rate = throttled_tokens_per_minute(inp.spec.limits.tokens_per_minute)
    out: dict[str, Any] = {}
    for b in _own_budgets(inp, "Throttle"):
        when = [{"predicate": identity.tenant_in([b.organization])}, {"predicate": MODELS_LISTING}]
        if b.selector:
            when.append({"predicate": identity.key_labels_match(identity.KEY_LABELS, b.selector)})
        out[_limit_name(inp, f"budget/{b.name}")] = {
            "rates": [{"limit": rate, "window": "1m"}],
            "counters": [{"expression": identity.TENANT}, {"expression": cel_string(f"budget-{b.name}")}],
            "when": when,
        }
    return out


def _budget_matches(b: BudgetAction) -> str:
    """CEL (authorization phase): the request is the budget's tenant's, with a key the budget covers."""
    match = f"{identity.HAS_AUTHZ_TENANT} && {identity.AUTHZ_TENANT} == {cel_string(b.organization)}"
    if b.selector:
        match += " && " + identity.key_labels_match(identity.AUTHZ_KEY_LABELS, b.selector)
    return f"({match})"


def _rate_limit_policy(inp: PlanInput, api_version: str, kind: str, what: str, rates: list[dict[str, Any]],
                       tokens: bool) -> dict[str, Any]:
    return _stamp({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": _metadata(inp, names.policy_name(inp.name), inp.namespace, owned=True),
        "spec": {
            "targetRef": _target(inp.spec),
            "overrides": {"strategy": "merge", "limits": {_limit_name(inp, what): _counted_limit(inp, rates, tokens)}},
        },
    })


def _scope_patterns(inp: PlanInput) -> tuple[list[dict[str, str]], list[str]]:
    patterns: list[dict[str, str]] = []
    notes: list[str] = []
    if inp.spec.model_scopes:
        patterns.append({"predicate": model_predicate(list(inp.spec.model_scopes))})
    geos = list(inp.spec.geo_scopes)
    if ALL_GEOS not in geos:
        geo = inp.target_geo or ""
        patterns.append({"predicate": f"{cel_string(geo)} in {cel_string_list(sorted(geos))}"})
        if geo not in geos:
            where = f"region {geo!r}" if geo else "no region (label billing.opendatahub.io/geo)"
            notes.append(f"the target has {where}, outside geoScopes {sorted(geos)}: the Plan's tenants are denied")
    return patterns, notes


def _fallback_authentication() -> dict[str, Any]:
    """The Plan's own credential entries: the MaaS ones (`builders.credentials.credential_authentication`, the same
    credentials, the same TokenReview), tried only after every entry of the policy they are merged into
    (priority 100), and marking the identity they establish (`FALLBACK_MARK`). Merged into a model route's MaaS
    policy they never decide (the MaaS entries accept or refuse the same credentials first); where the Plan's
    policy stands alone (a route no MaaS policy covers, where Kuadrant keeps the newest atomic gateway policy) they
    give the MaaS answers: no credential or a refused token 401, any other credential an identity that
    `FAIL_CLOSED_RULE` refuses with 403 — the default-deny's answers, whichever gateway policy wins."""
    maas = credentials.credential_authentication()
    marked_key = {"expression": f"{{{cel_string(FALLBACK_MARK)}: true}}"}  # not the key: nothing reads it
    return {
        f"{FAIL_CLOSED_RULE}-api-keys": {**maas["api-keys"], "plain": marked_key, "priority": 100},
        f"{FAIL_CLOSED_RULE}-tokens": {**maas["kubernetes-tokens"], "overrides": {FALLBACK_MARK: {"value": True}},
                                       "priority": 100},
    }


def _auth_policy(inp: PlanInput, patterns: list[dict[str, str]]) -> dict[str, Any]:
    rules: dict[str, Any] = {
        # A Plan never opens a route the gateway default-deny closes, nor changes a MaaS answer (docs/billing.md,
        # "Fail closed"): its own credential entries only ever establish an identity this rule refuses.
        "authentication": _fallback_authentication(),
        "authorization": {FAIL_CLOSED_RULE: {
            "patternMatching": {"patterns": [{"predicate": f"!({FALLBACK_IDENTITY})"}]}, "priority": 0}},
        "response": {"success": {"filters": {identity.FILTER: {
            "json": {"properties": {ids.BILLING_TENANT: {"expression": identity.AUTHZ_TENANT}}},
            "when": [{"predicate": identity.HAS_AUTHZ_TENANT}],
        }}}},
    }
    if any(b.selector for b in _own_budgets(inp, "Throttle")):
        # The key's labels, for the throttled budgets' limits (rate limiting cannot read the metadata).
        rules["response"]["success"]["filters"][identity.FILTER]["json"]["properties"][ids.BILLING_KEY_LABELS] = {
            "expression": identity.AUTHZ_KEY_LABELS_OR_EMPTY}
    if patterns:
        rules["authorization"][f"billing-plan-{inp.namespace}-{inp.name}"] = {
            "when": [{"predicate": identity.authz_tenant_in(t.organization for t in inp.tenants)}],
            "patternMatching": {"patterns": patterns},
        }
    denied = sorted({t.organization for t in inp.tenants if t.denied})
    if denied:
        rules["authorization"][f"billing-wallet-{inp.namespace}-{inp.name}"] = {
            "when": [{"predicate": identity.HAS_AUTHZ_TENANT}],
            "patternMatching": {"patterns": [
                {"predicate": f"!({identity.AUTHZ_TENANT} in {cel_string_list(denied)})"}]},
        }
    for b in _own_budgets(inp, "Freeze"):
        rules["authorization"][names.bounded(f"billing-budget-{inp.namespace}-{b.name}", 253)] = {
            "when": [{"predicate": identity.HAS_AUTHZ_TENANT}],
            "patternMatching": {"patterns": [{"predicate": f"!{_budget_matches(b)}"}]},
        }
    frozen = sorted(b for b in set(inp.budgets) if b.action == "Freeze")
    if inp.denials or frozen:
        rules["response"]["unauthorized"] = _wallet_denial(inp.denials, _budget_denial(frozen, inp.fallback_denial))
    return _stamp({
        "apiVersion": AUTH_POLICY_API,
        "kind": "AuthPolicy",
        "metadata": _metadata(inp, names.policy_name(inp.name), inp.namespace, owned=True),
        "spec": {"targetRef": _target(inp.spec), "overrides": {"strategy": "merge", "rules": rules}},
    })


def _budget_denial(frozen: list[BudgetAction], fallback: tuple[str, str]) -> tuple[str, str]:
    """The message and reason CEL: a frozen budget's text for the requests it covers, else `fallback`."""
    message, reason = fallback
    for b in reversed(frozen):
        match = _budget_matches(b)
        message = f"{match} ? {cel_string(b.message)} : ({message})"
        reason = f'{match} ? "billing-budget-frozen" : ({reason})'
    return message, reason


def _wallet_denial(denials: tuple[tuple[str, str], ...], fallback: tuple[str, str]) -> dict[str, Any]:
    """`response.unauthorized` naming the denied tenant and why; any other denial keeps the MaaS message.

    There is one `response.unauthorized` per effective policy: with `overrides`/`merge` this one replaces the
    MaaS route policy's, so it repeats the MaaS expressions for every request that is not a denied tenant's."""
    if not denials:
        return {"code": 403, "message": {"expression": fallback[0]},
                "headers": {"x-ext-auth-reason": {"expression": fallback[1]}}}
    orgs = sorted(dict(denials))
    messages = "{" + ", ".join(f"{cel_string(o)}: {cel_string(m)}" for o, m in sorted(dict(denials).items())) + "}"
    denied = f"({identity.HAS_AUTHZ_TENANT} && {identity.AUTHZ_TENANT} in {cel_string_list(orgs)})"
    return {
        "code": 403,
        "message": {"expression": f"{denied} ? {messages}[{identity.AUTHZ_TENANT}] : ({fallback[0]})"},
        "headers": {"x-ext-auth-reason": {"expression": f'{denied} ? "billing-tenant-blocked" : ({fallback[1]})'}},
    }


def _cluster_queue(inp: PlanInput, tenant: Tenant, quota: int) -> dict[str, Any]:
    meta = _metadata(inp, names.queue_name(inp.namespace, tenant.name), None, owned=False)
    meta["labels"][names.TENANT_LABEL] = names.label_value(tenant.name)
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {names.TENANT_LABEL: names.label_value(tenant.organization)}},
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": inp.gpu_flavor, "resources": [{"name": GPU, "nominalQuota": quota}]}]}],
    }
    if tenant.denied:
        # Kueue: Hold stops admitting (running workloads finish: Drain); HoldAndDrain also evicts (Preempt).
        spec["stopPolicy"] = "HoldAndDrain" if tenant.gpu_freeze_mode == "Preempt" else "Hold"
    return _stamp({"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": meta, "spec": spec})


def resource_flavor(name: str) -> dict[str, Any]:
    """The (shared, never deleted) ResourceFlavor the tenants' ClusterQueues draw GPUs from."""
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
            "metadata": {"name": name, "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY}}, "spec": {}}


def compile_plan(inp: PlanInput) -> Compiled:
    """The objects enforcing `inp`'s Plan, in a stable order."""
    limits = inp.spec.limits
    objects: list[dict[str, Any]] = []
    token_rates = []
    if limits.tokens_per_minute is not None:
        token_rates.append({"limit": limits.tokens_per_minute, "window": "1m"})
    if limits.tokens_per_day is not None:
        token_rates.append({"limit": limits.tokens_per_day, "window": "24h"})
    patterns, notes = _scope_patterns(inp)
    objects.append(_auth_policy(inp, patterns))
    if limits.requests_per_minute is not None:
        objects.append(_rate_limit_policy(inp, RATE_LIMIT_POLICY_API, "RateLimitPolicy", "requests",
                                          [{"limit": limits.requests_per_minute, "window": "1m"}], tokens=False))
    allowances = _allowance_limits(inp) | _throttle_limits(inp)
    if token_rates or allowances:
        trlp = _rate_limit_policy(inp, TOKEN_RATE_LIMIT_POLICY_API, "TokenRateLimitPolicy", "tokens", token_rates,
                                  tokens=True)
        plan_limits = trlp["spec"]["overrides"]["limits"]
        if not token_rates:
            plan_limits.clear()
        plan_limits.update(allowances)
        trlp["metadata"]["annotations"].pop(DESIRED_HASH_ANNOTATION)
        objects.append(_stamp(trlp))
    if limits.gpu_quota is not None:
        objects.extend(_cluster_queue(inp, t, limits.gpu_quota) for t in sorted(set(inp.tenants)))
    unsupported: tuple[str, ...] = ()
    if limits.max_concurrency is not None:
        unsupported = (f"limits.maxConcurrency ({limits.max_concurrency}) is stored but not enforced: Kuadrant has "
                       "no concurrent-request limit",)
    return Compiled(tuple(objects), unsupported, tuple(notes))


