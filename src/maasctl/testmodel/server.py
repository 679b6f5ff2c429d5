"""OpenAI-compatible test model: `/v1/models`, `/v1/chat/completions`, `/v1/completions`, streaming,
`/v1/embeddings` (a fixed small vector per input; usage: the prompt tokens only) — and Anthropic's Messages API,
`/v1/messages` (JSON and streams, built from the `anthropic` SDK's own types: see `messages_answers.py`), so the data
plane's OpenAI<->Messages translation meets a provider that speaks Anthropic's format.

Usage numbers are deterministic and configurable, so quota tests know exactly how many tokens each call
costs. The server remembers the headers (and the body's `model`) of recent requests (`GET /debug/requests`) so
tests can prove what reached the backend. It is a test double for a model, never for Kubernetes or a database.

Request headers make it behave like the providers metering must survive (tests only):
`x-testmodel-encoding: gzip|deflate` compresses the answer whatever the request accepted;
`x-testmodel-pad: N` adds N characters to the answer's text (large answers); `x-testmodel-usage: omit`
leaves usage out (JSON and streams); `x-testmodel-stream: cut` ends a stream abruptly, before usage and
`[DONE]`; `x-testmodel-hold: S` holds the request S seconds (at most 60) before answering, after it is listed
in `/debug/requests` (tests that need requests in flight); `x-testmodel-completion: N` reports N completion
tokens, capped by the request's `max_tokens` / `max_completion_tokens` / `max_output_tokens` as a provider
caps its generation (reservation benchmarks: a model that uses the whole bound it was allowed).

The Messages side answers the same text and usage (`input_tokens` = prompt minus cached tokens,
`cache_read_input_tokens` = cached tokens, `output_tokens` = completion tokens) with the same knobs (hold, pad,
usage omit, stream cut, encoding, completion). It requires `max_tokens` (400 otherwise, as Anthropic does),
answers a `tool_use` of the first tool (input `{"city": "Paris"}`) when tools are offered and the user asks
about the weather, and takes `x-testmodel-status: N` (400..599) to answer N with Anthropic's error envelope.
`require_api_key` makes it demand `x-api-key` and `anthropic-version` (401 otherwise); `require_bearer` guards the
OpenAI paths only.

A provider that is down: every request under `/fail/<N>/...` (N 400..599, e.g. an endpoint
`http://model/fail/503/v1`) is answered N with the API's own error envelope (OpenAI's; Anthropic's on
`/messages`) after it is listed in `/debug/requests`: failover tests put a failing provider in front of a
healthy one on the same test model.

Guard model mode (guardrails tests): a chat request whose last message asks a "Yes or No" question (the shape
of NeMo Guardrails' self-check prompts) is answered "Yes" (block) when that message contains one of
`block_words`, else "No" (allow). `replies` maps an exact user message to a fixed answer instead of the echo,
so a test can make the model say something an output rail blocks.

`latency` (seconds) delays every completion before its answer starts, as a real model's generation time
does: load benchmarks use it to keep the gateway's overhead apart from a saturated machine.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import uuid
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from maasctl.testmodel import messages


@dataclass(frozen=True, kw_only=True)
class ModelServerConfig:
    """What the test model serves and what each answer costs."""

    models: tuple[str, ...] = ("test-model",)
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    require_bearer: str | None = None  # when set, OpenAI-side requests must carry exactly this bearer token
    require_api_key: str | None = None  # when set, /v1/messages requests must carry it in x-api-key
    history: int = 500  # requests /debug/requests keeps (numbered by `seq` from 1: a reader sees what it missed)
    block_words: tuple[str, ...] = ()  # guard questions mentioning one of these are answered "Yes"
    replies: tuple[tuple[str, str], ...] = ()  # (user message, fixed answer) instead of the echo
    latency: float = 0.0  # seconds each completion takes before it answers


def _is_guard_question(text: str) -> bool:
    return "yes or no" in text.lower()


def answer_for(cfg: ModelServerConfig, last: str) -> str:
    """The test model's answer to the last message `last` (see the module docstring)."""
    if _is_guard_question(last):
        return "Yes" if any(word in last for word in cfg.block_words) else "No"
    for prompt, reply in cfg.replies:
        if last == prompt:
            return reply
    return f"echo: {last}"


@dataclass
class _State:
    seen: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=100))
    received: int = 0  # requests logged so far: each entry's `seq`, so a reader tells "nothing new" from a full log
    prompts: deque[str] = field(default_factory=lambda: deque(maxlen=1000))  # last messages answered


def _usage(cfg: ModelServerConfig, completion: int | None = None) -> dict[str, Any]:
    out = cfg.completion_tokens if completion is None else completion
    return {
        "prompt_tokens": cfg.prompt_tokens,
        "completion_tokens": out,
        "total_tokens": cfg.prompt_tokens + out,
        "prompt_tokens_details": {"cached_tokens": cfg.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": cfg.reasoning_tokens},
    }


def _failing(path: str) -> int | None:
    """`/fail/<N>/...`: the status a test wants this path answered with (400..599), else None."""
    parts = path.split("/")
    if len(parts) > 3 and parts[1] == "fail" and parts[2].isdigit() and 400 <= int(parts[2]) <= 599:
        return int(parts[2])
    return None


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}}, status)


def create_app(cfg: ModelServerConfig | None = None) -> FastAPI:
    cfg = cfg or ModelServerConfig()
    if cfg.require_api_key is not None:  # it stands in for an Anthropic provider: no first request pays the import
        from maasctl.testmodel import messages_answers  # noqa: F401
    state = _State(seen=deque(maxlen=cfg.history))
    app = FastAPI(title="maasctl test model", docs_url=None, redoc_url=None)

    @app.middleware("http")
    async def remember(request: Request, call_next: Any) -> Any:
        if not request.url.path.startswith(("/debug", "/health")):
            state.received += 1
            entry: dict[str, Any] = {"seq": state.received, "path": request.url.path,
                                     "headers": dict(request.headers)}
            request.state.seen = entry  # the handler adds the body's model name
            state.seen.append(entry)
            failing = _failing(request.url.path)
            if failing is not None:  # a provider that is down, whoever asks
                if request.url.path.endswith("/messages"):
                    return messages.error(failing, "the test model was told to fail")
                return _error(failing, "the test model was told to fail", "testmodel_fail")
            if messages.is_anthropic_side(request.url.path, request.headers):  # x-api-key, never Bearer
                denied = messages.credentials_error(request.headers, cfg.require_api_key)
                if denied is not None:
                    return denied
            elif cfg.require_bearer and request.headers.get("authorization") != f"Bearer {cfg.require_bearer}":
                return _error(401, "missing or wrong upstream credentials", "invalid_api_key")
        return await call_next(request)

    @app.get("/debug/requests")
    async def debug_requests() -> list[dict[str, Any]]:
        return list(state.seen)

    @app.get("/debug/prompts")
    async def debug_prompts() -> list[str]:
        """The last message of recent chat requests (tests prove what reached the model)."""
        return list(state.prompts)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        if messages.is_anthropic_side(request.url.path, request.headers):  # Anthropic's list of models
            from maasctl.testmodel import messages_answers as answers

            return answers.model_list(cfg.models)
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "maasctl-test"} for m in cfg.models],
        }

    async def _body(request: Request, error: Callable[[int, str, str], JSONResponse] = _error,
                    check: Callable[[dict[str, Any]], JSONResponse | None] | None = None,
                    ) -> dict[str, Any] | JSONResponse:
        """The request's JSON, once its model is served here; refusals in the API's own envelope (`error`),
        `check` the API's own validation (it runs before the model is looked up, as a provider's does)."""
        try:
            body = json.loads(await request.body())
        except json.JSONDecodeError:
            return error(400, "request body is not JSON", "invalid_json")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object", "invalid_json")
        model = body.get("model")
        seen = getattr(request.state, "seen", None)
        if isinstance(seen, dict):
            seen["model"] = model
        refused = check(body) if check is not None else None
        if refused is not None:
            return refused
        if model not in cfg.models:
            return error(404, f"model {model!r} is not served here", "model_not_found")
        if cfg.latency > 0:
            await asyncio.sleep(cfg.latency)
        hold = _hold(request)
        if hold > 0:
            await asyncio.sleep(hold)
        return body

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        messages = body.get("messages") or []
        last = messages[-1].get("content", "") if messages and isinstance(messages[-1], dict) else ""
        state.prompts.append(str(last))
        text = answer_for(cfg, str(last)) + "x" * _pad(request)
        if body.get("stream"):
            return StreamingResponse(_stream(cfg, body, text, chat=True, knobs=request.headers),
                                     media_type="text/event-stream")
        return _answer(request, _completion(cfg, body["model"], text, chat=True,
                                            completion=_generated(body, request.headers)))

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        text = answer_for(cfg, str(body.get("prompt", ""))) + "x" * _pad(request)
        if body.get("stream"):
            return StreamingResponse(_stream(cfg, body, text, chat=False, knobs=request.headers),
                                     media_type="text/event-stream")
        return _answer(request, _completion(cfg, body["model"], text, chat=False,
                                            completion=_generated(body, request.headers)))

    @app.post(messages.PATH, response_model=None)
    async def anthropic_messages(request: Request) -> Response:
        body = await _body(request, messages.error, messages.invalid)
        if isinstance(body, JSONResponse):
            return body
        status = messages.forced_status(request.headers)
        if status is not None:
            return messages.error(status, f"x-testmodel-status asked for {status}")
        from maasctl.testmodel import messages_answers as answers  # the SDK's types: first Anthropic request only

        last = messages.last_user_text(body)
        state.prompts.append(last)
        blocks = answers.content(body, last, answer_for(cfg, last) + "x" * _pad(request))
        generated = _generated(body, request.headers)
        spent = answers.usage(cfg.prompt_tokens, cfg.cached_tokens,
                              cfg.completion_tokens if generated is None else generated)
        if body.get("stream"):
            return StreamingResponse(answers.stream(body["model"], blocks, spent, knobs=request.headers),
                                     media_type="text/event-stream")
        return _answer(request, answers.message(body["model"], blocks, spent))

    @app.post("/v1/embeddings", response_model=None)
    async def embeddings(request: Request) -> Response:
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return body
        given = body.get("input", "")
        inputs = given if isinstance(given, list) else [given]
        data = [{"object": "embedding", "index": i, "embedding": _vector(str(text))} for i, text in enumerate(inputs)]
        usage = {"prompt_tokens": cfg.prompt_tokens, "total_tokens": cfg.prompt_tokens}
        return _answer(request, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    return app


def _vector(text: str) -> list[float]:
    """A deterministic 8-dimensional embedding of `text` (tests compare, nothing means anything)."""
    digest = zlib.crc32(text.encode())
    return [((digest >> shift) & 0xFF) / 255 for shift in range(0, 32, 4)]


def _generated(body: dict[str, Any], knobs: Any) -> int | None:
    """`x-testmodel-completion`, capped by the request's stated bound (None: the configured count)."""
    try:
        wanted = max(0, int(knobs.get("x-testmodel-completion", "")))
    except (TypeError, ValueError):
        return None
    bounds = [v for f in ("max_tokens", "max_completion_tokens", "max_output_tokens")
              if isinstance(v := body.get(f), int) and not isinstance(v, bool) and v > 0]
    return min([wanted, *bounds])


def _hold(request: Request) -> float:
    try:
        return max(0.0, min(float(request.headers.get("x-testmodel-hold", "0")), 60.0))
    except ValueError:
        return 0.0


def _pad(request: Request) -> int:
    try:
        return max(0, min(int(request.headers.get("x-testmodel-pad", "0")), 64 * 1024 * 1024))
    except ValueError:
        return 0


def _answer(request: Request, payload: dict[str, Any]) -> Response:
    if request.headers.get("x-testmodel-usage") == "omit":
        payload.pop("usage", None)
    data = json.dumps(payload).encode()
    encoding = request.headers.get("x-testmodel-encoding", "")
    if encoding == "gzip":
        return Response(gzip.compress(data), media_type="application/json", headers={"content-encoding": "gzip"})
    if encoding == "deflate":
        return Response(zlib.compress(data), media_type="application/json", headers={"content-encoding": "deflate"})
    return Response(data, media_type="application/json")


def _completion(cfg: ModelServerConfig, model: str, text: str, *, chat: bool,
                completion: int | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(cfg, completion),
    }


async def _stream(cfg: ModelServerConfig, body: dict[str, Any], text: str, *, chat: bool,
                  knobs: Any = None) -> AsyncIterator[bytes]:
    """SSE chunks, one per word; a final usage chunk only when `stream_options.include_usage` is set."""
    knobs = knobs or {}
    model = body["model"]
    base = {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()), "model": model,
            "object": "chat.completion.chunk" if chat else "text_completion"}
    words = text.split(" ")
    for i, word in enumerate(words):
        piece = word if i == 0 else " " + word
        delta: dict[str, Any] = {"index": 0, "finish_reason": "stop" if i == len(words) - 1 else None}
        if chat:
            delta["delta"] = {"content": piece}
        else:
            delta["text"] = piece
        yield f"data: {json.dumps({**base, 'choices': [delta]})}\n\n".encode()
    if knobs.get("x-testmodel-stream") == "cut":
        raise ConnectionResetError("the model went away mid-stream")
    options = body.get("stream_options") or {}
    if isinstance(options, dict) and options.get("include_usage") and knobs.get("x-testmodel-usage") != "omit":
        usage = _usage(cfg, _generated(body, knobs))
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
    yield b"data: [DONE]\n\n"
