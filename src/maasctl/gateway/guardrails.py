"""Guardrails in the data plane: input rails before a request is forwarded, output rails on the answer.

Which requests: exactly those whose AuthPolicy exported the `guardrails` filter (`contract.guardrails`): the
selected subscription enables guardrails for this model and the global switch is on.

The engine is NVIDIA NeMo Guardrails' server. One check is `POST <url>/v1/chat/completions` with
`guardrails: {config_id, options: {rails: ["input"] | ["output"], log: {activated_rails: true}}}` and
`model: ""` (the configuration's own models decide; the caller never picks the guard model). A rail that
stops the conversation (`activated_rails[].stop`) blocks, and its name is the guardrail named in the error.

- Input: every message's text (all roles, content parts joined) is checked as one user message, so content
  hidden in a system, assistant or earlier message is checked too; `prompt` for completions. A guarded body
  the gateway cannot read (not a JSON object with `messages` or `prompt`) is refused (400), never passed.
- Output (`OutputGuard`, a wrapper around the ASGI `send`): JSON answers are held back, their choices' text
  checked, then sent or replaced by the error. Event streams are checked in chunks: events are held until
  `stream_chunk_chars` new characters arrived (or the stream ended), the text so far is checked, and the held
  events are released; a block ends the stream with an error event and `[DONE]`. Error answers (non-2xx) are
  not checked.
- Blocked: 400 `{"error": {"type": "invalid_request_error", "code": "guardrail_blocked", "message": ...,
  "param": "input"|"output"}}` naming the configuration and the rail; `X-MaaS-Guardrail: <config>/<rail>`.
- Engine down, slow (the settings' timeout) or failing: FailClosed -> 503 `guardrails_unavailable`; FailOpen
  -> the request continues, counted in `maas_gateway_guardrails_checks_total{outcome="fail_open"}` and in the
  usage record (`guardrails: "fail_open"`). A configuration that is missing or not valid (`ready` false) is
  refused with 503 `guardrails_config_unavailable` whatever the policy: it never silently passes.

Metering (see `server.py` and docs/guardrails.md): a request blocked on input never reaches the model and
costs the caller's token quota nothing; a response blocked on output is charged what the model produced.
Guard model calls are never charged to the caller's quota; their tokens (the engine's `stats`) are reported
as a separate usage record with model `guardrails/<config>` and `charged_tokens` 0, for showback/billing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import httpx
from prometheus_client import Counter, Histogram

from maasctl.contract.guardrails import GuardrailsBinding
from maasctl.contract.usage import PreparedBody

__all__ = ["GuardCheck", "GuardrailsClient", "OutputGuard", "Verdict", "input_text"]

log = logging.getLogger("maasctl.gateway.guardrails")

Outcome = Literal["passed", "blocked", "fail_open", "unavailable", "unreadable"]
GUARDRAIL_HEADER: Final = "x-maas-guardrail"
MAX_HELD_BYTES: Final = 8 * 1024 * 1024

CHECKS = Counter("maas_gateway_guardrails_checks_total", "Guardrails checks by configuration, rail type and outcome",
                 ["config", "rails", "outcome"])
LATENCY = Histogram("maas_gateway_guardrails_check_seconds", "Guardrails engine round trip", ["rails"])


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

    def add(self, verdict: Verdict) -> None:
        self.prompt_tokens += verdict.tokens[0]
        self.completion_tokens += verdict.tokens[1]
        if verdict.outcome == "fail_open" and self.outcome == "passed":
            self.outcome = "fail_open"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part.get("text", "") if isinstance(part, Mapping) else part) for part in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def input_text(body: PreparedBody) -> str | None:
    """Everything the caller wrote that the model will read, or None when the body cannot be read."""
    try:
        data = json.loads(body.content)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("messages"), list):
        return "\n\n".join(_text(m.get("content")) if isinstance(m, Mapping) else _text(m)
                           for m in data["messages"])
    if "prompt" in data:
        return _text(data["prompt"])
    if "input" in data:
        return _text(data["input"])
    return None


def output_text(data: Any) -> str:
    """The text of a chat/completions answer (all choices)."""
    if not isinstance(data, Mapping):
        return ""
    parts: list[str] = []
    for choice in data.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        message = choice.get("message") or choice.get("delta") or {}
        if isinstance(message, Mapping):
            parts.append(_text(message.get("content")))
            if message.get("tool_calls"):
                parts.append(json.dumps(message["tool_calls"], ensure_ascii=False))
        if "text" in choice:
            parts.append(_text(choice.get("text")))
    return "".join(parts)


def error_body(status: int, message: str, code: str, param: str | None = None) -> bytes:
    kind = "invalid_request_error" if status == 400 else "api_error"
    return json.dumps({"error": {"message": message, "type": kind, "code": code, "param": param}}).encode()


def blocked_message(binding: GuardrailsBinding, rail: str, where: str) -> str:
    return f"the {where} was blocked by guardrail {rail or 'unknown'!r} (configuration {binding.config!r})"


class GuardrailsClient:
    """Calls the engine; `url_override` replaces the exported engine URL (the local gateway)."""

    def __init__(self, http: httpx.AsyncClient, url_override: str | None = None) -> None:
        self.http = http
        self.url_override = url_override

    async def check(self, binding: GuardrailsBinding, rails: Literal["input", "output"], user: str,
                    answer: str | None = None) -> Verdict:
        if not binding.ready:
            CHECKS.labels(binding.config, rails, "unavailable").inc()
            return Verdict("unavailable", reason=f"guardrail configuration {binding.config!r} is not available")
        messages = [{"role": "user", "content": user}]
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
        body = {"model": "", "messages": messages,
                "guardrails": {"config_id": binding.config,
                               "options": {"rails": [rails], "log": {"activated_rails": True}}}}
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
    _held: list[bytes] = field(default_factory=list)
    _held_size: int = 0
    _buffer: bytes = b""
    _text: str = ""
    _checked: int = 0
    _blocked: bool = False
    _started: bool = False

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
        if self._sse:
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
        try:
            text = output_text(json.loads(raw))
        except (ValueError, UnicodeDecodeError, RecursionError):
            text = raw.decode(errors="replace")
        verdict = await self._verdict(text)
        if verdict.outcome == "blocked":
            self._blocked = True
            self.check.outcome = "blocked_output"
            binding = self.check.binding
            await self._refuse(400, error_body(400, blocked_message(binding, verdict.rail, "response"),
                                               "guardrail_blocked", "output"), f"{binding.config}/{verdict.rail}")
            return
        if verdict.outcome == "unavailable":
            self._blocked = True
            self.check.outcome = "unavailable"
            await self._refuse(503, error_body(503, verdict.reason, "guardrails_unavailable"), None)
            return
        await self._send_start()
        await self.send({"type": "http.response.body", "body": raw})

    async def _feed_sse(self, chunk: bytes, more: bool) -> None:
        self._buffer += chunk
        while True:
            cut = self._buffer.find(b"\n\n")
            if cut < 0:
                break
            event, self._buffer = self._buffer[: cut + 2], self._buffer[cut + 2:]
            self._held.append(event)
            self._text += _event_text(event)
        if not more:
            if self._buffer:
                self._held.append(self._buffer)
                self._text += _event_text(self._buffer)
                self._buffer = b""
            await self._release(final=True)
        elif len(self._text) - self._checked >= self.stream_chunk_chars > 0:
            await self._release(final=False)

    async def _release(self, *, final: bool) -> None:
        if len(self._text) > self._checked or (final and self._checked == 0):
            verdict = await self._verdict(self._text)
            self._checked = len(self._text)
            if verdict.outcome != "passed" and verdict.outcome != "fail_open":
                self._blocked = True
                binding = self.check.binding
                err: dict[str, Any]
                if verdict.outcome == "blocked":
                    self.check.outcome = "blocked_output"
                    err = {"message": blocked_message(binding, verdict.rail, "response"), "type":
                           "invalid_request_error", "code": "guardrail_blocked", "param": "output"}
                else:
                    self.check.outcome = "unavailable"
                    err = {"message": verdict.reason, "type": "api_error", "code": "guardrails_unavailable",
                           "param": None}
                self.check.client_status = self.check.client_status or 200
                await self._send_start()
                tail = f"data: {json.dumps({'error': err})}\n\ndata: [DONE]\n\n".encode()
                await self.send({"type": "http.response.body", "body": tail, "more_body": False})
                self._held = []
                return
        await self._send_start()
        body = b"".join(self._held)
        self._held = []
        await self.send({"type": "http.response.body", "body": body, "more_body": not final})


def _event_text(event: bytes) -> str:
    data = b"".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
    if not data or data.strip() == b"[DONE]":
        return ""
    try:
        return output_text(json.loads(data))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
