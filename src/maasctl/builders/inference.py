"""The reference's `inference.opendatahub.io` ExternalModel (with its ExternalProviders) -> the
`maas.opendatahub.io` ExternalModel maasctl serves it as: pure, one function per decision.

The mapping (docs/compatibility.md, "The reference's newer model API"; docs/providers.md):

- the first `externalProviderRefs` entry that can be served is the ExternalModel's own provider: `provider` is
  its ExternalProvider's `spec.provider`, `endpoint` the provider's URL (`https://<endpoint>`, port and TLS from
  the `inference.opendatahub.io/port` / `tls` annotations, default 443 and https, as in the reference) with
  the base path taken from `path` (what is before `/chat/completions` or `/messages`), `targetModel`,
  `apiFormat`, `credentialRef` the binding's Secret (its own `auth`, else the provider's) under `api-key`;
- every further entry is a fallback named after its ExternalProvider; with several, `providerSelection:
  Weighted` and each entry's `weight` (0 never tries it), as the reference picks a provider by weight;
- `{key}` placeholders of `path` are resolved from the provider's config overlaid with the binding's
  (`{model}`: `targetModel`, unless config has `model`), as the reference does.

What the reference leaves out, this leaves out too (an entry whose ExternalProvider is missing or not Ready,
a path with a placeholder nothing resolves): `Conversion.skipped` says which and why. What maasctl cannot serve
as the reference would (request signing, another API format, a path that is not `<base>/chat/completions` or
`<base>/messages`, a key header other than the one maasctl sends, more than 8 providers, a client-facing name
other than the object's) refuses the whole model (`Conversion.refused`): it is never served differently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from maasctl.api import ExternalModelSpec, dump
from maasctl.api._base import API_VERSION
from maasctl.api._fields import DNS_LABEL_PATTERN
from maasctl.api.inference import (
    API_KEY_FIELD,
    AUTH_MESSAGE,
    FORMAT_MESSAGE,
    FORMAT_SUFFIX,
    INFERENCE_API_VERSION,
    INFERENCE_GROUP,
    MAX_BINDINGS,
    MODEL_NAME_MESSAGE,
    PATH_CHARS_MESSAGE,
    PATH_FORBIDDEN,
    PATH_SUFFIX_MESSAGE,
    PORT_ANNOTATION,
    PROVIDER_MESSAGE,
    SIZE_MESSAGE,
    SUPPORTED_AUTH,
    SUPPORTED_FORMATS,
    TLS_ANNOTATION,
    UNIQUE_MESSAGE,
    WEIGHT_MESSAGE,
    ExternalProvider,
    ExternalProviderRef,
    InferenceExternalModel,
)
from maasctl.builders import names
from maasctl.builders.refs import OwnerRef
from maasctl.contract.edge import PROVIDER_KEY_SCHEMES, key_scheme_for

__all__ = [
    "GENERATED_FROM_LABEL",
    "Conversion",
    "ProviderView",
    "convert",
    "generated_external_model",
    "provider_problem",
    "reference_key_header",
    "resolve_path",
]

GENERATED_FROM_LABEL: Final = "maas.opendatahub.io/generated-from"
"""On a generated maas.opendatahub.io ExternalModel: the API group of the object it was converted from."""
DEFAULT_PORT: Final = 443
AUTH_HEADER_KEY: Final = "authHeaderName"
AUTH_PREFIX_KEY: Final = "authValuePrefix"
_DEFAULT_HEADERS: Final = {"anthropic": "x-api-key", "azure": "api-key", "azure-openai": "api-key"}
"""The reference's key header per provider type when config does not name one (else `Authorization: Bearer`)."""
_PLACEHOLDER: Final = re.compile(r"\{([^}]+)\}")
MAX_FALLBACK_NAME: Final = 63


@dataclass(frozen=True)
class ProviderView:
    """An ExternalProvider as the conversion sees it: its spec and whether its own status says Ready (maasctl's
    ExternalProvider reconciler found its Secret and key), with its phase for the message when not."""

    provider: ExternalProvider
    ready: bool
    phase: str = ""


@dataclass(frozen=True)
class Conversion:
    """The outcome: `spec` to serve (None: nothing can be served now), or `refused` (the model must not be
    served: it would be served differently), and the entries left out as the reference leaves them out."""

    spec: ExternalModelSpec | None
    refused: str | None = None
    skipped: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    """The ExternalProviders serving the model, in order."""


class _Refused(Exception):
    """A binding (or the model) maasctl cannot serve as the reference would."""


class _Skipped(Exception):
    """A binding the reference leaves out too (its message is the reference's reason)."""


def provider_problem(ep: ExternalProvider) -> str | None:
    """Why maasctl cannot use an ExternalProvider at all (None: it can): an auth type it does not implement, a
    provider type that is no DNS label, a bad port or TLS annotation, an API key over plain HTTP (the reference
    refuses that too)."""
    if ep.spec.auth.type not in SUPPORTED_AUTH:
        return AUTH_MESSAGE
    if not re.fullmatch(DNS_LABEL_PATTERN, ep.spec.provider):
        return PROVIDER_MESSAGE
    try:
        _, _, tls = provider_address(ep)
    except ValueError as exc:
        return str(exc)
    if not tls and ep.spec.auth.type == "apikey":
        return ("plaintext transport (TLS disabled) is not allowed with auth type apikey: credentials would be "
                "transmitted in cleartext")
    return None


def provider_address(ep: ExternalProvider) -> tuple[str, int, bool]:
    """(host, port, tls) of an ExternalProvider: its endpoint, port 443 and TLS unless its annotations say
    otherwise (the reference's defaults: 443 also without TLS). Raises ValueError naming a bad annotation."""
    notes = ep.metadata.annotations or {}
    port, tls = DEFAULT_PORT, True
    port_text = notes.get(PORT_ANNOTATION, "")
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"invalid {PORT_ANNOTATION} annotation {port_text[:32]!r}: must be an integer between "
                             "1 and 65535")
        port = int(port_text)
    tls_text = notes.get(TLS_ANNOTATION, "")
    if tls_text:
        if tls_text not in ("true", "false"):
            raise ValueError(f'invalid {TLS_ANNOTATION} annotation {tls_text[:32]!r}: must be "true" or "false"')
        tls = tls_text == "true"
    return ep.spec.endpoint.lower().rstrip("."), port, tls


def reference_key_header(provider: str, config: Mapping[str, str]) -> tuple[str, str]:
    """(header, value prefix) the reference sends a provider's key in: config's `authHeaderName` (then no
    prefix unless `authValuePrefix`), else the provider type's default header (no prefix), else
    `Authorization: Bearer `."""
    header = config.get(AUTH_HEADER_KEY) or _DEFAULT_HEADERS.get(provider, "")
    if not header:
        return "authorization", "Bearer "
    return header.lower(), config.get(AUTH_PREFIX_KEY, "")


def _maasctl_key_header(provider: str, api_format: str) -> tuple[str, str]:
    scheme = key_scheme_for(provider, api_format)
    return PROVIDER_KEY_SCHEMES[scheme], "Bearer " if scheme == "bearer" else ""


def resolve_path(path: str, config: Mapping[str, str], target_model: str) -> str:
    """`path` with its `{key}` placeholders replaced from `config` (`{model}`: `target_model` unless config has
    `model`). Raises ValueError naming the keys nothing resolves (the reference then leaves the entry out)."""
    values = {"model": target_model, **config} if target_model else dict(config)

    def one(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    resolved = _PLACEHOLDER.sub(one, path)
    missing = [m.group(1) for m in _PLACEHOLDER.finditer(resolved)]
    if missing:
        raise ValueError(f"path has unresolved placeholders [{' '.join(missing)}]: add these keys to the provider "
                         "or model config")
    return resolved


def _base_path(path: str, api_format: str) -> str:
    """What is before the format's suffix; raises `_Refused` for a path maasctl cannot reach that way."""
    if re.search(PATH_FORBIDDEN, path) or not path.startswith("/"):
        raise _Refused(f"{PATH_CHARS_MESSAGE} (path {path[:300]!r})")
    suffix = FORMAT_SUFFIX[api_format]
    if not path.endswith(suffix):
        raise _Refused(f"{PATH_SUFFIX_MESSAGE} (path {path[:300]!r}, apiFormat {api_format})")
    return path[: -len(suffix)]


def _model_problem(model: InferenceExternalModel) -> str | None:
    spec, name = model.spec, model.metadata.name or ""
    if spec.model_name and spec.model_name != name:
        return MODEL_NAME_MESSAGE
    refs = spec.external_provider_refs
    if len(refs) > MAX_BINDINGS:
        return SIZE_MESSAGE
    if len({r.ref.name for r in refs}) != len(refs):
        return UNIQUE_MESSAGE
    if not any(r.weight > 0 for r in refs):
        return WEIGHT_MESSAGE
    return None


@dataclass(frozen=True)
class _Served:
    """One binding resolved against its ExternalProvider."""

    ref: ExternalProviderRef
    provider: str
    endpoint: str
    secret: str


def _binding(ref: ExternalProviderRef, providers: Mapping[str, ProviderView], namespace: str) -> _Served:
    """Resolve one binding; raises `_Refused` or `_Skipped`."""
    if ref.api_format not in SUPPORTED_FORMATS:
        raise _Refused(f"{FORMAT_MESSAGE} (not {ref.api_format[:63]!r})")
    if ref.auth is not None and ref.auth.type not in SUPPORTED_AUTH:
        raise _Refused(f"{AUTH_MESSAGE} (auth override of type {ref.auth.type})")
    if not _PLACEHOLDER.search(ref.path):
        _base_path(ref.path, ref.api_format)  # a literal path is refused before its provider is looked at
    name = ref.ref.name
    view = providers.get(name)
    if view is None:
        raise _Skipped(f"ExternalProvider {name!r} not found in namespace {namespace!r}")
    problem = provider_problem(view.provider)
    if problem is not None:
        raise _Skipped(f"ExternalProvider {name!r}: {problem}")
    if not view.ready:
        raise _Skipped(f"ExternalProvider {name!r} is not ready (phase: {view.phase or 'Pending'})")
    ep = view.provider
    config = {**(ep.spec.config or {}), **(ref.config or {})}
    try:
        path = resolve_path(ref.path, config, ref.target_model)
    except ValueError as exc:
        raise _Skipped(f"path {ref.path[:300]!r}: {exc}") from exc
    base = _base_path(path, ref.api_format)
    theirs = reference_key_header(ep.spec.provider, {**_auth_defaults(ep), **config})
    ours = _maasctl_key_header(ep.spec.provider, ref.api_format)
    if theirs != ours:
        raise _Refused(
            f"provider {ep.spec.provider} with apiFormat {ref.api_format}: the reference sends the key as "
            f"{theirs[0]}: {theirs[1]!r}+key, maasctl as {ours[0]}: {ours[1]!r}+key (set {AUTH_HEADER_KEY} / "
            f"{AUTH_PREFIX_KEY} in config to match, or use another provider type)")
    host, port, tls = provider_address(ep)
    scheme = "https" if tls else "http"
    default = 443 if tls else 80
    endpoint = f"{scheme}://{host}{'' if port == default else f':{port}'}{base}"
    secret = (ref.auth or ep.spec.auth).secret_ref.name
    return _Served(ref, ep.spec.provider, endpoint, secret)


def _auth_defaults(ep: ExternalProvider) -> dict[str, str]:
    """The provider's own config keys that decide the key header (the binding's config overrides them)."""
    config = ep.spec.config or {}
    return {k: config[k] for k in (AUTH_HEADER_KEY, AUTH_PREFIX_KEY) if k in config}


def convert(model: InferenceExternalModel, providers: Mapping[str, ProviderView]) -> Conversion:
    """The maas.opendatahub.io ExternalModel spec serving `model`, given the ExternalProviders of its namespace
    by name (see the module docstring for the mapping and what is skipped or refused)."""
    problem = _model_problem(model)
    if problem is not None:
        return Conversion(None, refused=problem)
    namespace = model.metadata.namespace or ""
    served: list[_Served] = []
    skipped: list[str] = []
    for index, ref in enumerate(model.spec.external_provider_refs):
        try:
            served.append(_binding(ref, providers, namespace))
        except _Refused as exc:
            return Conversion(None, refused=f"externalProviderRefs[{index}] ({ref.ref.name}): {exc}")
        except _Skipped as exc:
            skipped.append(str(exc))
    if not served or not any(s.ref.weight > 0 for s in served):
        skipped.append("no ExternalProvider with a weight above 0 can serve the model")
        return Conversion(None, skipped=tuple(skipped))
    first, rest = served[0], served[1:]
    for other in rest:
        fallback = other.ref.ref.name
        if len(fallback) > MAX_FALLBACK_NAME or fallback == first.provider:
            return Conversion(None, refused=(
                f"ExternalProvider {fallback!r} names a further provider of the model, so it must be at most "
                f"{MAX_FALLBACK_NAME} characters and differ from the first provider's type {first.provider!r} "
                "(maasctl names further providers after their ExternalProvider)"))
    several = bool(rest)
    raw: dict[str, Any] = {
        "provider": first.provider, "endpoint": first.endpoint, "targetModel": first.ref.target_model,
        "apiFormat": first.ref.api_format, "credentialRef": {"name": first.secret, "key": API_KEY_FIELD},
    }
    if several:
        raw["weight"] = first.ref.weight
        raw["providerSelection"] = "Weighted"
        raw["fallbacks"] = [{
            "name": s.ref.ref.name, "provider": s.provider, "endpoint": s.endpoint, "targetModel": s.ref.target_model,
            "apiFormat": s.ref.api_format, "credentialRef": {"name": s.secret, "key": API_KEY_FIELD},
            "weight": s.ref.weight} for s in rest]
    try:
        spec = ExternalModelSpec.model_validate(raw)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return Conversion(None, refused=f"not servable as a maas.opendatahub.io ExternalModel: {details[:800]}")
    return Conversion(spec, skipped=tuple(skipped), served=tuple(s.ref.ref.name for s in served))


def generated_external_model(name: str, namespace: str, uid: str, spec: ExternalModelSpec) -> dict[str, Any]:
    """The maas.opendatahub.io ExternalModel serving the inference.opendatahub.io one `name`: same name and
    namespace, controlled by it (garbage-collected with it), labelled as generated."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ExternalModel",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY, GENERATED_FROM_LABEL: INFERENCE_GROUP},
            "ownerReferences": [OwnerRef(INFERENCE_API_VERSION, "ExternalModel", name, uid).to_dict()],
        },
        "spec": dump(spec),
    }
