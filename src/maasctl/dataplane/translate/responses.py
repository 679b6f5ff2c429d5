"""Whole (non-streamed) answers from one format into the other: a Messages `message` as a `chat.completion`,
and a `chat.completion` as a Messages `message`. Provider answers are read defensively: a 2xx body that is not
the claimed format raises `MalformedAnswer` (the caller answers 502), never a crash."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from maasctl.dataplane.translate.common import (
    CHAT_FINISH_TO_STOP,
    STOP_TO_CHAT_FINISH,
    MalformedAnswer,
    chat_usage_to_messages,
    dumps,
    messages_usage_to_chat,
    reports_usage,
)

__all__ = ["chat_response_to_messages", "messages_response_to_chat"]


def messages_response_to_chat(message: Mapping[str, Any], *, created: int) -> dict[str, Any]:
    """A Messages answer as a Chat Completions answer with one choice. `created` (Unix seconds) is the
    caller's clock: Messages answers carry no time. Thinking blocks are not shown (Chat has no field for them;
    their tokens stay in the usage as reasoning)."""
    if not isinstance(message, Mapping) or message.get("type") != "message":
        raise MalformedAnswer("the provider's answer is no Messages `message`")
    content = message.get("content")
    if not isinstance(content, list):
        raise MalformedAnswer("the provider's message has no content array")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, Mapping):
            raise MalformedAnswer("a content block is no object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": str(block.get("id", "")), "type": "function",
                          "function": {"name": str(block.get("name", "")),
                                       "arguments": dumps(block.get("input") or {})}})
    stop = message.get("stop_reason")
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                             "refusal": None}
    if calls:
        reply["tool_calls"] = calls
    answer: dict[str, Any] = {
        "id": str(message.get("id", "")), "object": "chat.completion", "created": created,
        "model": str(message.get("model", "")),
        "choices": [{"index": 0, "message": reply, "logprobs": None,
                     "finish_reason": STOP_TO_CHAT_FINISH.get(stop, "stop") if isinstance(stop, str) else "stop"}]}
    if reports_usage(message.get("usage")):  # else no usage: the data plane charges its estimate, never 0
        answer["usage"] = messages_usage_to_chat(message.get("usage"))
    return answer


def chat_response_to_messages(completion: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions answer as a Messages answer (its first choice: the `/v1/messages` door refuses `n`).
    A refusal is a text block with `stop_reason: refusal`; tool-call arguments that are not a JSON object (a
    model's broken JSON) reach the client as `{"arguments": "<the text>"}`, never dropped."""
    if not isinstance(completion, Mapping) or not isinstance(completion.get("choices"), list):
        raise MalformedAnswer("the provider's answer is no chat.completion")
    choices = completion["choices"]
    choice: Mapping[str, Any] = choices[0] if choices and isinstance(choices[0], Mapping) else {}
    message = choice.get("message")
    reply: Mapping[str, Any] = message if isinstance(message, Mapping) else {}
    blocks: list[dict[str, Any]] = []
    if isinstance(reply.get("content"), str) and reply["content"]:
        blocks.append({"type": "text", "text": reply["content"]})
    refused = isinstance(reply.get("refusal"), str) and bool(reply["refusal"])
    if refused:
        blocks.append({"type": "text", "text": reply["refusal"]})
    calls = reply.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            blocks.append({"type": "tool_use", "id": str(call.get("id", "")), "name": str(function.get("name", "")),
                           "input": tool_input(function.get("arguments"))})
    finish = choice.get("finish_reason")
    stop = "refusal" if refused else CHAT_FINISH_TO_STOP.get(finish, "end_turn") if isinstance(finish, str) \
        else "end_turn"
    return {"id": str(completion.get("id", "")), "type": "message", "role": "assistant",
            "model": str(completion.get("model", "")), "content": blocks, "stop_reason": stop,
            "stop_sequence": None, "usage": chat_usage_to_messages(completion.get("usage"))}


def tool_input(arguments: Any) -> dict[str, Any]:
    """Chat tool-call arguments (a JSON text) as a Messages tool input (an object)."""
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}
