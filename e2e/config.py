"""`E2E_CLUSTER=external`: what the suite is told about a cluster someone else started (docs/e2e.md).

Only what any user of a cluster has: a kubeconfig, URLs, a token hook, and optional extras a real cluster can
provide too (the test model's request log, an admin token file, ...). Every problem is reported at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from e2e.identities import IdentityError, TokenCommand, TokenFile, TokenSource, parse_group_map
from maasctl.settings import ControllerSettings

__all__ = ["VARIABLES", "ConfigError", "ExternalConfig"]

_DEFAULTS = ControllerSettings()

# name -> what it is (the table of docs/e2e.md; tests check that both agree).
VARIABLES: Mapping[str, str] = {
    "E2E_GATEWAY_URL": "required: base URL of the MaaS gateway (models at <url>/<namespace>/<model>/v1/...)",
    "E2E_MAAS_API_URL": "required: base URL of maas-api (<url>/v1/api-keys, e.g. <gateway>/maas-api)",
    "E2E_KUBECONFIG": "kubeconfig of an identity that may create namespaces and MaaS objects (default $KUBECONFIG)",
    "E2E_TOKEN_COMMAND": "token hook: a command that prints the token of the user named by its last argument",
    "E2E_TOKENS_FILE": "token hook: a file of [export ]<USER>_TOKEN=<token> lines (maasctl dev's tokens.env)",
    "E2E_GROUPS": "premium-users=<cluster group>,free-users=<cluster group> (default: the same names)",
    "E2E_MODEL_URL": "required: URL of the OpenAI-compatible test model (`maasctl testmodel`) as the gateway "
                     "reaches it",
    "E2E_UPSTREAM_KEY": "required (or E2E_UPSTREAM_KEY_FILE): the key the test model demands from the gateway",
    "E2E_UPSTREAM_KEY_FILE": "a file holding E2E_UPSTREAM_KEY",
    "E2E_INCLUSTER_MODEL_URL": "optional: a test model without upstream key, as the gateway reaches it (the "
                               "in-cluster model journey)",
    "E2E_MODEL_REQUEST_LOG_URL": "optional: the test model's request log (<model>/debug/requests) as this "
                                 "machine reaches it",
    "E2E_ADMIN_TOKEN_FILE": "optional: token of a maas-api administrator (usage reports)",
    "E2E_GATEWAY_TOKEN_FILE": "optional: the gateway's token on maas-api's /internal/v1 (callbacks, usage "
                              "ingest; Secret maas-api-gateway-token)",
    "E2E_KEY_CLEANUP_TOKEN_FILE": "optional: token of ServiceAccount maas-key-cleanup",
    "E2E_GATEWAY": f"<namespace>/<name> of the MaaS Gateway (default {_DEFAULTS.gateway_namespace}/"
                   f"{_DEFAULTS.gateway_name})",
    "E2E_SUBSCRIPTION_NAMESPACE": f"the subscription namespace (default {_DEFAULTS.subscription_namespace})",
    "E2E_CONTROLLER_NAMESPACE": f"the controller's namespace, where cleanup Jobs run (default "
                                f"{_DEFAULTS.leader_election_namespace})",
    "E2E_DATA_PLANE": "auto (default), maasctl or kuadrant: who reports that policies are enforced",
    "E2E_TIMEOUT_SCALE": "multiply every wait (default 1 with maasctl's data plane, 3 with Kuadrant)",
    "E2E_NO_SKIPS": "1: a skipped journey fails the run (CI)",
}


class ConfigError(ValueError):
    """The external cluster is not described well enough to run any journey."""


def _url(env: Mapping[str, str], name: str, problems: list[str], *, required: bool) -> str | None:
    value = env.get(name, "").strip().rstrip("/")
    if not value:
        if required:
            problems.append(f"{name} is not set ({VARIABLES[name]})")
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        problems.append(f"{name} must be an http(s) URL, not {value!r}")
        return None
    return value


def _file(env: Mapping[str, str], name: str, problems: list[str]) -> Path | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        problems.append(f"{name} names {path}, which is not a readable file")
        return None
    return path


@dataclass(frozen=True, kw_only=True)
class ExternalConfig:
    kubeconfig: Path
    gateway_url: str
    api_url: str
    tokens: TokenSource
    groups: Mapping[str, str]
    model_url: str
    upstream_key: str = field(repr=False)
    incluster_model_url: str | None = None
    model_requests_url: str | None = None
    admin_token_file: Path | None = None
    gateway_token_file: Path | None = None
    cleanup_token_file: Path | None = None
    settings: ControllerSettings = field(default_factory=ControllerSettings)
    data_plane: str = "auto"
    timeout_scale: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExternalConfig:
        env = os.environ if env is None else env
        problems: list[str] = []
        gateway_url = _url(env, "E2E_GATEWAY_URL", problems, required=True)
        api_url = _url(env, "E2E_MAAS_API_URL", problems, required=True)
        model_url = _url(env, "E2E_MODEL_URL", problems, required=True)
        incluster = _url(env, "E2E_INCLUSTER_MODEL_URL", problems, required=False)
        requests_url = _url(env, "E2E_MODEL_REQUEST_LOG_URL", problems, required=False)

        kubeconfig_text = env.get("E2E_KUBECONFIG") or env.get("KUBECONFIG", "").split(os.pathsep)[0]
        kubeconfig = Path(kubeconfig_text or "~/.kube/config").expanduser()
        if not kubeconfig.is_file():
            problems.append(f"kubeconfig {kubeconfig} not found (set E2E_KUBECONFIG)")

        tokens: TokenSource | None = None
        command, tokens_file = env.get("E2E_TOKEN_COMMAND", "").strip(), _file(env, "E2E_TOKENS_FILE", problems)
        if command and env.get("E2E_TOKENS_FILE"):
            problems.append("set one token hook: E2E_TOKEN_COMMAND or E2E_TOKENS_FILE, not both")
        elif command:
            try:
                tokens = TokenCommand.parse(command)
            except (IdentityError, ValueError) as exc:
                problems.append(f"E2E_TOKEN_COMMAND: {exc}")
        elif tokens_file is not None:
            tokens = TokenFile(tokens_file)
        elif not env.get("E2E_TOKENS_FILE"):
            problems.append("no token hook: set E2E_TOKEN_COMMAND or E2E_TOKENS_FILE")

        groups: dict[str, str] = {}
        try:
            groups = parse_group_map(env.get("E2E_GROUPS", ""))
        except IdentityError as exc:
            problems.append(str(exc))

        key = env.get("E2E_UPSTREAM_KEY", "")
        key_file = _file(env, "E2E_UPSTREAM_KEY_FILE", problems)
        if key_file is not None and not key:
            key = key_file.read_text().strip()
        if not key and not env.get("E2E_UPSTREAM_KEY_FILE"):
            problems.append(f"E2E_UPSTREAM_KEY is not set ({VARIABLES['E2E_UPSTREAM_KEY']})")

        gateway_ns, _, gateway_name = env.get(
            "E2E_GATEWAY", f"{_DEFAULTS.gateway_namespace}/{_DEFAULTS.gateway_name}").partition("/")
        if not gateway_ns or not gateway_name:
            problems.append("E2E_GATEWAY must be <namespace>/<name>")
        settings = ControllerSettings(
            gateway_name=gateway_name, gateway_namespace=gateway_ns,
            subscription_namespace=env.get("E2E_SUBSCRIPTION_NAMESPACE") or _DEFAULTS.subscription_namespace,
            leader_election_namespace=env.get("E2E_CONTROLLER_NAMESPACE") or _DEFAULTS.leader_election_namespace)

        data_plane = env.get("E2E_DATA_PLANE", "auto") or "auto"
        if data_plane not in ("auto", "maasctl", "kuadrant"):
            problems.append(f"E2E_DATA_PLANE must be auto, maasctl or kuadrant, not {data_plane!r}")
        scale: float | None = None
        if env.get("E2E_TIMEOUT_SCALE"):
            try:
                scale = float(env["E2E_TIMEOUT_SCALE"])
                if scale <= 0:
                    raise ValueError
            except ValueError:
                problems.append(f"E2E_TIMEOUT_SCALE must be a positive number, not {env['E2E_TIMEOUT_SCALE']!r}")

        admin = _file(env, "E2E_ADMIN_TOKEN_FILE", problems)
        gateway_token = _file(env, "E2E_GATEWAY_TOKEN_FILE", problems)
        cleanup = _file(env, "E2E_KEY_CLEANUP_TOKEN_FILE", problems)
        if problems or gateway_url is None or api_url is None or model_url is None or tokens is None:
            raise ConfigError("E2E_CLUSTER=external is not configured (docs/e2e.md):\n  " + "\n  ".join(problems))
        return cls(kubeconfig=kubeconfig, gateway_url=gateway_url, api_url=api_url, tokens=tokens, groups=groups,
                   model_url=model_url, upstream_key=key, incluster_model_url=incluster,
                   model_requests_url=requests_url, admin_token_file=admin, gateway_token_file=gateway_token,
                   cleanup_token_file=cleanup, settings=settings, data_plane=data_plane, timeout_scale=scale)
