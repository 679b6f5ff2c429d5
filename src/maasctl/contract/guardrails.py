"""The guardrails contract between the controller (writer) and the data plane (reader).

How the data plane learns that a request is guarded: the model's AuthPolicy (one per model route, rendered by
the controller from every subscription naming the model) carries a success filter named `guardrails` — Envoy
dynamic metadata in a real cluster, `AuthOutcome.filters["guardrails"]` in the local gateway. It is present
only when guardrails are enabled globally and the selected subscription enables guardrails for this model:

    {"config": "<GuardrailConfig ID>", "ready": true, "url": "<engine base URL>",
     "failurePolicy": "FailClosed" | "FailOpen", "timeoutSeconds": "10"}

`ready` is false when the configuration does not exist or is invalid (not deployed): such a request is refused
(503 `guardrails_config_unavailable`) whatever the failure policy, never passed unchecked. The engine is
NVIDIA NeMo Guardrails' server; the data plane calls `POST <url>/v1/chat/completions` with
`guardrails.config_id` and `guardrails.options.rails` = ["input"] or ["output"] (see `gateway.guardrails`).

How much one check carries: at most `MAX_CHECK_CHARS` characters of text (the input; for output rails the
answer plus as much of the user turn as fits). The engine renders that text into a task prompt that must stay
under the prompt's `max_length` (NeMo Guardrails: 16,000 characters unless the configuration sets one), so the
controller refuses a configuration whose prompt templates leave less room than that (`builders.guardrails`),
and the gateway refuses longer input with 413 `guardrails_input_too_large` — both sides read this one number.

Also here: the typed views of the two guardrails kinds (`settings_view`, `config_view`), shared by the
reconcilers and `maasctl simulate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from maasctl.api import GuardrailConfig, GuardrailsSettings, parse
from maasctl.api.guardrails import SETTINGS_NAME
from maasctl.runtime.objects import thaw

__all__ = [
    "ENGINE_PROMPT_MAX_LENGTH",
    "FAIL_CLOSED",
    "FAIL_OPEN",
    "FILTER_NAME",
    "MAX_CHECK_CHARS",
    "SETTINGS_NAME",
    "ConfigView",
    "GuardModel",
    "GuardrailsBinding",
    "SettingsView",
    "api_key_env_var",
    "binding_from_filters",
    "config_view",
    "settings_view",
]

FILTER_NAME: Final = "guardrails"
FAIL_CLOSED: Final = "FailClosed"
FAIL_OPEN: Final = "FailOpen"
DEFAULT_TIMEOUT: Final = 10.0
MAX_CHECK_CHARS: Final = 12_000
ENGINE_PROMPT_MAX_LENGTH: Final = 16_000  # NeMo Guardrails' default `max_length` of a task prompt


@dataclass(frozen=True, slots=True)
class GuardrailsBinding:
    """What the data plane needs to check one request (parsed from the `guardrails` filter)."""

    config: str
    ready: bool
    url: str
    fail_open: bool
    timeout: float

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "ready": self.ready, "url": self.url,
                "failurePolicy": FAIL_OPEN if self.fail_open else FAIL_CLOSED, "timeoutSeconds": self.timeout}


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def binding_from_filters(filters: Mapping[str, Any]) -> GuardrailsBinding | None:
    """The binding exported by the AuthPolicy, or None when the request is not guarded.

    A malformed filter (no config) is still a binding (ready false): the request is refused, never passed.
    """
    raw = filters.get(FILTER_NAME)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        return GuardrailsBinding("", False, "", False, DEFAULT_TIMEOUT)
    config = str(raw.get("config") or "")
    try:
        timeout = float(raw.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    except (TypeError, ValueError):
        timeout = DEFAULT_TIMEOUT
    timeout = min(max(timeout, 0.1), 120.0)
    url = str(raw.get("url") or "")
    ready = _truthy(raw.get("ready")) and bool(config) and bool(url)
    return GuardrailsBinding(config, ready, url, str(raw.get("failurePolicy")) == FAIL_OPEN, timeout)


def api_key_env_var(config: str, model_type: str) -> str:
    """The environment variable the engine reads a guardrail model's API key from."""
    return f"GUARDRAILS_{config}_{model_type}_API_KEY".upper().replace("-", "_")


# --- views ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettingsView:
    namespace: str
    name: str
    enabled: bool = False
    fail_open: bool = False
    timeout: float = DEFAULT_TIMEOUT
    problem: str | None = None

    @property
    def active(self) -> bool:
        """Enabled and valid: the data-plane integration exists."""
        return self.enabled and self.problem is None


@dataclass(frozen=True, slots=True)
class GuardModel:
    type: str
    engine: str
    model: str
    base_url: str
    secret_name: str | None = None
    secret_key: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigView:
    namespace: str
    name: str
    models: tuple[GuardModel, ...] = ()
    config_yaml: str = ""
    rails_co: str = ""
    deleting: bool = False
    problem: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _problem(exc: ValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"invalid object ({where}: {first.get('msg')})"[:1024]


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, bool]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or ""), bool(meta.get("deletionTimestamp"))


def settings_view(obj: Mapping[str, Any]) -> SettingsView:
    raw = thaw(obj)
    raw.pop("status", None)
    namespace, name, _ = _meta(obj)
    if name != SETTINGS_NAME:
        return SettingsView(namespace, name, problem=f"GuardrailsSettings must be named {SETTINGS_NAME}")
    try:
        settings = parse(GuardrailsSettings, raw)
    except ValidationError as exc:
        return SettingsView(namespace, name, problem=_problem(exc))
    spec = settings.spec
    return SettingsView(namespace, name, spec.enabled, str(spec.failure_policy) == FAIL_OPEN,
                        float(spec.timeout_seconds))


def config_view(obj: Mapping[str, Any]) -> ConfigView:
    raw = thaw(obj)
    raw.pop("status", None)
    namespace, name, deleting = _meta(obj)
    try:
        config = parse(GuardrailConfig, raw)
    except ValidationError as exc:
        return ConfigView(namespace, name, deleting=deleting, problem=_problem(exc))
    spec = config.spec
    models = tuple(
        GuardModel(m.type, m.engine, m.model, str(m.base_url),
                   m.api_key_secret_ref.name if m.api_key_secret_ref else None,
                   m.api_key_secret_ref.key if m.api_key_secret_ref else None)
        for m in spec.models
    )
    return ConfigView(namespace, name, models, spec.config_yaml, spec.rails_co or "", deleting)
