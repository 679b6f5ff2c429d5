"""Guardrails: the checks a configuration must pass before the engine gets it, and the engine's objects.

Pure functions (no clock, network or environment), as every builder.

`config_problems(view)`: what the engine could not load or could not run offline, found without the engine:
- `config.yaml` must be a YAML mapping; `models` in it are replaced by `spec.models` (one source of truth);
- Colang 1.0 only (`colang_version` absent or "1.0"): input/output rails are what the gateway runs;
- every flow in `rails.input.flows` / `rails.output.flows` is either a supported built-in rail or a flow
  defined in `rails.co`; supported built-ins run against the configuration's own models, with no model or
  embedding download: `self check input`, `self check output` (their prompts `self_check_input` /
  `self_check_output` must be in `prompts`, and a `main` model must be listed);
- every prompt leaves room for the text the gateway checks: `max_length` (the engine's default 16,000) minus
  the template's own length must be at least `contract.guardrails.MAX_CHECK_CHARS` (a longer prompt is an
  engine error, never a decision);
- `rails.co` must not define canonical user messages (`define user ...`): matching them needs an embedding
  model NeMo Guardrails downloads from a hub at run time, which an offline engine cannot do; nor may
  `config.yaml` configure `embedding_search_provider` / `knowledge_base` / dialog rails for the same reason.
The real engine (its own loader) checks the rest: `reconcilers.guardrails` runs it when configured.

`engine_config_yaml(view)`: the config.yaml the engine serves — the user's content with `models` rendered from
`spec.models`; an API key is never in it, only the name of the environment variable holding it
(`api_key_env_var`), which the Deployment fills from the Secret (`secretKeyRef`).

`build_engine(inp)`: the engine's ConfigMap (every deployed configuration as `<id>/config.yml` and
`<id>/rails.co`, and the server-level `config.py`: `maasctl/guardrails_redact.py`, which the engine runs at
start-up so that none of its logs or output carries a credential — the engine itself copies a key from its
variable into the configuration it can log), Deployment (`nemoguardrails server --config /etc/guardrails`,
keys from Secrets as environment variables, restarted when the content hash changes) and Service, in the
subscription namespace (a pod can only read Secrets of its own namespace, and the configurations live there).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

import yaml

from maasctl.builders import names
from maasctl.builders.refs import ObjectRef
from maasctl.contract.cel import cel_string, cel_string_list
from maasctl.contract.guardrails import (
    ENGINE_PROMPT_MAX_LENGTH,
    FAIL_CLOSED,
    FAIL_OPEN,
    MAX_CHECK_CHARS,
    ConfigView,
    SettingsView,
    api_key_env_var,
)

__all__ = [
    "ENGINE_NAME",
    "ENGINE_PORT",
    "SUPPORTED_FLOWS",
    "EngineInput",
    "GuardrailsAttachment",
    "build_engine",
    "config_hash",
    "config_problems",
    "engine_config_yaml",
    "engine_url",
    "guardrails_filter",
]

ENGINE_NAME: Final = "maas-guardrails"
ENGINE_PORT: Final = 8000
CONFIG_DIR: Final = "/etc/guardrails"
SUPPORTED_FLOWS: Final = {"self check input": "self_check_input", "self check output": "self_check_output"}
NO_KEY: Final = "not-needed"  # the OpenAI client demands a key; endpoints without credentials ignore it
_DEFINE_FLOW = re.compile(r"^\s*(?:define\s+(?:subflow|flow)|flow)\s+(.+?)\s*:?\s*$", re.MULTILINE)
_DEFINE_USER = re.compile(r"^\s*define\s+user\b", re.MULTILINE)
_OFFLINE_KEYS: Final = ("embedding_search_provider", "knowledge_base", "core")
SERVER_CONFIG_KEY: Final = "server-config.py"  # the ConfigMap key of the engine's server-level config.py


@cache
def server_config_py() -> str:
    """The engine's server-level `config.py`: the redaction of `maasctl/guardrails_redact.py` (package data)."""
    return resources.files("maasctl").joinpath("guardrails_redact.py").read_text(encoding="utf-8")


def _load_yaml(text: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return None, f"config.yaml is not valid YAML{where}"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, "config.yaml must be a mapping"
    return data, None


def _flows(rails: Mapping[str, Any], kind: str) -> tuple[list[str], str | None]:
    block = rails.get(kind)
    if block is None:
        return [], None
    if not isinstance(block, Mapping):
        return [], f"rails.{kind} must be a mapping"
    flows = block.get("flows") or []
    if not isinstance(flows, list) or not all(isinstance(f, str) for f in flows):
        return [], f"rails.{kind}.flows must be a list of flow names"
    return list(flows), None


def _template_chars(prompt: Mapping[str, Any]) -> int:
    """Characters a task prompt's template adds around the checked text (content, or messages' contents)."""
    if isinstance(prompt.get("content"), str):
        return len(prompt["content"])
    messages = prompt.get("messages")
    if isinstance(messages, list):
        return sum(len(str(m.get("content") or "")) if isinstance(m, Mapping) else len(str(m)) for m in messages)
    return 0


def _room_problems(prompts: list[Any]) -> list[str]:
    """Prompts whose `max_length` leaves less than MAX_CHECK_CHARS for the text the gateway checks."""
    problems: list[str] = []
    for prompt in prompts:
        if not isinstance(prompt, Mapping):
            continue
        limit = prompt.get("max_length", ENGINE_PROMPT_MAX_LENGTH)
        if not isinstance(limit, int) or isinstance(limit, bool):
            problems.append(f"prompt for task {prompt.get('task')!r}: max_length must be an integer")
            continue
        room = limit - _template_chars(prompt)
        if room < MAX_CHECK_CHARS:
            problems.append(
                f"prompt for task {prompt.get('task')!r} leaves {room} characters for the checked text under its "
                f"max_length {limit}; the gateway checks up to {MAX_CHECK_CHARS}: shorten the template or set "
                f"max_length to at least {MAX_CHECK_CHARS + _template_chars(prompt)}")
    return problems


def config_problems(view: ConfigView) -> list[str]:
    """Why the engine could not load or run `view` offline (empty: it can, as far as we can tell)."""
    if view.problem is not None:
        return [view.problem]
    data, error = _load_yaml(view.config_yaml)
    if error is not None or data is None:
        return [error or "config.yaml is empty"]
    problems: list[str] = []
    version = str(data.get("colang_version", "1.0"))
    if version != "1.0":
        problems.append(f"colang_version {version} is not supported: use Colang 1.0 (input and output rails)")
    for key in _OFFLINE_KEYS:
        if key in data:
            problems.append(f"config.yaml key {key!r} needs an embedding model downloaded at run time; "
                            "not supported by the offline engine")
    rails = data.get("rails") or {}
    if not isinstance(rails, Mapping):
        return [*problems, "rails must be a mapping"]
    if "dialog" in rails:
        problems.append("dialog rails need an embedding model downloaded at run time; not supported")
    if _DEFINE_USER.search(view.rails_co):
        problems.append("rails.co defines user messages (define user ...): matching them needs an embedding "
                        "model downloaded at run time; not supported by the offline engine")
    defined = {m.group(1).strip() for m in _DEFINE_FLOW.finditer(view.rails_co)}
    prompts = data.get("prompts") or []
    tasks = {p.get("task") for p in prompts if isinstance(p, Mapping)} if isinstance(prompts, list) else set()
    if not isinstance(prompts, list):
        problems.append("prompts must be a list")
    else:
        problems += _room_problems(prompts)
    flows: list[str] = []
    for kind in ("input", "output"):
        found, err = _flows(rails, kind)
        if err:
            problems.append(err)
        flows += found
    if not flows:
        problems.append("no input or output rails configured (rails.input.flows / rails.output.flows)")
    types = {m.type for m in view.models}
    for flow in flows:
        if flow in defined:
            continue
        task = SUPPORTED_FLOWS.get(flow)
        if task is None:
            problems.append(f"flow {flow!r} is neither defined in rails.co nor a supported built-in rail "
                            f"({', '.join(sorted(SUPPORTED_FLOWS))})")
            continue
        if task not in tasks:
            problems.append(f"flow {flow!r} needs a prompt for task {task!r} in prompts")
        if "main" not in types and task not in types:
            problems.append(f"flow {flow!r} needs a model of type main (or {task})")
    if "models" in data and not isinstance(data["models"], list):
        problems.append("models in config.yaml must be a list (it is replaced by spec.models)")
    return problems


def engine_config_yaml(view: ConfigView) -> str:
    """The config.yaml the engine serves (see the module docstring). Call only on a config without problems."""
    data, _ = _load_yaml(view.config_yaml)
    data = dict(data or {})
    models: list[dict[str, Any]] = []
    for m in view.models:
        params: dict[str, Any] = {"base_url": m.base_url}
        entry: dict[str, Any] = {"type": m.type, "engine": m.engine, "model": m.model, "parameters": params}
        if m.secret_name:
            entry["api_key_env_var"] = api_key_env_var(view.name, m.type)
        else:
            params["api_key"] = NO_KEY
        models.append(entry)
    data["models"] = models
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def config_hash(view: ConfigView) -> str:
    """Hash of what the engine would serve for `view` (its status and the engine's restart annotation)."""
    h = hashlib.sha256()
    for part in (view.name, engine_config_yaml(view), view.rails_co,
                 *(f"{m.type}={m.secret_name}/{m.secret_key}" for m in view.models)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def engine_url(namespace: str, port: int = ENGINE_PORT) -> str:
    """The in-cluster URL of the engine Service."""
    return f"http://{ENGINE_NAME}.{namespace}.svc.cluster.local:{port}"


@dataclass(frozen=True)
class EngineInput:
    namespace: str
    image: str
    configs: tuple[ConfigView, ...]  # the valid ones, deployed
    replicas: int = 1


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": ENGINE_NAME, "app.kubernetes.io/component": "guardrails-engine",
            names.MANAGED_BY_LABEL: names.MANAGED_BY}


def build_engine(inp: EngineInput) -> list[dict[str, Any]]:
    """ConfigMap, Deployment and Service of the engine (see the module docstring)."""
    configs = sorted(inp.configs, key=lambda c: c.name)
    data: dict[str, str] = {SERVER_CONFIG_KEY: server_config_py()}
    items: list[dict[str, str]] = [{"key": SERVER_CONFIG_KEY, "path": "config.py"}]
    env: list[dict[str, Any]] = []
    for c in configs:
        data[f"{c.name}.config.yml"] = engine_config_yaml(c)
        items.append({"key": f"{c.name}.config.yml", "path": f"{c.name}/config.yml"})
        if c.rails_co:
            data[f"{c.name}.rails.co"] = c.rails_co
            items.append({"key": f"{c.name}.rails.co", "path": f"{c.name}/rails.co"})
        for m in c.models:
            if m.secret_name:
                env.append({"name": api_key_env_var(c.name, m.type), "valueFrom": {
                    "secretKeyRef": {"name": m.secret_name, "key": m.secret_key or "api-key"}}})
    digest = hashlib.sha256(repr((sorted(data.items()), env)).encode()).hexdigest()[:16]
    labels = _labels()
    selector = {"app.kubernetes.io/name": ENGINE_NAME}
    configmap = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ENGINE_NAME, "namespace": inp.namespace, "labels": labels},
        "data": data,
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": ENGINE_NAME, "namespace": inp.namespace, "labels": labels},
        "spec": {
            "replicas": inp.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**labels, **selector},
                             "annotations": {"maas.opendatahub.io/guardrails-hash": digest}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [{
                        "name": "engine",
                        "image": inp.image,
                        "command": ["nemoguardrails", "server", "--config", CONFIG_DIR,
                                    "--port", str(ENGINE_PORT), "--disable-chat-ui"],
                        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"},
                                {"name": "TRANSFORMERS_OFFLINE", "value": "1"}, *env],
                        "ports": [{"name": "http", "containerPort": ENGINE_PORT}],
                        "readinessProbe": {"httpGet": {"path": "/v1/health", "port": ENGINE_PORT}},
                        "livenessProbe": {"httpGet": {"path": "/v1/health", "port": ENGINE_PORT}},
                        "volumeMounts": [{"name": "configs", "mountPath": CONFIG_DIR, "readOnly": True}],
                        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                            "capabilities": {"drop": ["ALL"]}},
                    }],
                    "volumes": [{"name": "configs", "configMap": {"name": ENGINE_NAME, "items": items}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": ENGINE_NAME, "namespace": inp.namespace, "labels": labels},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": ENGINE_PORT, "targetPort": "http"}]},
    }
    return [configmap, deployment, service]


# --- the AuthPolicy side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardrailsAttachment:
    """The guardrails the model's AuthPolicy exports: per subscription, the configuration it attaches."""

    settings: SettingsView
    url: str
    bindings: tuple[tuple[ObjectRef, str], ...]  # (subscription, config ID)
    ready_configs: frozenset[str]


_SUB: Final = "auth.metadata.subscriptionInfo"
_SELECTED: Final = (
    f"has({_SUB}.name) && {_SUB}.name != \"\" && has({_SUB}.namespace)"
    f" && (!has({_SUB}.error) || {_SUB}.error == \"\")"
)
_SELECTED_REF: Final = f'({_SUB}.namespace + "/" + {_SUB}.name)'


def guardrails_filter(att: GuardrailsAttachment | None) -> dict[str, Any] | None:
    """The AuthPolicy success filter `guardrails` (contract.guardrails), or None when nothing is guarded."""
    if att is None or not att.settings.active or not att.bindings:
        return None
    entries = sorted((sub.key, config) for sub, config in att.bindings)
    mapping = "{" + ", ".join(f"{cel_string(k)}: {cel_string(v)}" for k, v in entries) + "}"
    config = f"{mapping}[{_SELECTED_REF}]"
    ready = sorted({c for _, c in entries if c in att.ready_configs})
    return {
        "json": {
            "properties": {
                "config": {"expression": config},
                "ready": {"expression": f"{config} in {cel_string_list(ready)}"},
                "url": {"value": att.url},
                "failurePolicy": {"value": FAIL_OPEN if att.settings.fail_open else FAIL_CLOSED},
                "timeoutSeconds": {"value": str(att.settings.timeout)},
            }
        },
        "when": [{"predicate": _SELECTED}, {"predicate": f"{_SELECTED_REF} in {mapping}"}],
    }


def engine_env_names(configs: Sequence[ConfigView]) -> list[str]:
    """Names of the API key environment variables of `configs` (for docs and the local engine runner)."""
    return [api_key_env_var(c.name, m.type) for c in configs for m in c.models if m.secret_name]
