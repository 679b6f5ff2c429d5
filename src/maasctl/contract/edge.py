"""The edge contract of the data plane: one canonical path, and which headers a client may send and the
upstream may see. Written down once; the gateway applies it and docs/security.md describes it.

Path: `canonical_path(raw)` takes the raw request target path (percent-encoded, without the query) and
returns the one path that route matching, policies (`request.url_path`) and the backend all see:
- percent-decoding of unreserved characters (`%41` -> `A`, `%2e` -> `.`), then dot segments removed
  (RFC 3986 5.2.4) and repeated slashes merged;
- refused as ambiguous (`AmbiguousPath`, answered 400): encoded `/`, `\\` or `%` (`%2F`, `%5C`, `%25`: a
  backend could decode them again into a different path), a literal `\\`, control characters or NUL, bytes
  that are not valid UTF-8, a `..` that climbs above the root, a path not starting with `/`, or more than
  `MAX_PATH` bytes; control characters and invalid UTF-8 are refused in decoded form too (`%00`, `%0a`,
  `%ff`). The query string never takes part in matching or in path predicates.

Headers (names compared lowercase, with `_` read as `-` so look-alikes cannot slip through):
- `server_decided(name)`: what only the gateway may set — `x-maas-*` (except `x-maas-subscription`, a client's
  choice among its subscriptions), identity-bearing headers (`impersonate-*`, `x-remote-*`,
  `x-forwarded-user`-style, `remote-user`, ...), and every header an inference scheduler reads to place a
  request (`SCHEDULER_PREFIXES`, `SCHEDULER_HEADERS`): the Gateway API Inference Extension's endpoint picker
  and llm-d read the objective, the fairness bucket, the destination endpoint (and its subset), the model
  rewrite and the request cost from `x-gateway-*` (llm-d's own spellings are `x-llm-d-*`), the
  prefill/encode/data-parallel peers a routing sidecar connects to, latency SLOs the flow control orders by, and
  the request path the parser classifies by. A caller choosing any of them would pick its own priority,
  fairness bucket, pod or peer, so the whole family is the gateway's, by prefix. A client sending one is
  refused (403 `forbidden_header`, as the reference's gateway and Authorino's
  pattern rule answer), never silently trusted. (`x-session-token`, the scheduler's session-affinity cookie echoed by
  clients, is a caller's choice among pods it may reach anyway, and passes.)
- `upstream_headers(...)`: what the backend receives. Hop-by-hop headers, `host`, `content-length`, every
  server-decided header the client sent, and — on model routes — the caller's credentials (`authorization`,
  `proxy-authorization`, `cookie`, `x-api-key`, `api-key`) are dropped; the AuthPolicy's success headers are
  set; the provider key is injected the way the route's provider takes it (`PROVIDER_KEY_SCHEMES`:
  `authorization: Bearer`, Anthropic's `x-api-key`, Azure's `api-key`; the route's `UPSTREAM_AUTH_ANNOTATION`).
  Routes that are not model routes (maas-api published through the gateway) opt in to keep the caller's
  credentials with `FORWARD_CREDENTIALS_ANNOTATION`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Final

from maasctl.contract.credentials import bearer_credential
from maasctl.contract.identity import HEADER as IDENTITY_HEADER

__all__ = [
    "ANTHROPIC_VERSION",
    "API_KEY_HEADER",
    "API_KEY_PREFIX",
    "CREDENTIAL_HEADERS",
    "FORWARD_CREDENTIALS_ANNOTATION",
    "HOP_BY_HOP",
    "MAX_PATH",
    "OBJECTIVE_HEADER",
    "PROVIDER_KEY_SCHEMES",
    "SCHEDULER_HEADERS",
    "SCHEDULER_PREFIXES",
    "SERVER_DECIDED_EXACT",
    "SERVER_DECIDED_PREFIXES",
    "SUBSCRIPTION_HEADER",
    "AmbiguousPath",
    "ConflictingCredentials",
    "canonical_path",
    "forbidden_client_header",
    "key_scheme_for",
    "normalized_name",
    "presented_credential",
    "provider_headers",
    "provider_key_header",
    "server_decided",
    "upstream_headers",
]

SUBSCRIPTION_HEADER: Final = "x-maas-subscription"
API_KEY_HEADER: Final = "x-api-key"
API_KEY_PREFIX: Final = "sk-oai-"
OBJECTIVE_HEADER: Final = "x-llm-d-inference-objective"
FORWARD_CREDENTIALS_ANNOTATION: Final = "maas.opendatahub.io/forward-credentials"
MAX_PATH: Final = 4096

HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer",
    "transfer-encoding", "upgrade",
})
CREDENTIAL_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"})
PROVIDER_KEY_SCHEMES: Final = {"bearer": "authorization", "x-api-key": "x-api-key", "api-key": "api-key"}
"""How a provider takes its key (the route's `contract.labels.UPSTREAM_AUTH_ANNOTATION`) -> the header it goes
in; `bearer` prefixes the value with `Bearer `. Every one is a caller credential header too, so a caller's own
value never survives next to the provider key."""


ANTHROPIC_VERSION: Final = "2023-06-01"
"""The `anthropic-version` sent to a Messages provider: the API version the translation is written against."""
AZURE_PROVIDERS: Final = frozenset({"azure", "azure-openai"})


def key_scheme_for(provider: str, api_format: str) -> str:
    """How an ExternalModel's provider takes its key: Anthropic's Messages API in `x-api-key`, Azure OpenAI in
    `api-key`, everyone else as `Authorization: Bearer` (the controller writes it on the route; the console
    uses it to list a provider's models)."""
    if api_format == "messages":
        return "x-api-key"
    return "api-key" if provider in AZURE_PROVIDERS else "bearer"


def provider_headers(provider: str, api_format: str, key: str) -> dict[str, str]:
    """The headers a call to the provider carries besides its body: the key in its scheme (none without a key)
    and, for the Messages API, `anthropic-version`."""
    headers = dict([provider_key_header(key_scheme_for(provider, api_format), key)]) if key else {}
    if api_format == "messages":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    return headers


def provider_key_header(scheme: str, key: str) -> tuple[str, str]:
    """The header carrying the provider key under `scheme` (an unknown scheme is `bearer`)."""
    name = PROVIDER_KEY_SCHEMES.get(scheme, "authorization")
    return name, f"Bearer {key}" if name == "authorization" else key
_IDENTITY_EXACT: Final = frozenset({
    "x-forwarded-user", "x-forwarded-email", "x-forwarded-groups", "x-forwarded-preferred-username",
    "x-forwarded-access-token", "remote-user", "x-remote-user", "x-user", "x-user-id", "x-userid", "x-username",
    "x-email", "x-groups", "x-auth-user", "x-authenticated-user", "x-authenticated-userid",
    "x-ms-client-principal", "x-ms-client-principal-name", "x-goog-authenticated-user-email",
})
_IDENTITY_PREFIXES: Final = ("x-maas-", "impersonate-", "x-remote-", "x-auth-request-", "x-forwarded-user-")
SCHEDULER_PREFIXES: Final = ("x-gateway-", "x-llm-d-")
"""Inference Extension metadata keys (`x-gateway-inference-objective`, `-inference-fairness-id`,
`-destination-endpoint`, `-destination-endpoint-subset`, `-model-name-rewrite`, `-inference-request-cost`, ...)
and llm-d's own (`x-llm-d-inference-objective`, ...): whatever the next release adds under them is covered."""
SCHEDULER_HEADERS: Final = frozenset({
    "x-prefiller-host-port", "x-encoder-hosts-ports", "x-data-parallel-host-port",  # llm-d routing sidecar peers
    "x-slo-ttft-ms", "x-slo-tpot-ms",  # latency SLOs flow control and the latency scorers order by
    "x-original-path", "x-forwarded-path",  # the path the endpoint picker's parser classifies a request by
})
SERVER_DECIDED_EXACT: Final = _IDENTITY_EXACT | SCHEDULER_HEADERS
"""Names (lowercase, `-`) a client may not send; with `SERVER_DECIDED_PREFIXES`, all `server_decided` reads.
The generated AuthPolicy refuses the same family on an Envoy data plane (`builders.authpolicy`)."""
SERVER_DECIDED_PREFIXES: Final = (*_IDENTITY_PREFIXES, *SCHEDULER_PREFIXES)
_DROP_ALWAYS: Final = HOP_BY_HOP | {"host", "content-length", "expect"}
_ENCODED_DELIMITERS: Final = re.compile(rb"%(2f|5c|25)", re.IGNORECASE)
_PERCENT: Final = re.compile(rb"%([0-9A-Fa-f]{2})")
_CONTROL_OR_BACKSLASH: Final = re.compile(r"[\x00-\x1f\x7f\\]")
_SLASHES: Final = re.compile("/{2,}")
_UNRESERVED: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class ConflictingCredentials(ValueError):
    """`Authorization` and `x-api-key` carry different credentials: the request is refused, never guessed."""


def presented_credential(authorization: str | None, x_api_key: str | None) -> str | None:
    """The one credential a client presents (the same rule as the generated AuthPolicy):
    `Authorization: Bearer <token>` (an API key or a Kubernetes token), else `x-api-key: sk-oai-...` (an API
    key, as Anthropic-style clients send it). An `x-api-key` that is not a MaaS API key is no credential (and
    never forwarded); a MaaS API key in `x-api-key` beside an `Authorization` naming something else is
    refused (`ConflictingCredentials`), never guessed."""
    bearer = bearer_credential(authorization)
    header_key = x_api_key.strip() if x_api_key is not None else ""
    if not header_key.startswith(API_KEY_PREFIX):
        return bearer
    if authorization is not None and header_key != bearer:
        raise ConflictingCredentials("Authorization and x-api-key carry different credentials")
    return header_key


class AmbiguousPath(ValueError):
    """A request path the gateway refuses to interpret (answered 400)."""


@functools.lru_cache(maxsize=4096)  # a request's header names are mostly the same few: a dict lookup each
def normalized_name(name: str) -> str:
    """Lowercase, `_` as `-`: how header names are compared here (and how many proxies read them)."""
    return name.strip().lower().replace("_", "-")


def server_decided(name: str) -> bool:
    """True for headers only the gateway may set (see the module docstring)."""
    return _decided(normalized_name(name))


def _decided(normalized: str) -> bool:
    return normalized != SUBSCRIPTION_HEADER and (
        normalized in SERVER_DECIDED_EXACT or normalized.startswith(SERVER_DECIDED_PREFIXES))


def forbidden_client_header(names: Iterable[str]) -> str | None:
    """The first header a client may not send, or None."""
    return next((n for n in names if server_decided(n)), None)


def _decode_unreserved(raw: bytes) -> bytes:
    def sub(m: re.Match[bytes]) -> bytes:
        byte = int(m.group(1), 16)
        return bytes([byte]) if byte in _UNRESERVED else b"%" + m.group(1).upper()

    return _PERCENT.sub(sub, raw)


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    segments = path.split("/")[1:]
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == ".":
            if last:
                out.append("")
            continue
        if seg == "..":
            if not out:
                raise AmbiguousPath("the path climbs above the root")
            out.pop()
            if last:
                out.append("")
            continue
        out.append(seg)
    return "/" + "/".join(out)


def canonical_path(raw: bytes | str) -> str:
    """The canonical form of a raw request path (see the module docstring); raises AmbiguousPath."""
    data = raw.encode("latin-1") if isinstance(raw, str) else raw
    if len(data) > MAX_PATH:
        raise AmbiguousPath(f"the path is longer than {MAX_PATH} bytes")
    if not data.startswith(b"/"):
        raise AmbiguousPath("the path must start with /")
    if b"?" in data or b"#" in data:
        raise AmbiguousPath("the path carries a query or fragment delimiter")
    escaped = b"%" in data  # most paths have no escape: nothing to decode twice
    if escaped and _ENCODED_DELIMITERS.search(data):
        raise AmbiguousPath("encoded '/', '\\\\' or '%' in the path")
    fully = _PERCENT.sub(lambda m: bytes([int(m.group(1), 16)]), data) if escaped else data
    try:
        plain = fully.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AmbiguousPath("the path is not valid UTF-8 (decoded)") from exc
    if _CONTROL_OR_BACKSLASH.search(plain):
        raise AmbiguousPath("backslash or control character in the path (decoded)")
    text = _decode_unreserved(data).decode("utf-8") if escaped else plain
    merged = _SLASHES.sub("/", text) if "//" in text else text
    return _remove_dot_segments(merged) if "/." in merged else merged  # no "." or ".." segment otherwise


def upstream_headers(
    client: Iterable[tuple[str, str]],
    server: Mapping[str, str],
    *,
    forward_credentials: bool,
    set_headers: Iterable[tuple[str, str]] = (),
    add_headers: Iterable[tuple[str, str]] = (),
    remove_headers: Iterable[str] = (),
    upstream_key: str | None = None,
    key_scheme: str = "bearer",
) -> list[tuple[str, str]]:
    """Headers for the upstream request (names lowercase), per the contract in the module docstring.

    `server` are the AuthPolicy's success headers (but `x-maas-identity`, which is the payload processor's:
    it never goes upstream); `set/add/remove_headers` the route's RequestHeaderModifier; `key_scheme` how
    the provider takes `upstream_key` (`PROVIDER_KEY_SCHEMES`).
    """
    server = {n: v for n, v in server.items() if n.lower() != IDENTITY_HEADER}
    # (normalized name, lowercased name, value): each name normalized once
    sent = [(normalized_name(name), name.lower(), value) for name, value in client]
    connection_listed = {normalized_name(token) for n, _, value in sent if n == "connection"
                         for token in value.split(",")}
    dropped = _DROP_ALWAYS | connection_listed
    if not forward_credentials:
        dropped = dropped | CREDENTIAL_HEADERS
    replaced = {n.lower() for n in server} | {normalized_name(n) for n in remove_headers}
    replaced |= {n.lower() for n, _ in set_headers}
    out = [
        entry for entry in sent
        if entry[0] not in dropped and not _decided(entry[0])
        and (forward_credentials or entry[0] != SUBSCRIPTION_HEADER) and entry[0] not in replaced
    ]
    out.extend((normalized_name(n), n.lower(), v) for n, v in server.items())
    out.extend((normalized_name(n), n.lower(), v) for n, v in set_headers)
    out.extend(entry for entry in ((normalized_name(n), n.lower(), v) for n, v in add_headers)
               if entry[0] not in dropped)
    if upstream_key:
        name, value = provider_key_header(key_scheme, upstream_key)
        out = [entry for entry in out if entry[0] != name]
        out.append((name, name, value))
    return [(lowered, value) for _, lowered, value in out]
