"""Guardrails in the data plane: input rails before a request is forwarded, output rails on the answer.

Which requests: exactly those whose AuthPolicy exported the `guardrails` filter (`contract.guardrails`): the
selected subscription enables guardrails for this model and the global switch is on.

The engine is NVIDIA NeMo Guardrails' server. One check is `POST <url>/v1/chat/completions` with
`guardrails: {config_id, options: {rails: ["input"] | ["output"], log: {activated_rails: true}}}` and
`model: ""` (the configuration's own models decide; the caller never picks the guard model). A rail that
stops the conversation (`activated_rails[].stop`) blocks, and its name is the guardrail named in the error.

Deny by default: what the rails did not read reaches neither the model nor the client.

- Input (`input_text`): everything the model reads is checked as one user message — every message's text (all
  roles, content parts joined, tool call names and arguments, reasoning), `prompt` (a string or strings),
  Responses `input` (text or message/tool items) and `instructions`, Anthropic `system`, `suffix`, `tools`,
  `documents`. A guarded body whose model input the rails cannot read is refused (400
  `guardrails_unreadable`), never passed: not a JSON object, not exactly one of messages/prompt/input, token
  ids, non-text parts (images, audio, files), `chat_template`, `chat_template_kwargs` holding strings,
  `prompt_embeds`, stored context (`previous_response_id`, `conversation`, item references, encrypted
  reasoning), and — when the caller passes the upstream path — endpoints other than completions, chat
  completions, responses, messages and embeddings.
- Output (`OutputGuard`, a wrapper around the ASGI `send`): JSON answers are held back, their text (choices'
  messages and deltas with reasoning, refusals and tool calls; Responses output items; Anthropic content
  blocks) checked, then sent or replaced by the error. Event streams are checked in chunks: events are held
  until `stream_chunk_chars` new characters arrived (or the stream ended), the text so far is checked, and
  the held events are released; a block ends the stream with an error event and `[DONE]`. A 2xx answer the
  rails cannot read (an unknown shape, an unknown event, a compressed or binary body, duplicate JSON keys) is
  blocked the same way with `guardrails_unreadable`, whatever the failure policy, and charged as a blocked
  answer. Error answers (non-2xx) are not checked.
- Blocked: 400 `{"error": {"type": "invalid_request_error", "code": "guardrail_blocked", "message": ...,
  "param": "input"|"output"}}` naming the configuration and the rail; `X-MaaS-Guardrail: <config>/<rail>`.
  Only a rail's decision blocks: a rail the engine could not run (it raised, e.g. a prompt over its
  `max_length`; the engine then "stops" with an internal-error message) is an engine error, below.
- Engine down, slow (the settings' timeout) or failing (an answer that is not a rails log, or a rail that
  failed instead of deciding): FailClosed -> 503 `guardrails_unavailable` with the reason; FailOpen -> the
  request continues, counted in `maas_gateway_guardrails_checks_total{outcome="fail_open"}` and in the usage
  record (`guardrails: "fail_open"`). A configuration that is missing or not valid (`ready` false) is refused
  with 503 `guardrails_config_unavailable` whatever the policy: it never silently passes.
- Size: one check carries at most `contract.guardrails.MAX_CHECK_CHARS` characters. Longer input is refused
  with 413 `guardrails_input_too_large` before the engine or the model sees it; for output rails the answer
  plus the end of the user turn that fits are sent, and an answer (or a stream so far) longer than the limit
  is not sent unchecked: 502 `guardrails_answer_too_large` (streams: that error event), whatever the policy.
- Share of the engine: one caller (the identity's user) has at most `caller_in_flight` guarded requests in
  flight per gateway, from the input check to the end of the answer; one more is refused with 429
  `guardrails_busy` and `Retry-After`, so one user cannot keep the shared engine busy for everyone.

Metering (see `server.py` and docs/guardrails.md): a request blocked on input never reaches the model and
costs the caller's token quota nothing; a response blocked on output is charged what the model produced.
Guard model calls are never charged to the caller's quota; their tokens (the engine's `stats`) are reported
as a separate usage record with model `guardrails/<config>` and `charged_tokens` 0, for showback/billing.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import httpx
from prometheus_client import Counter, Gauge, Histogram

from maasctl.contract import identity as ids
from maasctl.contract.errors import Refusal, error_body
from maasctl.contract.guardrails import MAX_CHECK_CHARS, GuardrailsBinding
from maasctl.dataplane.body import PreparedBody

__all__ = ["CallerSlots", "GuardCheck", "GuardrailsClient", "OutputGuard", "Refusal", "Unreadable", "Verdict",
           "answer_text", "caller_of", "engine_failure", "guarded_endpoint", "input_text", "output_text",
           "readable_input", "request_text", "stream_event_text", "unavailable_config"]

log = logging.getLogger("maasctl.gateway.guardrails")

Outcome = Literal["passed", "blocked", "fail_open", "unavailable", "unreadable", "too_large"]
GUARDRAIL_HEADER: Final = "x-maas-guardrail"
MAX_HELD_BYTES: Final = 8 * 1024 * 1024
CALLER_IN_FLIGHT: Final = 4  # guarded requests one caller may have in flight per gateway (default)
BUSY_RETRY_AFTER: Final = 1  # seconds
# What NeMo Guardrails records when a rail raised instead of deciding (its Colang 1.0 runtime).
_INTERNAL_ERROR_INTENT: Final = "inform internal error occurred"

CHECKS = Counter("maas_gateway_guardrails_checks_total", "Guardrails checks by configuration, rail type and outcome",
                 ["config", "rails", "outcome"])
LATENCY = Histogram("maas_gateway_guardrails_check_seconds", "Guardrails engine round trip", ["rails"])
IN_FLIGHT = Gauge("maas_gateway_guardrails_in_flight", "Guarded requests holding an engine slot",
                  multiprocess_mode="livesum")


@dataclass(frozen=True)
class Verdict:
    """One check's result. `tokens` are the guard model's (prompt, completion) tokens."""

    outcome: Outcome
    rail: str = ""
    reason: str = ""
    tokens: tuple[int, int] = (0, 0)

    @property
    def allows(self) -> bool:
        return self.outcome in ("passed", "fail_open")


@dataclass
class GuardCheck:
    """What one guarded request went through (for the usage record)."""

    binding: GuardrailsBinding
    prompt: str = ""  # the input text (output rails see it as the user turn)
    outcome: str = "passed"  # passed | blocked_input | blocked_output | fail_open | unavailable
    prompt_tokens: int = 0
    completion_tokens: int = 0
    client_status: int | None = None  # what the client got when a guardrail changed the answer
    release: Callable[[], None] = lambda: None  # gives the caller's engine slot back (idempotent)

    def add(self, verdict: Verdict) -> None:
        self.prompt_tokens += verdict.tokens[0]
        self.completion_tokens += verdict.tokens[1]
        if verdict.outcome == "fail_open" and self.outcome == "passed":
            self.outcome = "fail_open"


# --- what the rails read -------------------------------------------------------------------------------
# Deny by default: text the model would read, or the client would get, that these readers do not understand
# raises `Unreadable`; the request is refused (400 `guardrails_unreadable`) or the answer blocked.


class Unreadable(ValueError):
    """Content the rails cannot read but the model (request) or the client (answer) would."""


_TEXT_PARTS: Final = frozenset({"text", "input_text", "output_text", "summary_text", "reasoning_text"})
_PROMPT_FIELDS: Final = ("messages", "prompt", "input")
# Read besides the prompt: instructions and system prompts, fill-in-the-middle suffix, tool descriptions and
# vLLM's `documents` are all rendered into what the model reads.
_EXTRA_FIELDS: Final = ("instructions", "system", "suffix", "tools", "functions", "documents")
# Model input the rails cannot see: a template of the caller's own, precomputed embeddings, stored context.
_REFUSED_FIELDS: Final = ("chat_template", "prompt_embeds", "previous_response_id", "conversation")
_MESSAGE_META: Final = frozenset({"role", "tool_call_id", "id", "type", "status", "call_id"})
_ENDPOINTS: Final = frozenset({"completions", "responses", "messages", "embeddings"})  # chat/completions too
_ANTHROPIC_QUIET: Final = frozenset({"content_block_stop", "message_delta", "message_stop", "ping"})
# Keys of a Responses stream event that are bookkeeping, not text the client reads.
_RESPONSES_EVENT_META: Final = frozenset({"type", "sequence_number", "item_id", "output_index", "content_index",
                                          "summary_index", "annotation_index", "obfuscation"})
_RESPONSES_EVENT_TEXT: Final = ("delta", "text", "refusal", "arguments", "input")


def _strings(value: Any, *, keys: bool = False) -> list[str]:
    """Every string in a JSON value; with `keys`, mapping keys too (tool schemas name parameters with keys,
    completions logprobs name tokens with keys)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for key, item in value.items()
                for text in ([str(key)] if keys else []) + _strings(item, keys=keys)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item, keys=keys)]
    return []


def _string(value: Any, what: str) -> str:
    """A text field: absent or null is empty; anything but a string is not text the rails can read."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Unreadable(f"{what} is not a string")
    return value


def _part_text(part: Any, *, answer: bool) -> str:
    """One content part or block (OpenAI chat, Responses, Anthropic). Non-text parts (images, audio, files,
    documents) carry content the text rails cannot judge, so they are unreadable."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        raise Unreadable("a content part is not an object")
    kind = part.get("type")
    if kind in _TEXT_PARTS or (kind is None and "text" in part):
        return _string(part.get("text"), "a text part")
    if kind in ("refusal", "thinking"):
        return _string(part.get(kind), f"a {kind} part")
    if kind in ("tool_use", "server_tool_use"):
        return "\n".join([_string(part.get("name"), "a tool name"), *_strings(part.get("input"))])
    if kind == "tool_result":
        return _content_text(part.get("content"), answer=answer)
    if kind == "redacted_thinking" and answer:
        return ""  # encrypted: the client cannot read it either
    raise Unreadable(f"a content part of type {kind!r}")


def _content_text(content: Any, *, answer: bool = False) -> str:
    """A message's content: a string, null, or a list of parts (joined by newlines, as before)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "\n".join(_part_text(part, answer=answer) for part in content)
    raise Unreadable("message content is neither a string nor a list of parts")


def _message_text(message: Any) -> str:
    """A chat message: its content, then every other field's strings (name, tool call names and arguments,
    reasoning, refusal), since chat templates render them for the model."""
    if not isinstance(message, Mapping):
        raise Unreadable("a message is not an object")
    extra = [text for key, value in message.items() if key != "content" and key not in _MESSAGE_META
             for text in _strings(value)]
    return "\n".join([_content_text(message.get("content")), *extra])


def _item_text(item: Any, *, answer: bool) -> str:
    """A Responses API item (input or output). Items that point at stored content or carry non-text results
    are unreadable."""
    if not isinstance(item, Mapping):
        raise Unreadable("an item is not an object")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        if answer:
            return _content_text(item.get("content"), answer=True)
        return _message_text({k: v for k, v in item.items() if k != "type"})
    if kind == "reasoning":
        if item.get("encrypted_content") and not answer:
            raise Unreadable("encrypted reasoning")
        return "\n".join(_part_text(p, answer=answer) for key in ("summary", "content") for p in item.get(key) or ())
    if kind in ("function_call", "custom_tool_call"):
        return "\n".join(_strings([item.get("name"), item.get("arguments"), item.get("input")]))
    if kind in ("function_call_output", "custom_tool_call_output"):
        return _content_text(item.get("output"), answer=answer)
    raise Unreadable(f"an item of type {kind!r}")


def _prompt_text(prompt: Any) -> str:
    """`prompt` (completions) or `input` as a string or a list of strings. Token ids are unreadable: the rails
    read text, and the gateway does not have the model's tokenizer."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n\n".join(prompt)
    raise Unreadable("the prompt is not text (token ids or another shape)")


def _input_field_text(value: Any) -> str:
    """Responses/embeddings `input`: text, a list of strings, or a list of items (messages, tool calls)."""
    if isinstance(value, list) and value and any(isinstance(v, Mapping) for v in value):
        return "\n\n".join(_item_text(item, answer=False) for item in value)
    return _prompt_text(value)


def _refusal(data: Mapping[str, Any]) -> str | None:
    """Why a guarded body must be refused whatever its text says, or None."""
    present = [name for name in _PROMPT_FIELDS if name in data]
    if len(present) != 1:
        return "the body must carry exactly one of messages, prompt or input"
    for name in _REFUSED_FIELDS:
        if data.get(name) is not None:
            return f"{name} is not checked by guardrails"
    kwargs = data.get("chat_template_kwargs")
    if kwargs is not None and not (isinstance(kwargs, Mapping) and not any(_strings(v) for v in kwargs.values())):
        return "chat_template_kwargs may only hold flags and numbers"  # strings can reach the rendered prompt
    return None


def request_text(data: Any) -> str:
    """Everything the model will read from a guarded JSON request; raises Unreadable otherwise."""
    if not isinstance(data, Mapping):
        raise Unreadable("the body is not a JSON object")
    refused = _refusal(data)
    if refused is not None:
        raise Unreadable(refused)
    if "messages" in data:
        if not isinstance(data["messages"], list):
            raise Unreadable("messages is not a list")
        body = "\n\n".join(_message_text(m) for m in data["messages"])
    elif "prompt" in data:
        body = _prompt_text(data["prompt"])
    else:
        body = _input_field_text(data["input"])
    head = [_content_text(data.get(name)) for name in ("instructions", "system") if data.get(name) is not None]
    tail = [text for name in _EXTRA_FIELDS[2:] for text in _strings(data.get(name), keys=True)]
    return "\n\n".join([*head, body, *tail])


def guarded_endpoint(path: str) -> bool:
    """Endpoints whose requests and answers the rails read; a guarded model is served on these only."""
    return path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] in _ENDPOINTS


def input_text(body: PreparedBody, path: str | None = None) -> str | None:
    """Everything the caller wrote that the model will read, or None when the rails cannot read all of it
    (refused with 400 `guardrails_unreadable`). `path`, when given, is the upstream path: other endpoints of a
    guarded model are refused too."""
    if path is not None and not guarded_endpoint(path):
        return None
    try:
        return request_text(json.loads(body.content))
    except (Unreadable, ValueError, UnicodeDecodeError, RecursionError) as exc:
        log.debug("guarded request unreadable: %s", exc)
        return None


def _loads(raw: bytes | str) -> Any:
    """Strict JSON for answers: a duplicated key could be read one way here and another way by the client."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(items)
        if len(result) != len(items):
            raise Unreadable("duplicate keys")
        return result
    return json.loads(raw, object_pairs_hook=pairs)


def _answer_message_text(message: Any) -> str:
    """An answer's message or delta: content plus every other field (reasoning, refusal, tool calls...).
    Audio the client would hear is unreadable."""
    if not isinstance(message, Mapping):
        raise Unreadable("a message is not an object")
    audio = message.get("audio")
    if isinstance(audio, Mapping) and audio.get("data"):
        raise Unreadable("audio output")
    extra = [text for key, value in message.items() if key not in ("content", "role", "audio")
             for text in _strings(value)]
    transcript = [audio["transcript"]] if isinstance(audio, Mapping) and isinstance(audio.get("transcript"), str) \
        else []
    return "".join([_content_text(message.get("content"), answer=True), *extra, *transcript])


def _choices_text(data: Mapping[str, Any]) -> str:
    """chat/completions and completions answers and chunks: every choice's message, delta, text, logprobs."""
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise Unreadable("choices is not a list")
    parts: list[str] = _strings(data.get("error"))
    for choice in choices:
        if not isinstance(choice, Mapping):
            raise Unreadable("a choice is not an object")
        parts.extend(_answer_message_text(choice[key]) for key in ("message", "delta") if choice.get(key) is not None)
        parts.append(_string(choice.get("text"), "a choice's text"))
        parts.extend(_strings(choice.get("logprobs"), keys=True))
    return "".join(parts)


def _response_text(data: Mapping[str, Any]) -> str:
    """A Responses API object: its output items (and the `output_text` convenience field when present)."""
    output = data.get("output")
    if output is not None and not isinstance(output, list):
        raise Unreadable("output is not a list")
    parts = [_item_text(item, answer=True) for item in output or ()]
    return "".join([_string(data.get("output_text"), "output_text"), *parts, *_strings(data.get("error"))])


def _anthropic_text(data: Mapping[str, Any]) -> str:
    """An Anthropic-style message: its content blocks."""
    content = data.get("content")
    if not isinstance(content, list):
        raise Unreadable("content is not a list of blocks")
    return "".join(_part_text(block, answer=True) for block in content)


def _embeddings(data: Mapping[str, Any]) -> bool:
    """An embeddings answer: vectors, no text (the input they embed was checked)."""
    items = data.get("data")
    return data.get("object") == "list" and isinstance(items, list) and all(
        isinstance(i, Mapping) and i.get("object") == "embedding" and set(i) <= {"object", "embedding", "index"}
        for i in items)


def answer_text(data: Any) -> str:
    """The text of a JSON answer of a shape the rails know; raises Unreadable for any other shape."""
    if not isinstance(data, Mapping):
        raise Unreadable("the answer is not a JSON object")
    if "choices" in data:
        return _choices_text(data)
    if data.get("object") == "response" or "output" in data:
        return _response_text(data)
    if data.get("type") == "message":
        return _anthropic_text(data)
    if _embeddings(data):
        return ""
    raise Unreadable("an answer of an unknown shape")


def output_text(data: Any) -> str | None:
    """The text of a JSON answer (all choices, items or blocks), or None when it cannot all be read."""
    try:
        return answer_text(data)
    except Unreadable:
        return None


def _responses_event_text(data: Mapping[str, Any]) -> str:
    """A Responses stream event: its text fields, part, item or response; any other field is unreadable (a
    partial image, a tool's result)."""
    parts: list[str] = []
    for key, value in data.items():
        if key in _RESPONSES_EVENT_META or value is None:
            continue
        if key in _RESPONSES_EVENT_TEXT or key in ("logprobs", "annotation"):
            parts.extend(_strings(value, keys=key == "logprobs"))
        elif key == "part":
            parts.append(_part_text(value, answer=True))
        elif key == "item":
            parts.append(_item_text(value, answer=True))
        elif key == "response" and isinstance(value, Mapping):
            parts.append(_response_text(value))
        else:
            raise Unreadable(f"event field {key!r}")
    return "".join(parts)


def _anthropic_event_text(data: Mapping[str, Any], kind: str) -> str:
    """An Anthropic stream event: message start, content block start and deltas."""
    if kind in _ANTHROPIC_QUIET:
        return ""
    if kind == "message_start":
        return _anthropic_text(data.get("message") or {})
    if kind == "content_block_start":
        return _part_text(data.get("content_block"), answer=True)
    delta = data.get("delta")
    if kind != "content_block_delta" or not isinstance(delta, Mapping):
        raise Unreadable(f"event {kind!r}")
    fields = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}
    if delta.get("type") in fields:
        return _string(delta.get(fields[str(delta["type"])]), "a delta")
    if delta.get("type") == "signature_delta":
        return ""
    if delta.get("type") == "citations_delta":
        return "".join(_strings(delta.get("citation")))
    raise Unreadable(f"a delta of type {delta.get('type')!r}")


def stream_event_text(data: Any) -> str:
    """The text of one stream event's JSON data (chat chunks, Responses and Anthropic events, errors)."""
    if not isinstance(data, Mapping):
        raise Unreadable("an event that is not a JSON object")
    kind = data.get("type")
    if "choices" in data:
        return _choices_text(data)
    if isinstance(kind, str) and kind.startswith("response."):
        return _responses_event_text(data)
    if isinstance(kind, str) and kind in (*_ANTHROPIC_QUIET, "message_start", "content_block_start",
                                          "content_block_delta"):
        return _anthropic_event_text(data, kind)
    if kind == "error" or set(data) == {"error"}:
        return "".join(_strings({k: v for k, v in data.items() if k != "type"}))
    raise Unreadable("an event of an unknown shape")


def _event_data(event: bytes) -> bytes:
    """The `data` of one event as a client assembles it: data lines joined by newlines."""
    return b"\n".join(line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:"))


def _event_text(event: bytes) -> str | None:
    """The text a client reads from one event; None when it cannot all be read. Data that is not JSON is
    checked as the characters the client gets."""
    data = _event_data(event)
    if not data.strip() or data.strip() == b"[DONE]":
        return ""
    try:
        chars = data.decode()
    except UnicodeDecodeError:
        return None
    try:
        value = _loads(chars)
    except Unreadable:
        return None
    except (ValueError, RecursionError):
        return chars
    try:
        return stream_event_text(value)
    except (Unreadable, RecursionError):
        return None


def blocked_message(binding: GuardrailsBinding, rail: str, where: str) -> str:
    return f"the {where} was blocked by guardrail {rail or 'unknown'!r} (configuration {binding.config!r})"


def caller_of(filters: Mapping[str, Any]) -> str:
    """Who shares the engine: the identity's user (else its key) as the AuthPolicy exported it."""
    identity = filters.get(ids.FILTER)
    if not isinstance(identity, Mapping):
        return ""
    return str(identity.get(ids.USERID) or identity.get(ids.KEY_ID) or "")


def engine_failure(activated: list[Any], events: Any) -> str | None:
    """The rail the engine failed to run (it raised instead of deciding), or None when every rail decided.

    NeMo Guardrails answers a failed rail as a stopped one: the action's result is a block marked `failed`, or
    the runtime uttered its internal-error message (`BotIntent` "inform internal error occurred", a finished
    action with `is_success` false, a stop event with `error_type` "internal_error"). Such a stop is no
    decision about the text, so it must never read as "blocked"."""
    for rail in activated:
        if not isinstance(rail, Mapping):
            continue
        for action in rail.get("executed_actions") or ():
            value = action.get("return_value") if isinstance(action, Mapping) else None
            if isinstance(value, Mapping) and value.get("failed") is True:
                return str(rail.get("name") or "")
    stopped = next((str(r.get("name") or "") for r in activated if isinstance(r, Mapping) and r.get("stop")), "")
    for event in events if isinstance(events, list) else ():
        if not isinstance(event, Mapping):
            continue
        if (event.get("type") == "BotIntent" and event.get("intent") == _INTERNAL_ERROR_INTENT) \
                or event.get("error_type") == "internal_error" \
                or (event.get("type") == "InternalSystemActionFinished" and event.get("is_success") is False):
            return stopped or str(event.get("flow_id") or event.get("action_name") or "")
    return None


@dataclass
class CallerSlots:
    """Guarded requests in flight per caller: at most `limit` each (one gateway's share of the engine)."""

    limit: int = CALLER_IN_FLIGHT
    _in_flight: dict[str, int] = field(default_factory=dict)

    def take(self, caller: str) -> Callable[[], None] | None:
        """A slot for `caller` and the function that gives it back (once), or None when all are taken."""
        if self.limit > 0 and self._in_flight.get(caller, 0) >= self.limit:
            return None
        self._in_flight[caller] = self._in_flight.get(caller, 0) + 1
        IN_FLIGHT.inc()
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            IN_FLIGHT.dec()
            left = self._in_flight.get(caller, 1) - 1
            if left > 0:
                self._in_flight[caller] = left
            else:
                self._in_flight.pop(caller, None)

        return release

    def in_flight(self, caller: str) -> int:
        return self._in_flight.get(caller, 0)


def readable_input(body: PreparedBody, path: str | None) -> tuple[str | None, Refusal | None]:
    """The input the rails check, or the refusal of a request whose input they cannot check whatever the
    engine says (unreadable, or longer than they check). Pure: simulate answers with it too."""
    text = input_text(body, path)
    if text is None:
        return None, Refusal(400, "guardrails_unreadable",
                             "guardrails apply to this model and cannot read this request body")
    if len(text) > MAX_CHECK_CHARS:
        return text, Refusal(413, "guardrails_input_too_large",
                             f"guardrails apply to this model and check at most {MAX_CHECK_CHARS} characters of "
                             f"input; this request has {len(text)}", param="input")
    return text, None


def unavailable_config(binding: GuardrailsBinding) -> Refusal:
    """The refusal of a guarded request whose configuration is not ready (never passed unchecked)."""
    return Refusal(503, "guardrails_config_unavailable", f"guardrail configuration {binding.config!r} is not available")


class GuardrailsClient:
    """Calls the engine; `url_override` replaces the exported engine URL (the local gateway); `caller_in_flight`
    bounds each caller's guarded requests in flight (0: unbounded)."""

    def __init__(self, http: httpx.AsyncClient, url_override: str | None = None,
                 caller_in_flight: int = CALLER_IN_FLIGHT) -> None:
        self.http = http
        self.url_override = url_override
        self.slots = CallerSlots(caller_in_flight)

    async def admit(self, binding: GuardrailsBinding, body: PreparedBody, path: str | None,
                    caller: str) -> tuple[GuardCheck, Refusal | None]:
        """Input rails of one request: its GuardCheck, and the refusal when it must not be forwarded. On
        admission the check holds one of the caller's slots until `check.release()`."""
        text, unfit = readable_input(body, path)
        guard = GuardCheck(binding, prompt=text or "")
        if unfit is not None:
            guard.outcome = "unavailable"
            if unfit.status == 413:
                CHECKS.labels(binding.config, "input", "too_large").inc()
            return guard, unfit
        release = self.slots.take(caller)
        if release is None:
            guard.outcome = "unavailable"
            CHECKS.labels(binding.config, "input", "busy").inc()
            return guard, Refusal(429, "guardrails_busy",
                f"at most {self.slots.limit} guarded requests per user may be in flight; retry later",
                {"retry-after": str(BUSY_RETRY_AFTER)})
        guard.release = release
        try:
            verdict = await self.check(binding, "input", guard.prompt)
        except BaseException:
            release()
            raise
        guard.add(verdict)
        if verdict.allows:
            return guard, None
        release()
        if verdict.outcome == "blocked":
            guard.outcome = "blocked_input"
            return guard, Refusal(400, "guardrail_blocked", blocked_message(binding, verdict.rail, "request"),
                                  {GUARDRAIL_HEADER: f"{binding.config}/{verdict.rail}"}, param="input")
        guard.outcome = "unavailable"
        return guard, Refusal(503, "guardrails_unavailable", verdict.reason) if binding.ready else \
            unavailable_config(binding)

    async def check(self, binding: GuardrailsBinding, rails: Literal["input", "output"], user: str,
                    answer: str | None = None) -> Verdict:
        if not binding.ready:
            CHECKS.labels(binding.config, rails, "unavailable").inc()
            return Verdict("unavailable", reason=f"guardrail configuration {binding.config!r} is not available")
        checked = len(user) if answer is None else len(answer)
        if checked > MAX_CHECK_CHARS:
            CHECKS.labels(binding.config, rails, "too_large").inc()
            return Verdict("too_large", reason=f"more than {MAX_CHECK_CHARS} characters to check")
        if answer is not None:  # the answer whole, and as much of the user turn (its end) as fits
            room = MAX_CHECK_CHARS - len(answer)
            user = user[len(user) - room:] if room > 0 else ""
        messages = [{"role": "user", "content": user}]
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
        body = {"model": "", "messages": messages,
                "guardrails": {"config_id": binding.config,
                               "options": {"rails": [rails],
                                           "log": {"activated_rails": True, "internal_events": True}}}}
        base = (self.url_override or binding.url).rstrip("/")
        started = time.monotonic()
        try:
            response = await self.http.post(f"{base}/v1/chat/completions", json=body, timeout=binding.timeout)
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            return self._failed(binding, rails, f"guardrails engine unreachable or slow ({type(exc).__name__})")
        finally:
            LATENCY.labels(rails).observe(time.monotonic() - started)
        if not isinstance(data, Mapping):
            return self._failed(binding, rails, f"guardrails engine answered {response.status_code}")
        log_data = (data.get("guardrails") or {}).get("log") or {}
        stats = log_data.get("stats") or {}
        tokens = (int(stats.get("llm_calls_total_prompt_tokens") or 0),
                  int(stats.get("llm_calls_total_completion_tokens") or 0))
        activated = log_data.get("activated_rails")
        if not isinstance(activated, list):
            return self._failed(binding, rails, "guardrails engine answered without a rails log")
        failed = engine_failure(activated, log_data.get("internal_events"))
        if failed is not None:
            verdict = self._failed(binding, rails, f"the guardrails engine failed to run rail {failed!r} "
                                                   "(an engine error, not a decision)")
            return Verdict(verdict.outcome, reason=verdict.reason, tokens=tokens)
        for rail in activated:
            if isinstance(rail, Mapping) and rail.get("stop"):
                CHECKS.labels(binding.config, rails, "blocked").inc()
                return Verdict("blocked", rail=str(rail.get("name") or ""), tokens=tokens)
        CHECKS.labels(binding.config, rails, "passed").inc()
        return Verdict("passed", tokens=tokens)

    def _failed(self, binding: GuardrailsBinding, rails: str, reason: str) -> Verdict:
        outcome: Outcome = "fail_open" if binding.fail_open else "unavailable"
        CHECKS.labels(binding.config, rails, outcome).inc()
        log.warning("guardrails check failed: config=%s rails=%s outcome=%s reason=%s",
                    binding.config, rails, outcome, reason)
        return Verdict(outcome, reason=reason)


Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# An event ends at a blank line; a line ends at CRLF, LF or CR (the SSE grammar, as clients parse it).
_EVENT_END: Final = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_UNREADABLE_ANSWER: Final = "guardrails apply to this model and cannot read its answer"


def _answer_body_text(raw: bytes) -> str | None:
    """The text of a whole non-stream answer, or None when the rails cannot read all of it. JSON must be of a
    known shape; other UTF-8 bodies are checked as the characters the client gets; anything else is not."""
    try:
        chars = raw.decode()
    except UnicodeDecodeError:
        return None
    try:
        return output_text(_loads(chars))
    except Unreadable:
        return None
    except (ValueError, RecursionError):
        return chars


@dataclass
class OutputGuard:
    """Wraps the ASGI `send` of one guarded answer (see the module docstring)."""

    client: GuardrailsClient
    check: GuardCheck
    send: Send
    stream_chunk_chars: int = 400
    _start: MutableMapping[str, Any] | None = None
    _passthrough: bool = False
    _sse: bool = False
    _encoded: bool = False
    _held: list[bytes] = field(default_factory=list)
    _held_size: int = 0
    _buffer: bytes = b""
    _text: str = ""
    _checked: int = 0
    _blocked: bool = False
    _started: bool = False
    _events: int = 0

    @property
    def blocked(self) -> bool:
        return self._blocked

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self._start = message
            status = int(message.get("status", 200))
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
            self._passthrough = not 200 <= status < 300
            self._sse = "text/event-stream" in headers.get("content-type", "")
            # the gateway asks for identity; a compressed answer cannot be read here, so it is not passed
            self._encoded = headers.get("content-encoding", "identity").strip().lower() not in ("", "identity")
            if self._passthrough:
                await self._send_start()
            return
        if self._passthrough:
            await self.send(message)
            return
        if self._blocked:
            return
        chunk: bytes = message.get("body", b"")
        more = bool(message.get("more_body"))
        if self._encoded:
            await self._unreadable()
        elif self._sse:
            await self._feed_sse(chunk, more)
        else:
            await self._feed_json(chunk, more)

    async def _send_start(self) -> None:
        if not self._started and self._start is not None:
            self._started = True
            await self.send(self._start)

    async def _refuse(self, status: int, body: bytes, header: str | None) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if header:
            headers.append((GUARDRAIL_HEADER.encode(), header.encode("latin-1", "replace")))
        self.check.client_status = status
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    async def _verdict(self, text: str) -> Verdict:
        verdict = await self.client.check(self.check.binding, "output", self.check.prompt, text)
        self.check.add(verdict)
        return verdict

    async def _unreadable(self) -> None:
        """An answer the rails cannot read is blocked like a blocked answer (charged what the model produced),
        whatever the failure policy: FailOpen is about the engine being down, not about unread content."""
        self._blocked = True
        self.check.outcome = "blocked_output"
        CHECKS.labels(self.check.binding.config, "output", "unreadable").inc()
        body = error_body(400, _UNREADABLE_ANSWER, "guardrails_unreadable", "output")
        if self._sse and not self._encoded:  # as a blocked stream ends
            await self._end_stream(json.loads(body)["error"])
        else:
            await self._refuse(400, body, None)

    async def _end_stream(self, err: Mapping[str, Any]) -> None:
        """End a stream with an error event and `[DONE]`, dropping what is held (never checked text)."""
        self.check.client_status = self.check.client_status or 200
        await self._send_start()
        tail = f"data: {json.dumps({'error': err})}\n\ndata: [DONE]\n\n".encode()
        await self.send({"type": "http.response.body", "body": tail, "more_body": False})
        self._held = []

    async def _feed_json(self, chunk: bytes, more: bool) -> None:
        self._held.append(chunk)
        self._held_size += len(chunk)
        if self._held_size > MAX_HELD_BYTES:
            self._blocked = True
            self.check.outcome = "unavailable"
            await self._refuse(502, error_body(502, "the answer is too large for the output guardrails",
                                               "guardrails_answer_too_large"), None)
            return
        if more:
            return
        raw = b"".join(self._held)
        text = _answer_body_text(raw)
        if text is None:
            await self._unreadable()
            return
        verdict = await self._verdict(text)
        if not verdict.allows:
            self._blocked = True
            self.check.outcome = "blocked_output" if verdict.outcome == "blocked" else "unavailable"
            status, body, header = self._replacement(verdict)
            await self._refuse(status, body, header)
            return
        await self._send_start()
        await self.send({"type": "http.response.body", "body": raw})

    def _replacement(self, verdict: Verdict) -> tuple[int, bytes, str | None]:
        """What the client gets instead of an answer the rails did not let through (deny by default)."""
        binding = self.check.binding
        if verdict.outcome == "blocked":
            return 400, error_body(400, blocked_message(binding, verdict.rail, "response"), "guardrail_blocked",
                                   "output"), f"{binding.config}/{verdict.rail}"
        if verdict.outcome == "too_large":
            return 502, error_body(502, f"the answer is longer than the {MAX_CHECK_CHARS} characters the output "
                                        "guardrails check", "guardrails_answer_too_large"), None
        return 503, error_body(503, verdict.reason or "guardrails unavailable", "guardrails_unavailable"), None

    def _take_event(self, event: bytes) -> bool:
        """Hold one event and add its text; False when it cannot be read."""
        self._held.append(event)
        if self._events == 0:
            event = event.removeprefix(b"\xef\xbb\xbf")  # clients drop a leading byte-order mark
        self._events += 1
        text = _event_text(event)
        if text is None:
            return False
        self._text += text
        return True

    async def _feed_sse(self, chunk: bytes, more: bool) -> None:
        self._buffer += chunk
        while (end := _EVENT_END.search(self._buffer)) is not None:
            event, self._buffer = self._buffer[: end.end()], self._buffer[end.end():]
            if not self._take_event(event):
                await self._unreadable()
                return
        if len(self._buffer) > MAX_HELD_BYTES:  # one event this large is no answer the rails can check
            await self._unreadable()
            return
        if not more:
            if self._buffer:
                event, self._buffer = self._buffer, b""
                if not self._take_event(event):
                    await self._unreadable()
                    return
            await self._release(final=True)
        elif len(self._text) - self._checked >= self.stream_chunk_chars > 0:
            await self._release(final=False)

    async def _release(self, *, final: bool) -> None:
        if len(self._text) > self._checked or (final and self._checked == 0):
            verdict = await self._verdict(self._text)
            self._checked = len(self._text)
            if not verdict.allows:
                self._blocked = True
                self.check.outcome = "blocked_output" if verdict.outcome == "blocked" else "unavailable"
                _, body, _ = self._replacement(verdict)
                await self._end_stream(json.loads(body)["error"])
                return
        await self._send_start()
        body = b"".join(self._held)
        self._held = []
        await self.send({"type": "http.response.body", "body": body, "more_body": not final})
