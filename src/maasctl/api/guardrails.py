"""Guardrails (seed 004 "Configure guardrails"): the global settings and the guardrail configurations.

- `GuardrailsSettings` is a singleton: exactly one object named `default`, in the subscription namespace. It
  holds the global switch (`enabled`) and the failure policy (FailClosed: end the request when the engine
  cannot complete a check; FailOpen: let the request continue). Disabling it removes the data-plane
  integration: the engine is not deployed and no AuthPolicy exports guardrails, so settings left on
  subscriptions have no effect (their status says so).
- `GuardrailConfig`: one NeMo Guardrails configuration. Its name is the configuration ID (lowercase letters,
  digits, hyphens). It lists the guardrail models (model type unique within the config, model name, base URL,
  an optional API key kept in a Secret and handed to the engine only as an environment variable) and the
  `config.yaml` / `rails.co` contents. The controller validates a configuration before the engine gets it; a
  configuration the engine cannot load is reported in status and not deployed.

Subscriptions attach a configuration per model with `spec.modelRefs[].guardrails` (see `subscription.py`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from maasctl.api._base import (
    AGE_COLUMN,
    CamelModel,
    Conditions,
    CrdInfo,
    Generation,
    KubeObject,
    KubeSchema,
    PrinterColumn,
    Rule,
)
from maasctl.api._fields import _URL_RULE, DNS_LABEL_PATTERN, ENDPOINT_PATTERN, Matches, ObjectName, safe

SETTINGS_NAME = "default"
BaseUrl = Annotated[str, Field(max_length=2048), Matches(ENDPOINT_PATTERN, "baseUrl" + _URL_RULE)]
MAX_CONTENT = 256 * 1024  # config.yaml / rails.co bytes: far below a ConfigMap's 1 MiB


class FailurePolicy(StrEnum):
    """What the gateway does when the guardrails engine cannot complete a check (down, slow, failing)."""

    FAIL_CLOSED = "FailClosed"
    FAIL_OPEN = "FailOpen"


class GuardrailsSettingsSpec(CamelModel):
    """The global guardrails switch and failure policy."""

    enabled: bool = Field(
        default=False,
        description="Enable guardrails. When false the engine is not deployed and no request is checked; "
        "guardrail settings left on subscriptions have no effect.",
    )
    failure_policy: FailurePolicy = Field(
        default=FailurePolicy.FAIL_CLOSED,
        description="FailClosed (end request on guardrails failure: 503) or FailOpen (ignore guardrails on "
        "failure: the request continues, counted in a metric and the usage record).",
    )
    timeout_seconds: Annotated[float, Field(ge=0.1, le=120)] = Field(
        default=10.0,
        description="How long the gateway waits for one guardrails check before the failure policy applies.",
    )


class GuardrailUsage(CamelModel):
    """One subscription model that uses a guardrail configuration."""

    subscription: str = Field(max_length=317, description="<namespace>/<name> of the MaaSSubscription.")
    model: str = Field(max_length=317, description="<namespace>/<name> of the MaaSModelRef.")


class GuardrailsPhase(StrEnum):
    """Phase of the guardrails settings."""

    DISABLED = "Disabled"
    ENABLED = "Enabled"
    DEGRADED = "Degraded"


class GuardrailsSettingsStatus(CamelModel):
    """Observed state of the guardrails settings."""

    phase: GuardrailsPhase | None = Field(
        default=None, description="Disabled, Enabled, or Degraded (enabled, but a configuration or an attachment "
        "has a problem).",
    )
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: Ready (engine rendered), Singleton."
    )
    engine_url: str | None = Field(
        default=None, max_length=2048, description="URL the gateway calls the guardrails engine at."
    )
    deployed_configs: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=1024)] | None = Field(
        default=None, description="IDs of the configurations the engine serves."
    )
    attached: Annotated[list[GuardrailUsage], Field(max_length=4096)] | None = Field(
        default=None,
        description="Subscription models with guardrails enabled (enforced only while enabled is true).",
    )


SINGLETON_NAME = Rule(
    rule=f"self.metadata.name == '{SETTINGS_NAME}'",
    message=f"GuardrailsSettings is a singleton: its metadata.name must be {SETTINGS_NAME}",
)


class GuardrailsSettings(KubeObject):
    """Global guardrails settings: the switch and the failure policy. A singleton named default in the
    subscription namespace."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="guardrailssettings",
        short_names=("grsettings",),
        printer_columns=(
            PrinterColumn("Enabled", ".spec.enabled", "boolean", description="Guardrails enabled."),
            PrinterColumn("Failure Policy", ".spec.failurePolicy", description="FailClosed or FailOpen."),
            PrinterColumn("Phase", ".status.phase", description="Disabled, Enabled or Degraded."),
            AGE_COLUMN,
        ),
        root_rules=(SINGLETON_NAME,),
    )

    kind: Literal["GuardrailsSettings"] = Field(default="GuardrailsSettings", description="Kind of the object.")
    spec: GuardrailsSettingsSpec = Field(description="Switch, failure policy and check timeout.")
    status: GuardrailsSettingsStatus | None = Field(default=None, description="Observed state, written by maasctl.")


class GuardrailSecretRef(CamelModel):
    """A key of a Secret in the configuration's namespace."""

    name: ObjectName = Field(description="Name of the Secret, in the same namespace as the GuardrailConfig.")
    key: str = Field(
        default="api-key",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the Secret's data holding the API key.",
    )


class GuardrailModel(CamelModel):
    """A model the guardrails engine calls (NeMo Guardrails `models` entry)."""

    type: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z][a-z0-9_]*$",
        description="Model type, unique within the configuration: main (the model self-check rails ask), or "
        "a task-specific type such as content_safety.",
    )
    engine: str = Field(
        default="openai",
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="NeMo Guardrails engine of the model; openai speaks to any OpenAI-compatible endpoint.",
    )
    model: Annotated[str, Field(min_length=1, max_length=253), safe("models[].model")] = Field(
        description="Model name the endpoint expects."
    )
    base_url: BaseUrl = Field(description="OpenAI-compatible base URL of the model, e.g. https://host/v1.")
    api_key_secret_ref: GuardrailSecretRef | None = Field(
        default=None,
        description="Secret key holding the model's API key; the engine receives it only as an environment "
        "variable. Absent: the endpoint needs no credentials.",
    )


class GuardrailConfigSpec(CamelModel):
    """A NeMo Guardrails configuration."""

    models: Annotated[
        list[GuardrailModel],
        Field(min_length=1, max_length=16),
        KubeSchema(list_type="map", list_map_keys=("type",)),
    ] = Field(description="Guardrail models; each model type at most once.")
    config_yaml: str = Field(
        min_length=1,
        max_length=MAX_CONTENT,
        description="config.yaml content (rails, prompts, ...). Its models are taken from spec.models.",
    )
    rails_co: str | None = Field(
        default=None,
        max_length=MAX_CONTENT,
        description="rails.co content (Colang flows), when the configuration needs its own flows.",
    )


class GuardrailConfigPhase(StrEnum):
    """Lifecycle phase of a GuardrailConfig."""

    PENDING = "Pending"
    READY = "Ready"
    INVALID = "Invalid"


class GuardrailConfigStatus(CamelModel):
    """Observed state of a GuardrailConfig."""

    phase: GuardrailConfigPhase | None = Field(default=None, description="Pending, Ready or Invalid.")
    observed_generation: Generation | None = Field(
        default=None, description="metadata.generation this status was computed for."
    )
    conditions: Conditions | None = Field(
        default=None, max_length=16, description="Latest observations: Valid (the engine can load it), Deployed."
    )
    used_by: Annotated[list[GuardrailUsage], Field(max_length=4096)] | None = Field(
        default=None, description="Subscription models that attach this configuration."
    )
    config_hash: str | None = Field(
        default=None, max_length=64, description="Hash of the validated content (what the engine serves)."
    )


class GuardrailConfig(KubeObject):
    """A guardrail configuration (NeMo Guardrails): models, config.yaml and rails.co. Its name is the
    configuration ID subscriptions refer to."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="guardrailconfigs",
        short_names=("grconfig",),
        printer_columns=(
            PrinterColumn("Phase", ".status.phase", description="Lifecycle phase."),
            AGE_COLUMN,
        ),
        root_rules=(
            Rule(
                rule=f"self.metadata.name.matches('{DNS_LABEL_PATTERN}') && size(self.metadata.name) <= 63",
                message="the configuration ID (metadata.name) must use lowercase letters, digits and hyphens "
                "(at most 63)",
            ),
        ),
    )

    kind: Literal["GuardrailConfig"] = Field(default="GuardrailConfig", description="Kind of the object.")
    spec: GuardrailConfigSpec = Field(description="Models, config.yaml and rails.co.")
    status: GuardrailConfigStatus | None = Field(default=None, description="Observed state, written by maasctl.")
