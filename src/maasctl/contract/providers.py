"""Several providers for one model (issue 38): the provider plan the controller writes on a model's route and
the data plane reads, the headers between the payload processor and its provider relay, and the rule of which
provider answers are worth another attempt. Written once here: the controller, the local gateway, the
processor and its relay all apply it (docs/providers.md, "Several providers for one model").

The plan rides on the generated HTTPRoute as the annotation `PROVIDERS_ANNOTATION` (compact JSON): each
provider's name, base URL, model name, API format, key scheme, the *name* of its key's Secret (never a key),
and weight; the selection rule and the attempt bound. The data plane reads it with `decode_plan`, which refuses
anything the controller would not write - and re-checks every provider host against the destination rule
(`contract.destinations`), so a hand-written route cannot aim the relay at cloud metadata or the API server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from maasctl.contract.destinations import destination_problem
from maasctl.contract.edge import PROVIDER_KEY_SCHEMES
from maasctl.contract.labels import API_FORMATS

__all__ = [
    "MAX_PROVIDERS",
    "PROVIDERS_ANNOTATION",
    "PROVIDER_HEADER",
    "RELAY_PATH",
    "RELAY_ROUTE_HEADER",
    "RELAY_TOKEN_HEADER",
    "InvalidPlan",
    "ProviderPlan",
    "ProviderTarget",
    "decode_plan",
    "encode_plan",
    "plan_of",
    "worth_another_attempt",
]

PROVIDERS_ANNOTATION: Final = "maas.opendatahub.io/providers"
"""On a generated ExternalModel HTTPRoute with fallbacks: the provider plan (`encode_plan`)."""
MAX_PROVIDERS: Final = 8
RELAY_PATH: Final = "/v1/chat/completions"
"""The one path the provider relay serves: a model with several providers is served as OpenAI chat completions
(and the Messages door, translated in front of it)."""
RELAY_TOKEN_HEADER: Final = "x-maas-relay-token"
"""Set by the payload processor on a request it admitted to a relayed route; the relay serves nothing without
it. Server-decided (`x-maas-*`): a client sending it is refused at the edge."""
RELAY_ROUTE_HEADER: Final = "x-maas-relay-route"
"""Set with the token: `namespace/name` of the route whose plan the relay follows (never a destination)."""
PROVIDER_HEADER: Final = "x-maas-provider"
"""On the relay's answer: the name of the provider that served (or whose error is the answer). The response
stages read it into the usage record and never pass it to the client."""

Selection = Literal["ordered", "weighted"]
_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_UNSAFE: Final = re.compile(r"[\x22\x27\x5c\x00-\x1f\x7f-\x9f]")
_KEY_FIELD: Final = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_SECRET: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class InvalidPlan(ValueError):
    """A provider plan the controller would not write (the route is then served by none: 500)."""


@dataclass(frozen=True)
class ProviderTarget:
    """One provider of a model. `base_url`: `scheme://host[:port]` plus the API base path, no trailing `/`;
    `secret`: the name of the Secret holding its key (None: no key), `secret_key` the key in it."""

    name: str
    base_url: str
    target_model: str
    api_format: str = "openai-chat"
    key_scheme: str = "bearer"
    secret: str | None = None
    secret_key: str = "api-key"
    weight: int = 1

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    @property
    def chat_url(self) -> str:
        """Where a chat completion goes: `<base>/chat/completions`, or `<base>/messages` for a Messages
        provider (the request translated)."""
        return self.base_url + ("/messages" if self.api_format == "messages" else "/chat/completions")


@dataclass(frozen=True)
class ProviderPlan:
    """The providers of a model, in spec order, and how a request goes through them."""

    providers: tuple[ProviderTarget, ...]
    selection: Selection = "ordered"
    max_attempts: int = MAX_PROVIDERS

    def named(self, name: str) -> ProviderTarget | None:
        return next((p for p in self.providers if p.name == name), None)


def encode_plan(plan: ProviderPlan) -> str:
    """The annotation value (the controller writes it; `decode_plan` reads it back)."""
    providers = []
    for p in plan.providers:
        entry: dict[str, Any] = {"name": p.name, "url": p.base_url, "model": p.target_model}
        if p.api_format != "openai-chat":
            entry["format"] = p.api_format
        if p.key_scheme != "bearer":
            entry["auth"] = p.key_scheme
        if p.secret is not None:
            entry["secret"] = p.secret
            if p.secret_key != "api-key":
                entry["secretKey"] = p.secret_key
        if p.weight != 1:
            entry["weight"] = p.weight
        providers.append(entry)
    return json.dumps({"selection": plan.selection, "maxAttempts": plan.max_attempts, "providers": providers},
                      separators=(",", ":"))


def _text(entry: Mapping[str, Any], key: str, pattern: re.Pattern[str] | None = None, default: str | None = None
          ) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value or len(value) > 2048:
        raise InvalidPlan(f"provider {key} is missing or not a string")
    if pattern is not None and pattern.fullmatch(value) is None:
        raise InvalidPlan(f"provider {key} {value[:64]!r} is not allowed")
    return value


def _base_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username is not None or _UNSAFE.search(value) or " " in value:
        raise InvalidPlan("provider url is not a plain http(s) base URL")
    try:
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError as exc:
        raise InvalidPlan("provider url has an invalid port") from exc
    problem = destination_problem(parts.hostname)  # the namespace rule is the controller's (not known here)
    if problem is not None:
        raise InvalidPlan(f"provider host {problem}")
    return value.rstrip("/")


def _model(entry: Mapping[str, Any]) -> str:
    model = _text(entry, "model")
    if len(model) > 253 or _UNSAFE.search(model):
        raise InvalidPlan("provider model is not a usable model name")
    return model


def _target(entry: Any) -> ProviderTarget:
    if not isinstance(entry, Mapping):
        raise InvalidPlan("a provider is not an object")
    weight = entry.get("weight", 1)
    if type(weight) is not int or not 0 <= weight <= 100:
        raise InvalidPlan("provider weight is not 0-100")
    api_format = _text(entry, "format", default="openai-chat")
    scheme = _text(entry, "auth", default="bearer")
    if api_format not in API_FORMATS or scheme not in PROVIDER_KEY_SCHEMES:
        raise InvalidPlan("provider format or auth scheme is unknown")
    secret = entry.get("secret")
    return ProviderTarget(
        name=_text(entry, "name", _NAME), base_url=_base_url(_text(entry, "url")),
        target_model=_model(entry),
        api_format=api_format, key_scheme=scheme,
        secret=_text(entry, "secret", _SECRET) if secret is not None else None,
        secret_key=_text(entry, "secretKey", _KEY_FIELD, default="api-key"), weight=weight,
    )


def decode_plan(text: str) -> ProviderPlan:
    """The plan of a route annotation. Raises InvalidPlan for anything `encode_plan` would not write: not JSON,
    no or more than 8 providers, names that repeat, an unknown format or key scheme, a URL that is not a plain
    http(s) base URL or whose host the destination rule refuses, a weight outside 0-100, no provider with a
    weight, an attempt bound outside 1-8."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidPlan("the provider plan is not JSON") from exc
    if not isinstance(raw, dict):
        raise InvalidPlan("the provider plan is not an object")
    entries = raw.get("providers")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_PROVIDERS:
        raise InvalidPlan(f"the provider plan must list 1-{MAX_PROVIDERS} providers")
    providers = tuple(_target(e) for e in entries)
    if len({p.name for p in providers}) != len(providers):
        raise InvalidPlan("provider names repeat")
    if not any(p.weight > 0 for p in providers):
        raise InvalidPlan("no provider has a weight above 0")
    selection = raw.get("selection", "ordered")
    attempts = raw.get("maxAttempts", MAX_PROVIDERS)
    if selection not in ("ordered", "weighted") or type(attempts) is not int or not 1 <= attempts <= MAX_PROVIDERS:
        raise InvalidPlan("the provider plan's selection or maxAttempts is not allowed")
    return ProviderPlan(providers, selection, attempts)


def plan_of(annotations: Mapping[str, Any] | None) -> ProviderPlan | None:
    """The plan a route carries (None: a single-provider route). Raises InvalidPlan."""
    text = (annotations or {}).get(PROVIDERS_ANNOTATION)
    return None if text is None else decode_plan(str(text))


def worth_another_attempt(status: int) -> bool:
    """A provider's answer head that sends the request to the next provider: 429 (the provider throttles us)
    and every 5xx (Anthropic's 529 included). Anything else - a 2xx, or a 4xx the next provider would give
    too - is the answer."""
    return status == 429 or 500 <= status <= 599
