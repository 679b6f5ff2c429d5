"""The test model's Anthropic Messages answers, built from the official `anthropic` package's own response types
and serialised from them, so the test model cannot serve a shape Anthropic's SDK would refuse: translation tests
then prove the data plane against Anthropic's format, not against this module's idea of it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from anthropic import BaseModel
from anthropic.types import (
    ContentBlock,
    InputJSONDelta,
    Message,
    MessageDeltaUsage,
    ModelInfo,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    StopReason,
    TextBlock,
    TextDelta,
    ToolUseBlock,
    Usage,
)
from anthropic.types.raw_message_delta_event import Delta

from maasctl.testmodel.messages import TOOL_INPUT


def model_list(models: tuple[str, ...]) -> dict[str, Any]:
    """Anthropic's `GET /v1/models` page (the SDK's `ModelInfo` items)."""
    data = [ModelInfo(id=m, type="model", display_name=m, lifecycle="active",
                      created_at=datetime(2025, 1, 1, tzinfo=UTC))
            .model_dump(mode="json", exclude_none=True) for m in models]
    return {"data": data, "has_more": False, "first_id": models[0] if models else None,
            "last_id": models[-1] if models else None}


def content(body: Mapping[str, Any], last: str, text: str) -> list[ContentBlock]:
    """A call of the first tool when tools are offered and the user asks about the weather, else `text`."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[0], dict) and "weather" in last.lower():
        name = tools[0].get("name")
        if isinstance(name, str):
            return [ToolUseBlock(type="tool_use", id=f"toolu_{uuid.uuid4().hex[:24]}", name=name,
                                 input=dict(TOOL_INPUT))]
    return [TextBlock(type="text", text=text)]


def usage(prompt: int, cached: int, completion: int) -> Usage:
    """The OpenAI side's numbers in Anthropic's terms: `input_tokens` excludes what the cache served."""
    return Usage(input_tokens=max(0, prompt - cached), cache_read_input_tokens=cached,
                 cache_creation_input_tokens=0, output_tokens=completion)


def _stop_reason(blocks: list[ContentBlock]) -> StopReason:
    return "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


def message(model: str, blocks: list[ContentBlock], spent: Usage) -> dict[str, Any]:
    """A whole (non-streamed) answer, as JSON (`x-testmodel-usage: omit` is the caller's to apply)."""
    return _dump(Message(id=_message_id(), type="message", role="assistant", model=model, content=blocks,
                         stop_reason=_stop_reason(blocks), stop_sequence=None, usage=spent))


def _message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _event(data: dict[str, Any]) -> bytes:
    """One SSE event: Anthropic names each (`event:`), and its SDK dispatches on that name."""
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


async def stream(model: str, blocks: list[ContentBlock], spent: Usage, *,
                 knobs: Mapping[str, str]) -> AsyncIterator[bytes]:
    """Anthropic's event sequence: message_start (the input usage, at most one output token as Anthropic's
    reports), per block a start, deltas (text per word, tool input as one JSON piece) and a stop, then
    message_delta (stop reason, cumulative usage) and message_stop. `x-testmodel-usage: omit` leaves usage out
    of message_start and message_delta; `x-testmodel-stream: cut` breaks off after the last delta."""
    omit = knobs.get("x-testmodel-usage") == "omit"
    early = spent.model_copy(update={"output_tokens": min(1, spent.output_tokens)})
    start = _dump(RawMessageStartEvent(type="message_start", message=Message(
        id=_message_id(), type="message", role="assistant", model=model, content=[], stop_reason=None,
        stop_sequence=None, usage=early)))
    if omit:
        start["message"].pop("usage", None)
    yield _event(start)
    for index, block in enumerate(blocks):
        if isinstance(block, ToolUseBlock):
            opened: ContentBlock = block.model_copy(update={"input": {}})
            deltas: list[TextDelta | InputJSONDelta] = [
                InputJSONDelta(type="input_json_delta", partial_json=json.dumps(block.input))]
        else:
            assert isinstance(block, TextBlock)
            opened = TextBlock(type="text", text="")
            words = block.text.split(" ")
            deltas = [TextDelta(type="text_delta", text=word if i == 0 else " " + word) for i, word in enumerate(words)]
        yield _event(_dump(RawContentBlockStartEvent(type="content_block_start", index=index, content_block=opened)))
        for delta in deltas:
            yield _event(_dump(RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=delta)))
        if index == len(blocks) - 1 and knobs.get("x-testmodel-stream") == "cut":
            raise ConnectionResetError("the model went away mid-stream")
        yield _event(_dump(RawContentBlockStopEvent(type="content_block_stop", index=index)))
    closing = _dump(RawMessageDeltaEvent(
        type="message_delta", delta=Delta(stop_reason=_stop_reason(blocks), stop_sequence=None),
        usage=MessageDeltaUsage(output_tokens=spent.output_tokens, input_tokens=spent.input_tokens,
                                cache_read_input_tokens=spent.cache_read_input_tokens,
                                cache_creation_input_tokens=spent.cache_creation_input_tokens)))
    if omit:
        closing.pop("usage", None)
    yield _event(closing)
    yield _event(_dump(RawMessageStopEvent(type="message_stop")))
