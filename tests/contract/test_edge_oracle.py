"""`canonical_path` and `upstream_headers` take shortcuts (no decoding without a `%`, no dot-segment pass
without a `/.`, each header name normalized once); they must answer exactly as the straightforward versions
they replaced, kept here as oracles, for any input."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from maasctl.contract.edge import (
    _DROP_ALWAYS,
    _ENCODED_DELIMITERS,
    _PERCENT,
    CREDENTIAL_HEADERS,
    MAX_PATH,
    SUBSCRIPTION_HEADER,
    AmbiguousPath,
    _decode_unreserved,
    _remove_dot_segments,
    canonical_path,
    normalized_name,
    server_decided,
    upstream_headers,
)
from maasctl.contract.identity import HEADER as IDENTITY_HEADER


def oracle_path(data: bytes) -> str:
    if len(data) > MAX_PATH or not data.startswith(b"/") or b"?" in data or b"#" in data:
        raise AmbiguousPath("shape")
    if _ENCODED_DELIMITERS.search(data):
        raise AmbiguousPath("delimiter")
    fully = _PERCENT.sub(lambda m: bytes([int(m.group(1), 16)]), data)
    try:
        plain = fully.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AmbiguousPath("utf-8") from exc
    if "\\" in plain or any(ord(c) < 0x20 or ord(c) == 0x7F for c in plain):
        raise AmbiguousPath("control")
    text = _decode_unreserved(data).decode("utf-8")
    return _remove_dot_segments(re.sub(r"/{2,}", "/", text))


def outcome(fn: object, data: bytes) -> tuple[str, str]:
    try:
        return "ok", fn(data)  # type: ignore[operator]
    except AmbiguousPath:
        return "refused", ""
    except UnicodeDecodeError:
        return "decode error", ""


PATH_PARTS = st.sampled_from([b"/", b"//", b".", b"..", b"/./", b"/../", b"a", b"%2e", b"%2E%2e", b"%41", b"%2f",
                              b"%25", b"%5C", b"%7e", b"%20", b"%c3%a9", b"\xc3\xa9", b"\xc3", b"%a9", b"\\", b"\x01",
                              b"\x7f", b"%00", b"?", b"#", b"_", b"~", b"%zz", b"%"])


@settings(max_examples=800, deadline=None)
@given(st.lists(PATH_PARTS, max_size=12))
def test_canonical_path_answers_as_the_straightforward_version(parts: list[bytes]) -> None:
    data = b"/" + b"".join(parts)
    assert outcome(canonical_path, data) == outcome(oracle_path, data)


def oracle_headers(client: Iterable[tuple[str, str]], server: Mapping[str, str], *, forward_credentials: bool,
                   set_headers: Iterable[tuple[str, str]] = (), add_headers: Iterable[tuple[str, str]] = (),
                   remove_headers: Iterable[str] = (), upstream_key: str | None = None) -> list[tuple[str, str]]:
    client = list(client)
    server = {n: v for n, v in server.items() if n.lower() != IDENTITY_HEADER}
    listed = {normalized_name(t) for n, v in client if normalized_name(n) == "connection" for t in v.split(",")}
    dropped = _DROP_ALWAYS | listed
    if not forward_credentials:
        dropped = dropped | CREDENTIAL_HEADERS
    out = [(n.lower(), v) for n, v in client if normalized_name(n) not in dropped and not server_decided(n)
           and (forward_credentials or normalized_name(n) != SUBSCRIPTION_HEADER)]
    replaced = {n.lower() for n in server} | {normalized_name(n) for n in remove_headers}
    replaced |= {n.lower() for n, _ in set_headers}
    out = [(n, v) for n, v in out if normalized_name(n) not in replaced]
    out.extend((n.lower(), v) for n, v in server.items())
    out.extend((n.lower(), v) for n, v in set_headers)
    out.extend((n.lower(), v) for n, v in add_headers if normalized_name(n) not in dropped)
    if upstream_key:
        out = [(n, v) for n, v in out if normalized_name(n) != "authorization"]
        out.append(("authorization", f"Bearer {upstream_key}"))
    return out


NAMES = st.sampled_from(["Host", "authorization", "Authorization ", "x-api-key", "X_API_KEY", "connection",
                         "Connection", "keep-alive", "x-custom", "X-Custom", "x_custom", "x-maas-identity",
                         "x-maas-subscription", "X-MaaS-Subscription", "x-maas-group", "content-length", "te",
                         "x-gateway-model-name", "upgrade", "cookie", "accept"])
PAIRS = st.lists(st.tuples(NAMES, st.sampled_from(["", "a", "keep-alive, x-custom", "x_custom,te", "Bearer t"])),
                 max_size=8)


@settings(max_examples=800, deadline=None)
@given(PAIRS, st.dictionaries(NAMES, st.sampled_from(["s", "t"]), max_size=3), st.booleans(), PAIRS, PAIRS,
       st.lists(NAMES, max_size=3), st.sampled_from([None, "", "pk"]))
def test_upstream_headers_answer_as_the_straightforward_version(
        client: list[tuple[str, str]], server: dict[str, str], forward: bool, set_headers: list[tuple[str, str]],
        add_headers: list[tuple[str, str]], remove: list[str], key: str | None) -> None:
    kwargs = {"forward_credentials": forward, "set_headers": set_headers, "add_headers": add_headers,
              "remove_headers": remove, "upstream_key": key}
    assert upstream_headers(client, server, **kwargs) == oracle_headers(client, server, **kwargs)  # type: ignore[arg-type]
