"""AuthPolicy (`kuadrant.io/v1`): one per model route, aggregating every MaaSAuthPolicy that names the model.

Kuadrant allows one AuthPolicy per target, so all MaaSAuthPolicies of a model are merged into one policy
`maas-auth-<maasmodelref-name>` in the route's namespace. What it does, in Authorino's order:

1. Authentication. `Authorization: Bearer sk-oai-...` is a MaaS API key (`api-keys`, taken as is and validated
   by maas-api in step 2), and so is `x-api-key: sk-oai-...` without an `Authorization` header (Anthropic-style
   clients; `contract.edge.presented_credential` is the same rule in maas-api); any other bearer token is a
   Kubernetes token checked with a TokenReview (`kubernetes-tokens`); the same entries as the Gateway's
   default-deny and a billing Plan's (`builders.credentials`). A MaaS key in `x-api-key` beside an
   `Authorization` naming another credential is refused (`one-credential`).
2. Metadata (HTTP callbacks to maas-api, cached, authenticated with the gateway's shared token from the Secret
   `AuthSettings.gateway_token_secret` through `sharedSecretRef`):
   - `apiKeyValidation` (API keys only): `POST <maas-api>/internal/v1/api-keys/validate` with `{"key": ...}`;
     read fields: `valid` (bool), `username`, `groups` (list), `keyId`, `subscription` (the bound one).
   - `subscriptionInfo`: `POST <maas-api>/internal/v1/subscriptions/select` with `{"username", "groups",
     "requestedSubscription", "keySubscription", "requestedModel": "<model ns>/<model>"}`; read fields: `name`,
     `namespace`, `organizationId` and, on failure only, `error` (code) and `message`. `requestedSubscription`
     is the client's `X-MaaS-Subscription` header ("" when absent), `keySubscription` the API key's bound one
     ("" for tokens): maas-api applies `contract.selection` (a key never switches subscription; a token
     caller without the header is served by priority).
3. Authorization: client-sent headers only the gateway may set (`contract.edge.server_decided`: `X-MaaS-*` other
   than `X-MaaS-Subscription`, identity headers, the inference scheduler's `x-gateway-*` / `x-llm-d-*` family)
   are rejected; API keys must be valid; the caller must be one of the allowed users or in one of the allowed
   groups (union over all MaaSAuthPolicies of the model; `*` = any authenticated caller); a subscription must
   have been selected.
4. Response: upstream gets only `X-MaaS-Subscription` (server-resolved, never the client's value) and, when
   the model is served through an inference scheduler, the InferenceObjective of the selected subscription
   (`x-llm-d-inference-objective` and `x-gateway-inference-objective`, which the endpoint picker reads).
   Identity goes to rate limiting and telemetry as dynamic metadata `filters.identity` (`auth.identity.*` in
   TRLP predicates): `userid`, `groups`, `groups_str` (groups joined with ","),
   `keyId`, `selected_subscription`, `selected_subscription_namespace`, `selected_subscription_key`
   (`<sub ns>/<sub>@<model ns>/<model>`), `organization_id` (the subscription's `organization.id`, else
   its legacy `tokenMetadata.organizationId`, else "") and `subscription_info` (seed 001 §9.1: `name`,
   `namespace`, `organizationId`, `costCenter` and `labels`, the subscription's `tokenMetadata.labels`, `{}`
   when it has none) so a TokenRateLimitPolicy can limit by a subscription label, e.g.
   `auth.identity.subscription_info.labels.tier == "gold"`.
   When guardrails are on for the selected subscription's entry of this model, a second filter `guardrails`
   tells the data plane which GuardrailConfig to check the request and response with (`contract.guardrails`).
   The payload processor behind Kuadrant's filter cannot read dynamic metadata, so the same values also go to
   it in the `json` success header `x-maas-identity` (`contract.identity`; it never reaches a model).

Header names in `request.headers` are lowercase (Envoy lowercases them; the local gateway must too).
Every value interpolated into CEL goes through `cel_string`, so no user, group or name can break a predicate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from maasctl.builders import names
from maasctl.builders.credentials import (
    API_KEY_EXPRESSION,
    HAS_X_API_KEY,
    IS_API_KEY,
    X_API_KEY,
    credential_authentication,
    unauthenticated_response,
)
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.builders.validation import InvalidInputError, check_dns_label, check_dns_subdomain
from maasctl.contract import identity as ids
from maasctl.contract.cel import cel_string, cel_string_list
from maasctl.contract.edge import SERVER_DECIDED_EXACT, SERVER_DECIDED_PREFIXES
from maasctl.contract.guardrails import FILTER_NAME as GUARDRAILS_FILTER
from maasctl.contract.routing import (
    BASE_INFERENCE_PATHS,
    BASE_URL_MODEL_ANNOTATION,
    BASE_URL_PREFIX_ANNOTATION,
    MODEL_HEADER,
    valid_prefix,
)
from maasctl.contract.views import ANY_AUTHENTICATED, SubscriptionView

__all__ = [
    "API_VERSION",
    "DENIAL_MESSAGE",
    "DENIAL_REASON",
    "GATEWAY_OBJECTIVE_HEADER",
    "GROUPS_EXPRESSION",
    "KIND",
    "OBJECTIVE_HEADER",
    "OBJECTIVE_HEADERS",
    "SELECT_PATH",
    "SUBSCRIPTION_HEADER",
    "SUBSCRIPTION_INFO_EXPRESSION",
    "USERNAME_EXPRESSION",
    "VALIDATE_PATH",
    "AuthPolicyInput",
    "AuthPolicySource",
    "AuthSettings",
    "ObjectiveBinding",
    "build_auth_policy",
    "selection_epoch",
]

API_VERSION: Final = "kuadrant.io/v1"
KIND: Final = "AuthPolicy"
PART_OF: Final = "maas-auth-policy"
COMPONENT: Final = "auth-policy"
VALIDATE_PATH: Final = "/internal/v1/api-keys/validate"
SELECT_PATH: Final = "/internal/v1/subscriptions/select"
SUBSCRIPTION_HEADER: Final = "x-maas-subscription"
OBJECTIVE_HEADER: Final = "x-llm-d-inference-objective"
GATEWAY_OBJECTIVE_HEADER: Final = "x-gateway-inference-objective"
OBJECTIVE_HEADERS: Final = (OBJECTIVE_HEADER, GATEWAY_OBJECTIVE_HEADER)
"""The selected subscription's InferenceObjective goes out under both names: the reference's `x-llm-d-*` and the
Gateway API Inference Extension's, the one the public endpoint picker (and llm-d's, built on it) reads."""
_ONE_CREDENTIAL: Final = (
    f"!({HAS_X_API_KEY} && has(request.headers.authorization) && {X_API_KEY}.startsWith({cel_string('sk-oai-')}))"
    f" || request.headers.authorization == {cel_string('Bearer ')} + {X_API_KEY}"
)
_BACKSLASH: Final = "\\"
_CREDENTIAL: Final = (
    f"(({IS_API_KEY}) ? {API_KEY_EXPRESSION}"
    ' : (has(request.headers.authorization) ? request.headers.authorization : ""))'
)
"""The caller's credential: everything a subscription selection depends on besides the requested subscription
(the identity, its groups and a key's own subscription all follow from it). The selection cache is keyed by it:
keyed by username and groups joined with separators, user `a|b` in group `c` and user `a` in group `b|c` (or
groups `x,y` and `x`, `y`) shared an entry, so one caller could be served another's cached selection."""
_KEY: Final = "auth.metadata.apiKeyValidation"
_SUB: Final = f"auth.metadata.{ids.SUBSCRIPTION_INFO}"
USERNAME_EXPRESSION: Final = f"(({IS_API_KEY}) ? {_KEY}.username : auth.identity.user.username)"
GROUPS_EXPRESSION: Final = (
    f"(({IS_API_KEY}) ? {_KEY}.groups"
    " : (has(auth.identity.user.groups) ? auth.identity.user.groups : []))"
)
_HEADER_SUBSCRIPTION: Final = (
    f"({cel_string(SUBSCRIPTION_HEADER)} in request.headers"
    f" ? request.headers[{cel_string(SUBSCRIPTION_HEADER)}] : \"\")"
)
_KEY_SUBSCRIPTION: Final = (
    f"((({IS_API_KEY}) && has({_KEY}.subscription) && {_KEY}.subscription != null)"
    f" ? {_KEY}.subscription : \"\")"
)
_API_KEY_VALID: Final = f"has({_KEY}.valid) && {_KEY}.valid == true"
_SELECTED: Final = (
    f"has({_SUB}.name) && {_SUB}.name != \"\" && has({_SUB}.namespace)"
    f" && (!has({_SUB}.error) || {_SUB}.error == \"\")"
)
_SELECTED_REF: Final = f'({_SUB}.namespace + "/" + {_SUB}.name)'
_SELECT_FAILED: Final = f"has({_SUB}) && has({_SUB}.error) && {_SUB}.error != \"\""
_DENIAL_MESSAGE: Final = (
    f'({_SELECT_FAILED} && has({_SUB}.message)) ? {_SUB}.message : "Access to this model is not allowed"'
)
_DENIAL_REASON: Final = f'{_SELECT_FAILED} ? {_SUB}.error : "forbidden"'
DENIAL_MESSAGE: Final = _DENIAL_MESSAGE  # read by billing, whose wallet denials fall back to the MaaS message
DENIAL_REASON: Final = _DENIAL_REASON
_ORG: Final = f"{_SUB}.{ids.INFO_ORGANIZATION}"
_ORGANIZATION: Final = f'((has({_ORG}) && {_ORG} != null) ? {_ORG} : "")'
_CC: Final = f"{_SUB}.{ids.INFO_COST_CENTER}"
_COST_CENTER: Final = f'((has({_CC}) && {_CC} != null) ? {_CC} : "")'
_SUB_LABELS: Final = f"(has({_SUB}.labels) ? {_SUB}.labels : {{}})"  # maas-api omits, never nulls, it
SUBSCRIPTION_INFO_EXPRESSION: Final = (
    f'{{"name": {_SUB}.name, "namespace": {_SUB}.namespace, "organizationId": {_ORGANIZATION},'
    f' "costCenter": {_COST_CENTER}, "labels": {_SUB_LABELS}}}'
)
"""`auth.identity.subscription_info`: the selected subscription, with its metering labels (seed 001 §9.1)."""
_HEADER_NAME: Final = 'h.lowerAscii().replace("_", "-")'  # how contract.edge compares header names
_ROUTING_HEADER: Final = (
    f"(h == {cel_string(MODEL_HEADER)} && request.path in {cel_string_list(BASE_INFERENCE_PATHS)})"
)
"""The one server-decided header Authorino sees set: the processor's pre stage (before Kuadrant's filter)
refuses a client-sent `x-gateway-model-name` and then sets it from the body's `model` on the base-URL paths
(`contract.routing`). Exempt there only (exact spelling, no query string), refused everywhere else."""
_NO_CLIENT_IDENTITY_HEADERS: Final = (
    f"!request.headers.exists(h, {_HEADER_NAME} != {cel_string(SUBSCRIPTION_HEADER)} && !{_ROUTING_HEADER} && ("
    + " || ".join(f"{_HEADER_NAME}.startsWith({cel_string(p)})" for p in SERVER_DECIDED_PREFIXES)
    + f" || {_HEADER_NAME} in {cel_string_list(sorted(SERVER_DECIDED_EXACT))}))"
)
"""`contract.edge.server_decided` in CEL: an Envoy data plane refuses the same client headers (identity, `X-MaaS-*`,
and every header an inference scheduler reads) as the local gateway."""


@dataclass(frozen=True)
class AuthPolicySource:
    """One MaaSAuthPolicy that names the model: who it lets in."""

    policy: ObjectRef
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObjectiveBinding:
    """The InferenceObjective name requests under `subscription` carry for this model's pool."""

    subscription: ObjectRef
    objective_name: str


@dataclass(frozen=True)
class AuthSettings:
    """Controller settings the policy depends on.

    `maas_api_url` is the base URL Authorino calls (e.g. `https://maas-api.opendatahub.svc:8443`);
    `token_audiences` are the TokenReview audiences (empty: Authorino checks the request host);
    `cache_ttl_seconds` bounds how long Authorino reuses a validated key or a selection: a revoked key keeps
    working for up to that long. 0 disables the cache (every request calls maas-api). The default of 1 s is
    the product's promise: a revoked or expired key stops working within a second on every gateway replica.
    `gateway_token_secret` (`name`, `key`) is the Secret, in Authorino's namespace, whose value Authorino
    presents as `Authorization: Bearer` on the callbacks (maas-api's `gateway_tokens`; `sharedSecretRef`).
    """

    maas_api_url: str
    token_audiences: tuple[str, ...] = ()
    cache_ttl_seconds: int = 1
    gateway_token_secret: tuple[str, str] = ("maas-api-gateway-token", "token")


@dataclass(frozen=True)
class AuthPolicyInput:
    """Everything the AuthPolicy of one MaaSModelRef depends on.

    `route` is the model's HTTPRoute (the policy lives in its namespace); `sources` are all valid
    MaaSAuthPolicies naming the model; `objectives` are the InferenceObjective names per subscription when the
    model is served through an inference scheduler (empty otherwise).
    """

    model: ObjectRef
    route: ObjectRef
    sources: tuple[AuthPolicySource, ...]
    objectives: tuple[ObjectiveBinding, ...] = ()
    guardrails: dict[str, Any] | None = None  # the `guardrails` success filter (builders.guardrails)
    tenant_gateway: GatewayRef | None = None
    """The tenant Gateway every request on the route arrives through, sent with the selection so only
    subscriptions bound to it can be chosen; None for the default Gateway (maas-api's default)."""
    selection_epoch: str = ""
    """A digest of what a selection for this model depends on (`selection_epoch`): part of the selection's cache
    key, so a subscription that changes (Failed, deleted, an owner or a priority edited) re-renders the policy
    and no selection cached before the change is reused after it (locally and in Authorino, whose cache goes
    with the AuthConfig), instead of serving on for the cache TTL."""
    base_url: tuple[str, str] | None = None
    """An in-cluster model's (name clients send, path prefix of its route): written as the policy's
    `contract.routing` base-URL annotations, so the data plane can send a base-URL request naming it to its
    route; None for ExternalModels (their generated route matches the base URL itself)."""


def _subjects_predicate(sources: tuple[AuthPolicySource, ...]) -> str:
    users = sorted({u for s in sources for u in s.users})
    groups = sorted({g for s in sources for g in s.groups})
    if ANY_AUTHENTICATED in users or ANY_AUTHENTICATED in groups:
        return f'{USERNAME_EXPRESSION} != ""'
    clauses = []
    if users:
        clauses.append(f"{USERNAME_EXPRESSION} in {cel_string_list(users)}")
    if groups:
        clauses.append(f"{GROUPS_EXPRESSION}.exists(g, g in {cel_string_list(groups)})")
    return " || ".join(clauses) if clauses else "false"


def _objective_map(objectives: tuple[ObjectiveBinding, ...]) -> str:
    entries = sorted((b.subscription.key, b.objective_name) for b in objectives)
    if len({k for k, _ in entries}) != len(entries):
        raise InvalidInputError("two objectives for the same subscription")
    for _, name in entries:
        check_dns_subdomain(name, "InferenceObjective name")
    return "{" + ", ".join(f"{cel_string(k)}: {cel_string(v)}" for k, v in entries) + "}"


def _http(url: str, body: str, secret: tuple[str, str]) -> dict[str, Any]:
    return {
        "url": url, "method": "POST", "contentType": "application/json", "body": {"expression": body},
        "sharedSecretRef": {"name": secret[0], "key": secret[1]},
        "credentials": {"authorizationHeader": {"prefix": "Bearer"}},
    }


def _cache(key_expression: str, ttl: int) -> dict[str, Any]:
    if ttl < 0:
        raise InvalidInputError(f"cache TTL {ttl} is negative")
    return {"cache": {"key": {"expression": key_expression}, "ttl": ttl}} if ttl else {}


def _callback_url(base: str, path: str) -> str:
    if not base.startswith(("http://", "https://")) or any(c in base for c in " \r\n\t{}"):
        raise InvalidInputError(f"maas-api URL {base!r} is not an http(s) URL")
    return base.rstrip("/") + path


def _escaped(expression: str) -> str:
    """A CEL string with each backslash and `|` escaped by a backslash: parts joined by `|` read one way only."""
    return (f'({expression}).replace({cel_string(_BACKSLASH)}, {cel_string(_BACKSLASH * 2)})'
            f'.replace({cel_string("|")}, {cel_string(_BACKSLASH + "|")})')


def _rules(inp: AuthPolicyInput, settings: AuthSettings) -> dict[str, Any]:
    model_ref = inp.model.key
    ttl = settings.cache_ttl_seconds
    select_body = (
        f'{{"username": {USERNAME_EXPRESSION}, "groups": {GROUPS_EXPRESSION},'
        f' "requestedSubscription": {_HEADER_SUBSCRIPTION}, "keySubscription": {_KEY_SUBSCRIPTION},'
        f' "requestedModel": {cel_string(model_ref)}'
        + (f', "gateway": {cel_string(inp.tenant_gateway.key)}' if inp.tenant_gateway is not None else "")
        + "}"
    )
    select_cache_key = f'{_escaped(_CREDENTIAL)} + "|" + {_escaped(_HEADER_SUBSCRIPTION)}'
    if inp.selection_epoch:
        select_cache_key = f"{cel_string(inp.selection_epoch + '|')} + {select_cache_key}"
    selected_key = f'{_SELECTED_REF} + {cel_string("@" + model_ref)}'
    headers: dict[str, Any] = {
        SUBSCRIPTION_HEADER: {"plain": {"expression": f"{_SUB}.name"}, "when": [{"predicate": _SELECTED}]},
    }
    if inp.objectives:
        objective_map = _objective_map(inp.objectives)
        for name in OBJECTIVE_HEADERS:
            headers[name] = {
                "plain": {"expression": f"{objective_map}[{_SELECTED_REF}]"},
                "when": [{"predicate": _SELECTED}, {"predicate": f"{_SELECTED_REF} in {objective_map}"}],
            }
    identity: dict[str, Any] = {
        ids.USERID: {"expression": USERNAME_EXPRESSION},
        ids.GROUPS: {"expression": GROUPS_EXPRESSION},
        ids.GROUPS_STR: {"expression": f'{GROUPS_EXPRESSION}.join(",")'},
        ids.KEY_ID: {"expression": f'(({IS_API_KEY}) && has({_KEY}.keyId)) ? {_KEY}.keyId : ""'},
        ids.SELECTED_SUBSCRIPTION: {"expression": f"{_SUB}.name"},
        ids.SELECTED_SUBSCRIPTION_NAMESPACE: {"expression": f"{_SUB}.namespace"},
        ids.SELECTED_SUBSCRIPTION_KEY: {"expression": selected_key},
        ids.ORGANIZATION_ID: {"expression": _ORGANIZATION},
        ids.SUBSCRIPTION_INFO_KEY: {"expression": SUBSCRIPTION_INFO_EXPRESSION},
    }
    return {
        "authentication": credential_authentication(settings.token_audiences),
        "metadata": {
            "apiKeyValidation": {
                "http": _http(
                    _callback_url(settings.maas_api_url, VALIDATE_PATH),
                    f'{{"key": {API_KEY_EXPRESSION}}}',
                    settings.gateway_token_secret,
                ),
                "when": [{"predicate": IS_API_KEY}],
                **_cache(API_KEY_EXPRESSION, ttl),
                "priority": 0,
            },
            ids.SUBSCRIPTION_INFO: {
                "http": _http(_callback_url(settings.maas_api_url, SELECT_PATH), select_body,
                              settings.gateway_token_secret),
                "when": [{"predicate": f"!({IS_API_KEY}) || ({_API_KEY_VALID})"}],
                **_cache(select_cache_key, ttl),
                "priority": 1,
            },
        },
        "authorization": {
            "no-client-identity-headers": {
                "patternMatching": {"patterns": [{"predicate": _NO_CLIENT_IDENTITY_HEADERS}]},
                "priority": 0,
            },
            "one-credential": {
                "patternMatching": {"patterns": [{"predicate": _ONE_CREDENTIAL}]},
                "priority": 0,
            },
            "api-key-valid": {
                "patternMatching": {"patterns": [{"predicate": _API_KEY_VALID}]},
                "when": [{"predicate": IS_API_KEY}],
                "priority": 0,
            },
            "allowed-subjects": {
                "patternMatching": {"patterns": [{"predicate": _subjects_predicate(inp.sources)}]},
                "priority": 1,
            },
            "subscription-selected": {
                "patternMatching": {"patterns": [{"predicate": _SELECTED}]},
                "priority": 1,
            },
        },
        "response": {
            "unauthenticated": unauthenticated_response(),
            "unauthorized": {
                "code": 403,
                "message": {"expression": _DENIAL_MESSAGE},
                "headers": {"x-ext-auth-reason": {"expression": _DENIAL_REASON}},
            },
            "success": {
                "headers": {**headers, ids.HEADER: _identity_header(identity, inp.guardrails)},
                "filters": {
                    ids.FILTER: {"json": {"properties": identity}, "metrics": True},
                    **({GUARDRAILS_FILTER: inp.guardrails} if inp.guardrails is not None else {}),
                },
            },
        },
    }


def _cel_map(properties: dict[str, Any]) -> str:
    """A `json` filter's properties as one CEL map literal (`expression` or constant `value` entries)."""
    def value(source: dict[str, Any]) -> str:
        if "expression" in source:
            return f"({source['expression']})"
        if isinstance(source.get("value"), str):
            return cel_string(source["value"])
        raise InvalidInputError(f"a filter property {source!r} is neither an expression nor a string value")
    return "{" + ", ".join(f"{cel_string(name)}: {value(src)}" for name, src in properties.items()) + "}"


def _identity_header(identity: dict[str, Any], guardrails: dict[str, Any] | None) -> dict[str, Any]:
    """`x-maas-identity` (`contract.identity`): what the payload processor behind Kuadrant's filter reads, as
    Authorino exports it to Limitador - the identity filter, the `guardrails` filter when it applies, and the
    `billing` filter a Plan's AuthPolicy exports (tenant and key labels, `billing.rules.identity`; empty tenant when
    the subscription names no organization, which no Plan limit matches) - with the selection's record fields."""
    key_labels = f"((({IS_API_KEY}) && has({_KEY}.labels)) ? {_KEY}.labels : {{}})"
    billing = f"{cel_string(ids.BILLING)}: {{{cel_string(ids.BILLING_TENANT)}: {_ORGANIZATION},"
    billing += f" {cel_string(ids.BILLING_KEY_LABELS)}: {key_labels}}}"
    filters = f"{{{billing}}}"
    if guardrails is not None:
        guarded = " && ".join(f"({w['predicate']})" for w in guardrails.get("when") or []) or "true"
        rails = f"{cel_string(GUARDRAILS_FILTER)}: {_cel_map(guardrails['json']['properties'])}"
        filters = f"(({guarded}) ? {{{billing}, {rails}}} : {filters})"
    return {"json": {"properties": {
        ids.FILTER: {"expression": _cel_map(identity)},
        ids.FILTERS: {"expression": filters},
        ids.SUBSCRIPTION_INFO: {"expression": f"{{{cel_string(ids.INFO_ORGANIZATION)}: {_ORGANIZATION},"
                                              f" {cel_string(ids.INFO_COST_CENTER)}: {_COST_CENTER},"
                                              f" {cel_string(ids.INFO_LABELS)}: {_SUB_LABELS}}}"},
    }}}


def selection_epoch(subscriptions: Iterable[SubscriptionView]) -> str:
    """`AuthPolicyInput.selection_epoch` of a model from the subscriptions naming it: whatever the selection rule
    (`contract.selection`) reads of them - which exist, usable or not, owners, priority, models, Gateway."""
    parts = sorted(
        json.dumps([s.key, s.usable, s.priority, sorted(s.users), sorted(s.groups), sorted(m.key for m in s.models),
                    s.gateway])
        for s in subscriptions
    )
    return names.stable_hash(*parts) if parts else ""


def build_auth_policy(inp: AuthPolicyInput, settings: AuthSettings) -> dict[str, Any] | None:
    """The desired AuthPolicy of `inp.model`, or None when no MaaSAuthPolicy names it (delete the policy).

    Raises:
        InvalidInputError: an invalid route/model/objective name or maas-api URL.
    """
    check_dns_subdomain(inp.model.name, "MaaSModelRef name")
    check_dns_subdomain(inp.route.name, "HTTPRoute name")
    check_dns_label(inp.route.namespace, "HTTPRoute namespace")
    if not inp.sources:
        return None
    labels = names.model_labels(inp.model, PART_OF, COMPONENT)
    annotations = {names.AUTH_POLICIES_ANNOTATION: ",".join(sorted({s.policy.key for s in inp.sources}))}
    if inp.base_url is not None:
        name, prefix = inp.base_url
        if not valid_prefix(prefix):
            raise InvalidInputError(f"the model's path prefix {prefix[:100]!r} is not a plain path")
        annotations[BASE_URL_MODEL_ANNOTATION], annotations[BASE_URL_PREFIX_ANNOTATION] = name, prefix
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": names.authpolicy_name(inp.model.name),
            "namespace": inp.route.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "targetRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": inp.route.name},
            "rules": _rules(inp, settings),
        },
    }
