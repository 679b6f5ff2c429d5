"""Shared by the translation tests: the official SDKs' own types as the judges of every translated shape, and
the SDK clients themselves (on an in-process transport) as the callers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter

_MESSAGES_PARAMS = TypeAdapter(message_create_params.MessageCreateParamsNonStreaming)
_CHAT_PARAMS = TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming)
# anthropic 2.16's types model no sampling parameters; the translation passes them (docs/providers.md)
MESSAGES_KEYS = {*message_create_params.MessageCreateParamsBase.__annotations__, "stream", "temperature",
                 "top_p", "top_k"}
CHAT_KEYS = {*completion_create_params.CompletionCreateParamsBase.__annotations__, "stream", "top_k"}


def materialize(value: Any) -> Any:
    """Pydantic validates the SDKs' `Iterable[...]` params lazily: walk them so every item is validated."""
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [materialize(v) for v in value]
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [materialize(v) for v in value]  # a ValidatorIterator


def valid_messages_request(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as Anthropic's SDK types take a Messages request (raises when they would not)."""
    assert set(body) <= MESSAGES_KEYS, set(body) - MESSAGES_KEYS
    plain = {k: v for k, v in body.items() if k != "stream"}
    result: dict[str, Any] = materialize(_MESSAGES_PARAMS.validate_python(plain))
    return result


def valid_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as OpenAI's SDK types take a Chat Completions request."""
    assert set(body) <= CHAT_KEYS, set(body) - CHAT_KEYS
    plain = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    result: dict[str, Any] = materialize(_CHAT_PARAMS.validate_python(plain))
    return result


Handler = Callable[[dict[str, Any]], httpx2.Response]


def _transport(handler: Handler, seen: list[dict[str, Any]]) -> httpx2.MockTransport:
    def handle(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        seen.append(body)
        return handler(body)

    return httpx2.MockTransport(handle)


def openai_client(handler: Handler, seen: list[dict[str, Any]]) -> openai.OpenAI:
    """The official OpenAI client whose every request the handler answers (no network)."""
    return openai.OpenAI(api_key="sk-test", base_url="http://gateway.test/v1", max_retries=0,
                         http_client=httpx2.Client(transport=_transport(handler, seen)))


def anthropic_client(handler: Handler, seen: list[dict[str, Any]]) -> anthropic.Anthropic:
    """The official Anthropic client, likewise."""
    return anthropic.Anthropic(api_key="sk-test", base_url="http://gateway.test", max_retries=0,
                               http_client=httpx2.Client(transport=_transport(handler, seen)))


def split(data: bytes, sizes: Iterator[int]) -> list[bytes]:
    """`data` cut at the given sizes (then the rest), to feed a stream translator in odd pieces."""
    pieces, at = [], 0
    for size in sizes:
        if at >= len(data):
            break
        pieces.append(data[at:at + max(size, 1)])
        at += max(size, 1)
    if at < len(data):
        pieces.append(data[at:])
    return pieces


def sse_stream(events: list[tuple[str | None, Any]]) -> bytes:
    """Server-sent events as a provider writes them."""
    out = b""
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out += f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
    return out


def parse_sse(data: bytes) -> list[tuple[str | None, str]]:
    """(event, data) pairs of a translated stream (our own output: LF, one data line each)."""
    out: list[tuple[str | None, str]] = []
    for raw in data.decode().split("\n\n"):
        if not raw:
            continue
        name, payload = None, ""
        for line in raw.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                payload = line[6:]
        out.append((name, payload))
    return out
