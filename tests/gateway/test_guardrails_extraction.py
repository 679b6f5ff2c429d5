"""What the guardrails read (pure, no engine): every request shape the model reads is read or refused, every
answer shape the client gets is read or blocked (`gateway/guardrails.py`, docs/guardrails.md "What is checked").

The engine is a fake that blocks any text containing FORBIDDEN and records what it was asked.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any, Literal

import pytest

from maasctl.contract.guardrails import GuardrailsBinding
from maasctl.dataplane.body import prepare_body
from maasctl.gateway.guardrails import GuardCheck, OutputGuard, Verdict, guarded_endpoint, input_text

SECRET = "FORBIDDEN"


class FakeEngine:
    """Blocks a check whose text contains SECRET; `calls` are the texts it read."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def check(self, binding: GuardrailsBinding, rails: Literal["input", "output"], user: str,
                    answer: str | None = None) -> Verdict:
        text = answer if rails == "output" else user
        self.calls.append(text or "")
        return Verdict("blocked", rail="self check output") if SECRET in (text or "") else Verdict("passed")


class Answer:
    """What the client received through an OutputGuard."""

    def __init__(self, statuses: list[int], body: bytes, guard: GuardCheck, engine: FakeEngine) -> None:
        self.statuses, self.body, self.guard, self.engine = statuses, body, guard, engine

    @property
    def leaked(self) -> bool:
        return SECRET.encode() in self.body

    @property
    def code(self) -> str | None:
        """The error code of a refused answer or of a stream's error event."""
        for line in self.body.split(b"\n"):
            payload = line[6:] if line.startswith(b"data: ") else line
            try:
                error = json.loads(payload).get("error")
            except (ValueError, AttributeError):
                continue
            if isinstance(error, dict):
                return str(error.get("code"))
        return None


def guard_answer(chunks: list[bytes], content_type: str, *, fail_open: bool = False,
                 headers: list[tuple[bytes, bytes]] = (), chunk_chars: int = 400) -> Answer:
    """Run an upstream answer (status 200, these body chunks) through an OutputGuard."""
    engine = FakeEngine()
    check = GuardCheck(GuardrailsBinding("safety", True, "http://engine", fail_open, 5), prompt="hi")
    out: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        out.append(dict(message))

    async def run() -> None:
        guard = OutputGuard(engine, check, send, chunk_chars)  # type: ignore[arg-type]
        await guard({"type": "http.response.start", "status": 200,
                     "headers": [(b"content-type", content_type.encode()), *headers]})
        for i, chunk in enumerate(chunks):
            await guard({"type": "http.response.body", "body": chunk, "more_body": i < len(chunks) - 1})

    asyncio.run(run())
    statuses = [int(m["status"]) for m in out if m["type"] == "http.response.start"]
    body = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
    return Answer(statuses, body, check, engine)


def json_answer(data: Any, **kw: Any) -> Answer:
    return guard_answer([json.dumps(data).encode()], "application/json", **kw)


def sse(*events: Any, sep: bytes = b"\n\n", name: str | None = None) -> list[bytes]:
    """Events as separate chunks, then `[DONE]`."""
    head = f"event: {name}\n".encode() if name else b""
    return [head + b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + sep for e in events] + [
        b"data: [DONE]" + sep]


def stream_answer(events: list[bytes], **kw: Any) -> Answer:
    return guard_answer(events, "text/event-stream", **kw)


def chat(content: str, **message: Any) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant",
                                                                              "content": content, **message}}]}


def chunk(**delta: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def responses(text: str) -> dict[str, Any]:
    return {"object": "response", "output": [{"type": "message", "role": "assistant", "id": "m1", "content": [
        {"type": "output_text", "text": text, "annotations": []}]}]}


def anthropic(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": list(blocks)}


def text_of(body: dict[str, Any], path: str | None = None) -> str | None:
    prepared = prepare_body(json.dumps(body).encode())
    return input_text(prepared) if path is None else input_text(prepared, path)


def user(content: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


# --- answers -------------------------------------------------------------------------------------------


class TestOrdinaryAnswersUnchanged:
    def test_chat_json_passes_as_sent(self) -> None:
        data = chat("hello there")
        answer = json_answer(data)
        assert answer.statuses == [200] and json.loads(answer.body) == data
        assert answer.engine.calls == ["hello there"]

    def test_chat_json_with_the_secret_is_blocked(self) -> None:
        answer = json_answer(chat(f"the code is {SECRET}"))
        assert answer.statuses == [400] and answer.code == "guardrail_blocked" and not answer.leaked
        assert answer.guard.outcome == "blocked_output"

    def test_chat_stream_passes_as_sent(self) -> None:
        events = sse(chunk(role="assistant", content=""), chunk(content="hel"), chunk(content="lo"),
                     {"object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 3}})
        answer = stream_answer(events)
        assert answer.statuses == [200] and answer.body == b"".join(events)
        assert answer.engine.calls == ["hello"]

    def test_chat_stream_with_the_secret_split_over_chunks_is_blocked(self) -> None:
        answer = stream_answer(sse(chunk(content="FORB"), chunk(content="IDDEN")))
        assert answer.code == "guardrail_blocked" and b"IDDEN" not in answer.body

    def test_completions_text_and_tool_calls_are_read(self) -> None:
        assert json_answer({"choices": [{"text": SECRET}]}).code == "guardrail_blocked"
        calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": f'{{"x": "{SECRET}"}}'}}]
        assert json_answer(chat("", tool_calls=calls)).code == "guardrail_blocked"

    def test_empty_and_plain_text_answers_are_checked_as_text(self) -> None:
        assert guard_answer([b""], "application/json").statuses == [200]
        assert guard_answer([SECRET.encode()], "text/plain").code == "guardrail_blocked"


class TestResponsesAnswers:
    def test_json_output_items_are_read(self) -> None:
        blocked = json_answer(responses(f"the code is {SECRET}"))
        assert blocked.statuses == [400] and blocked.code == "guardrail_blocked" and not blocked.leaked
        passed = json_answer(responses("nothing to see"))
        assert passed.statuses == [200] and passed.engine.calls == ["nothing to see"]

    def test_refusal_reasoning_and_function_call_items_are_read(self) -> None:
        for item in ({"type": "message", "content": [{"type": "refusal", "refusal": SECRET}]},
                     {"type": "reasoning", "summary": [{"type": "summary_text", "text": SECRET}]},
                     {"type": "function_call", "name": "f", "arguments": SECRET, "call_id": "c"}):
            assert json_answer({"object": "response", "output": [item]}).code == "guardrail_blocked", item

    def test_stream_output_text_deltas_are_read(self) -> None:
        name = "response.output_text.delta"
        events = sse({"type": name, "delta": "FORB", "item_id": "m", "output_index": 0, "content_index": 0},
                     {"type": name, "delta": "IDDEN", "item_id": "m", "output_index": 0, "content_index": 0},
                     name=name)
        answer = stream_answer(events)
        assert answer.code == "guardrail_blocked" and not answer.leaked

    def test_stream_passes_clean_text(self) -> None:
        events = sse({"type": "response.created", "response": {"object": "response", "output": []}},
                     {"type": "response.output_text.delta", "delta": "fine", "sequence_number": 1},
                     {"type": "response.completed", "response": responses("fine")})
        answer = stream_answer(events)
        assert answer.statuses == [200] and answer.body == b"".join(events) and answer.code is None

    def test_other_text_events_are_read(self) -> None:
        for event in ({"type": "response.refusal.delta", "delta": SECRET},
                      {"type": "response.function_call_arguments.delta", "delta": SECRET},
                      {"type": "response.reasoning_summary_text.delta", "delta": SECRET},
                      {"type": "response.output_item.done", "item": responses(SECRET)["output"][0]},
                      {"type": "response.completed", "response": responses(SECRET)}):
            answer = stream_answer(sse(event))
            assert answer.code == "guardrail_blocked" and not answer.leaked, event

    def test_an_event_with_unknown_content_is_unreadable(self) -> None:
        event = {"type": "response.image_generation_call.partial_image", "partial_image_b64": "aGk="}
        answer = stream_answer(sse(event))
        assert answer.code == "guardrails_unreadable" and b"aGk=" not in answer.body
        assert answer.engine.calls == []


class TestReasoningAnswers:
    @pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "refusal"])
    def test_stream_delta_fields_are_read(self, field: str) -> None:
        answer = stream_answer(sse(chunk(**{field: f"the code is {SECRET}"}), chunk(content="ok")))
        assert answer.code == "guardrail_blocked" and not answer.leaked

    def test_json_reasoning_content_is_read(self) -> None:
        assert json_answer(chat("fine", reasoning_content=SECRET)).code == "guardrail_blocked"

    def test_clean_reasoning_passes(self) -> None:
        answer = stream_answer(sse(chunk(reasoning_content="think"), chunk(content="done")))
        assert answer.statuses == [200] and answer.code is None and answer.engine.calls == ["thinkdone"]


class TestAnthropicAnswers:
    def test_json_content_blocks_are_read(self) -> None:
        assert json_answer(anthropic({"type": "text", "text": SECRET})).code == "guardrail_blocked"
        assert json_answer(anthropic({"type": "thinking", "thinking": SECRET, "signature": "s"})).code == \
            "guardrail_blocked"
        assert json_answer(anthropic({"type": "tool_use", "id": "t", "name": "f", "input": {"x": SECRET}})).code \
            == "guardrail_blocked"
        passed = json_answer(anthropic({"type": "text", "text": "fine"}))
        assert passed.statuses == [200] and passed.engine.calls == ["fine"]

    def test_stream_deltas_are_read(self) -> None:
        for delta in ({"type": "text_delta", "text": SECRET}, {"type": "thinking_delta", "thinking": SECRET},
                      {"type": "input_json_delta", "partial_json": SECRET}):
            events = sse({"type": "message_start", "message": anthropic()},
                         {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                         {"type": "content_block_delta", "index": 0, "delta": delta},
                         {"type": "message_stop"})
            answer = stream_answer(events)
            assert answer.code == "guardrail_blocked" and not answer.leaked, delta

    def test_an_unknown_delta_is_unreadable(self) -> None:
        answer = stream_answer(sse({"type": "content_block_delta", "delta": {"type": "new_delta", "x": SECRET}}))
        assert answer.code == "guardrails_unreadable" and not answer.leaked


class TestUnreadableAnswersAreBlocked:
    @pytest.mark.parametrize("data", [{"result": SECRET}, {"result": "harmless"}, [SECRET], "plain",
                                      {"choices": [{"message": {"content": [{"type": "image", "data": "x"}]}}]},
                                      {"choices": [{"message": {"audio": {"data": "UklGR", "transcript": ""}}}]}])
    def test_unknown_json_shapes_are_refused_without_asking_the_engine(self, data: Any) -> None:
        answer = json_answer(data)
        assert answer.statuses == [400] and answer.code == "guardrails_unreadable" and not answer.leaked
        assert answer.engine.calls == []
        assert answer.guard.outcome == "blocked_output" and answer.guard.client_status == 400

    def test_fail_open_does_not_pass_unreadable_answers(self) -> None:
        answer = json_answer({"result": SECRET}, fail_open=True)
        assert answer.statuses == [400] and answer.code == "guardrails_unreadable" and not answer.leaked

    def test_duplicate_keys_are_refused(self) -> None:
        raw = b'{"choices": [{"message": {"content": "FORBIDDEN"}}], "choices": []}'
        answer = guard_answer([raw], "application/json")
        assert answer.code == "guardrails_unreadable" and not answer.leaked

    def test_binary_and_compressed_answers_are_refused(self) -> None:
        assert guard_answer([b"\xff\xfe\x00binary"], "application/octet-stream").code == "guardrails_unreadable"
        packed = gzip.compress(json.dumps(chat(SECRET)).encode())
        answer = guard_answer([packed], "application/json", headers=[(b"content-encoding", b"gzip")])
        assert answer.statuses == [400] and answer.code == "guardrails_unreadable" and packed not in answer.body
        events = b"".join(sse(chunk(content=SECRET)))
        streamed = guard_answer([gzip.compress(events)], "text/event-stream",
                                headers=[(b"content-encoding", b"gzip")])
        assert streamed.statuses == [400] and streamed.code == "guardrails_unreadable"

    def test_unknown_stream_events_end_the_stream(self) -> None:
        for event in ({"text_out": SECRET}, {"type": "mystery", "content": SECRET}, [SECRET], b"\xff" + b"x"):
            answer = stream_answer(sse(chunk(content="ok"), event), chunk_chars=1)
            assert answer.code == "guardrails_unreadable" and not answer.leaked, event
            assert answer.body.endswith(b"data: [DONE]\n\n")

    @pytest.mark.parametrize("sep", [b"\r\n\r\n", b"\r\r", b"\n\r\n"])
    def test_other_line_endings_are_read(self, sep: bytes) -> None:
        answer = stream_answer(sse(chunk(content="the code is "), chunk(content=SECRET), sep=sep))
        assert answer.code == "guardrail_blocked" and not answer.leaked

    def test_a_leading_byte_order_mark_does_not_hide_an_event(self) -> None:
        events = sse(chunk(content=SECRET))
        answer = stream_answer([b"\xef\xbb\xbf" + events[0], *events[1:]])
        assert answer.code == "guardrail_blocked" and not answer.leaked

    def test_non_json_event_data_is_checked_as_text(self) -> None:
        assert stream_answer(sse(SECRET.encode())).code == "guardrail_blocked"
        assert stream_answer(sse(b"just words")).statuses == [200]

    def test_embeddings_carry_no_text(self) -> None:
        data = {"object": "list", "data": [{"object": "embedding", "embedding": [0.1, 0.2], "index": 0}],
                "model": "m", "usage": {"prompt_tokens": 2, "total_tokens": 2}}
        assert json_answer(data).statuses == [200]


# --- requests ------------------------------------------------------------------------------------------


class TestOrdinaryRequestsUnchanged:
    def test_chat_messages_read_as_before(self) -> None:
        body = {"model": "m", "messages": [{"role": "system", "content": "be nice"},
                                           {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                        {"type": "text", "text": "b"}]},
                                           {"role": "assistant", "content": None}], "stream": True}
        assert text_of(body) == "be nice\n\na\nb\n\n"

    def test_completions_prompt_read_as_before(self) -> None:
        assert text_of({"model": "m", "prompt": "once upon", "max_tokens": 5}) == "once upon"

    def test_flags_in_chat_template_kwargs_are_allowed(self) -> None:
        assert text_of({**user("hi"), "chat_template_kwargs": {"enable_thinking": False}}) == "hi"

    def test_usual_endpoints_are_guarded(self) -> None:
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
                     "/openai/v1/chat/completions/"):
            assert guarded_endpoint(path), path
        assert text_of(user("hi"), "/v1/chat/completions") == "hi"


class TestRequestShapesAreRead:
    @pytest.mark.parametrize("body", [
        {"model": "m", "input": [{"role": "user", "content": SECRET}]},
        {"model": "m", "input": [{"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": SECRET}]}]},
        {"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": SECRET}]},
        {"model": "m", "input": ["a", SECRET]},
        {"model": "m", "instructions": f"say {SECRET}", "input": "hi"},
        {"model": "m", "system": f"say {SECRET}", "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "system": [{"type": "text", "text": SECRET}], "messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "messages": [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": f'{{"x":"{SECRET}"}}'}}]},
            {"role": "user", "content": "repeat the argument"}]},
        {"model": "m", "messages": [{"role": "assistant", "content": "ok", "reasoning_content": SECRET}]},
        {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": SECRET}]}]}]},
        {"model": "m", "prompt": ["a", SECRET]},
        {"model": "m", "prompt": "def f():", "suffix": SECRET},
        {**user("hi"), "tools": [{"type": "function", "function": {"name": "f", "description": SECRET}}]},
        {**user("hi"), "documents": [{"title": "t", "text": SECRET}]},
    ])
    def test_the_text_is_checked(self, body: dict[str, Any]) -> None:
        text = text_of(body)
        assert text is not None and SECRET in text


class TestUnreadableRequestsAreRefused:
    @pytest.mark.parametrize("body", [
        {"model": "m", "messages": [], "prompt": SECRET},
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "input": SECRET},
        {"model": "m", "prompt": "hi", "input": SECRET},
        {"model": "m", "prompt": [[70, 1365, 33]]},
        {"model": "m", "prompt": [70, 1365, 33]},
        {"model": "m", "input": [[70, 1365, 33]]},
        {"model": "m", "prompt": {"id": "pmpt_1", "variables": {"x": SECRET}}},
        {"model": "m", "messages": "hi"},
        {"model": "m", "messages": ["hi"]},
        {"model": "m"},
        {**user("hi"), "chat_template": "{{ 'FORBIDDEN' }} {{ messages }}"},
        {**user("hi"), "chat_template_kwargs": {"extra": SECRET}},
        {**user("hi"), "chat_template_kwargs": {"tools": [{"name": "x"}]}},
        {"model": "m", "prompt": "hi", "prompt_embeds": "AAAA"},
        {"model": "m", "input": "hi", "previous_response_id": "resp_1"},
        {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
        {"model": "m", "input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]},
        user([{"type": "input_text", "text": "ok"},
              {"type": "file", "file": {"file_data": "data:text/plain;base64,Rk9SQklEREVO"}}]),
        user([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]),
        user([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]),
        user([{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]),
        user({"text": SECRET}),
    ])
    def test_refused(self, body: dict[str, Any]) -> None:
        assert text_of(body) is None

    def test_non_json_bodies_are_refused(self) -> None:
        assert input_text(prepare_body(b"not json", content_type="text/plain")) is None
        assert input_text(prepare_body(b"")) is None

    @pytest.mark.parametrize("path", ["/v1/audio/speech", "/v1/images/generations", "/tokenize", "/v1/rerank",
                                      "/v1/messages/count_tokens", "/v1/models"])
    def test_other_endpoints_are_refused(self, path: str) -> None:
        assert not guarded_endpoint(path)
        assert text_of(user("hi"), path) is None
