"""Request bodies from one format into the other: OpenAI Chat Completions -> Anthropic Messages (an OpenAI client
on a `messages` provider) and Messages -> Chat (the `/v1/messages` door onto an OpenAI-format model).

Every top-level parameter is either mapped, dropped (a hint the provider's format documents no counterpart for
and whose absence leaves the answer's shape intact, or a neutral value such as `n: 1`), or refused with a
`TranslationError` naming it: `DROPPED_CHAT`, `DROPPED_MESSAGES` and docs/providers.md list them. Unknown
parameters are refused too: a parameter the data plane does not know cannot be promised to reach the model.
Input is a parsed client body of any shape: wrong types are refused (400), never a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from maasctl.dataplane.translate.common import TranslationError, Untranslatable, dumps

__all__ = ["DROPPED_CHAT", "DROPPED_MESSAGES", "chat_request_to_messages", "messages_request_to_chat"]

_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DATA_URL: Final = re.compile(r"data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)
_TRUE_TEXT: Final = frozenset({"true", "1", "yes", "on"})
_EFFORTS: Final = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}

# Chat parameters dropped when sent: a hint without a Messages counterpart, or only at a neutral value.
DROPPED_CHAT: Final[Mapping[str, Callable[[Any], bool]]] = {
    "metadata": lambda v: True,  # stored-completion tags: only meaningful with OpenAI's `store`
    "store": lambda v: True,
    "service_tier": lambda v: True,
    "seed": lambda v: True,  # OpenAI documents determinism as best effort
    "prediction": lambda v: True,  # a latency optimisation; the answer is the same without it
    "prompt_cache_key": lambda v: True,
    "prompt_cache_retention": lambda v: True,
    "prompt_cache_options": lambda v: True,
    "safety_identifier": lambda v: True,
    "verbosity": lambda v: True,
    "stream_options": lambda v: True,  # consumed: the stream translator emits the usage chunk
    "n": lambda v: v == 1,
    "logprobs": lambda v: v is False,
    "top_logprobs": lambda v: v == 0,
    "presence_penalty": lambda v: v == 0,
    "frequency_penalty": lambda v: v == 0,
    "logit_bias": lambda v: v == {},
    "modalities": lambda v: v == ["text"],
    "response_format": lambda v: isinstance(v, Mapping) and v.get("type") == "text",
    "reasoning_effort": lambda v: v == "none",
}
_CHAT_MAPPED: Final = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "stop", "stream",
    "tools", "tool_choice", "parallel_tool_calls", "user", "reasoning_effort", "response_format"})

# Messages parameters dropped when sent (all optional hints in Anthropic's documentation).
DROPPED_MESSAGES: Final[frozenset[str]] = frozenset({
    "thinking",  # the OpenAI-format model reasons by its own configuration; no thinking blocks come back
    "service_tier", "speed", "inference_geo", "cache_control", "diagnostics"})
_MESSAGES_MAPPED: Final = frozenset({
    "model", "max_tokens", "messages", "system", "stop_sequences", "stream", "tools", "tool_choice", "metadata",
    "output_config", "temperature", "top_p", "top_k"})


def _check_parameters(body: Mapping[str, Any], mapped: frozenset[str], dropped: Callable[[str, Any], bool],
                      provider: str) -> None:
    """Refuse the first parameter that is neither mapped nor droppable (a null is an absent parameter)."""
    for name, value in body.items():
        if value is None or name in mapped or dropped(name, value):
            continue
        raise Untranslatable(name, f"has no counterpart in the {provider} API (docs/providers.md)")


def _truthy(value: Any) -> bool:
    """`stream` read as the data plane reads it (`dataplane.body`: true, 1, "true", "yes", ...)."""
    if isinstance(value, bool | int | float):
        return bool(value)
    return isinstance(value, str) and value.strip().lower() in _TRUE_TEXT


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise TranslationError(param, "must be a string")
    return value


def _number(value: Any, param: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TranslationError(param, "must be a number")
    return value


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise TranslationError(param, "must be an array")
    return value


def _object(value: Any, param: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TranslationError(param, "must be an object")
    return value


# --- OpenAI Chat -> Anthropic Messages -------------------------------------------------------------------


def chat_request_to_messages(body: Mapping[str, Any], *, max_tokens_ceiling: int) -> dict[str, Any]:
    """A Chat Completions request as a Messages request. Messages requires `max_tokens`: the caller's
    (`max_completion_tokens`, else `max_tokens`), else `max_tokens_ceiling` (the model's completion ceiling,
    which the data plane reserved). System and developer messages, wherever they stand, become `system`."""
    _check_parameters(body, _CHAT_MAPPED, lambda n, v: n in DROPPED_CHAT and DROPPED_CHAT[n](v), "Messages")
    system, turns = _chat_turns(_list(body.get("messages"), "messages"))
    if not turns:
        raise TranslationError("messages", "must hold at least one non-empty user or assistant message")
    out: dict[str, Any] = {"model": _string(body.get("model"), "model"),
                           "max_tokens": _chat_max_tokens(body, max_tokens_ceiling), "messages": turns}
    if system:
        out["system"] = system
    if body.get("temperature") is not None:
        temperature = _number(body["temperature"], "temperature")
        if not 0 <= temperature <= 1:
            raise Untranslatable("temperature", "the Messages API takes 0 to 1")
        out["temperature"] = temperature
    for name in ("top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = _number(body[name], name)
    if body.get("stop") is not None:
        out["stop_sequences"] = _chat_stop(body["stop"])
    if body.get("stream") is not None and _truthy(body["stream"]):
        out["stream"] = True
    if body.get("tools") is not None:
        tools = [_chat_tool(tool, f"tools[{i}]") for i, tool in enumerate(_list(body["tools"], "tools"))]
        if tools:
            out["tools"] = tools
    choice = _chat_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None:
        out["tool_choice"] = choice
    if body.get("user") is not None:
        out["metadata"] = {"user_id": _string(body["user"], "user")}
    config = _chat_output_config(body)
    if config:
        out["output_config"] = config
    return out


def _chat_max_tokens(body: Mapping[str, Any], ceiling: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TranslationError(name, "must be a positive integer")
            return value
    return ceiling


def _chat_stop(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [_string(item, f"stop[{i}]") for i, item in enumerate(_list(value, "stop"))]


def _chat_output_config(body: Mapping[str, Any]) -> dict[str, Any]:
    """`reasoning_effort` -> `output_config.effort`; a JSON-schema `response_format` -> `output_config.format`
    (`json_object` has no schema to give, so it is refused)."""
    config: dict[str, Any] = {}
    effort = body.get("reasoning_effort")
    if effort is not None and effort != "none":
        if effort not in _EFFORTS:
            raise Untranslatable("reasoning_effort", f"takes one of {sorted(_EFFORTS)} on a Messages provider")
        config["effort"] = _EFFORTS[effort]
    response_format = body.get("response_format")
    if response_format is not None and not DROPPED_CHAT["response_format"](response_format):
        kind = _object(response_format, "response_format").get("type")
        schema = response_format.get("json_schema")
        if kind != "json_schema" or not isinstance(schema, Mapping) or not isinstance(schema.get("schema"),
                                                                                       Mapping):
            raise Untranslatable("response_format", "only a `json_schema` with its `schema` has a Messages "
                                                    "counterpart (`output_config.format`)")
        config["format"] = {"type": "json_schema", "schema": dict(schema["schema"])}
    return config


def _chat_tool(tool: Any, param: str) -> dict[str, Any]:
    tool = _object(tool, param)
    if tool.get("type") != "function":
        raise Untranslatable(f"{param}.type", "only function tools have a Messages counterpart")
    function = _object(tool.get("function"), f"{param}.function")
    out: dict[str, Any] = {"name": _string(function.get("name"), f"{param}.function.name")}
    if function.get("description") is not None:
        out["description"] = _string(function["description"], f"{param}.function.description")
    parameters = function.get("parameters")
    out["input_schema"] = (dict(_object(parameters, f"{param}.function.parameters")) if parameters is not None
                           else {"type": "object", "properties": {}})
    if function.get("strict") is True:
        out["strict"] = True
    return out


def _chat_tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    """`tool_choice` and `parallel_tool_calls: false` (Messages: `disable_parallel_tool_use`)."""
    out: dict[str, Any] | None
    if choice is None:
        out = None
    elif choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        function = _object(choice.get("function"), "tool_choice.function")
        out = {"type": "tool", "name": _string(function.get("name"), "tool_choice.function.name")}
    else:
        raise Untranslatable("tool_choice", "takes auto, none, required or a function on a Messages provider")
    if parallel is not None and not isinstance(parallel, bool):
        raise TranslationError("parallel_tool_calls", "must be a boolean")
    if parallel is False and (out is None or out["type"] != "none"):
        out = {**(out or {"type": "auto"}), "disable_parallel_tool_use": True}
    return out


def _chat_turns(messages: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, alternating user/assistant turns). Tool results join the user turn that follows the
    assistant's tool calls, first in it as Messages requires; messages left without content are dropped
    (Messages refuses empty content)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        message = _object(message, param)
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend({"type": "text", "text": text} for text in _texts(message.get("content"), param))
            continue
        if role == "user":
            blocks = _chat_user_blocks(message.get("content"), param)
        elif role == "assistant":
            blocks = _chat_assistant_blocks(message, param)
        elif role == "tool":
            blocks = [_chat_tool_result(message, param)]
            role = "user"
        elif role == "function":
            raise Untranslatable(f"{param}.role", "function messages are deprecated: use tool messages")
        else:
            raise TranslationError(f"{param}.role", "must be system, developer, user, assistant or tool")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


def _texts(content: Any, param: str) -> list[str]:
    """The non-empty texts of a string or an array of text parts (system, developer and tool content)."""
    if isinstance(content, str):
        return [content] if content else []
    texts = []
    for j, part in enumerate(_list(content, f"{param}.content")):
        part = _object(part, f"{param}.content[{j}]")
        if part.get("type") != "text":
            raise Untranslatable(f"{param}.content[{j}].type", "only text parts are allowed here")
        text = _string(part.get("text"), f"{param}.content[{j}].text")
        if text:
            texts.append(text)
    return texts


def _chat_user_blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for j, part in enumerate(_list(content, f"{param}.content")):
        block = _chat_user_part(_object(part, f"{param}.content[{j}]"), f"{param}.content[{j}]")
        if block is not None:
            blocks.append(block)
    return blocks


def _chat_user_part(part: Mapping[str, Any], param: str) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        text = _string(part.get("text"), f"{param}.text")
        return {"type": "text", "text": text} if text else None
    if kind == "image_url":
        image = part.get("image_url")
        url = _string(image.get("url") if isinstance(image, Mapping) else image, f"{param}.image_url.url")
        return _image_block(url, f"{param}.image_url.url")  # `detail` is a hint Messages has no field for
    if kind == "file":
        file = _object(part.get("file"), f"{param}.file")
        match = _DATA_URL.fullmatch(file.get("file_data") or "") if isinstance(file.get("file_data"), str) \
            else None
        if match is None or match["media"] != "application/pdf":
            raise Untranslatable(f"{param}.file", "only inline PDF data (file_data) has a Messages counterpart")
        return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                               "data": match["data"]}}
    raise Untranslatable(f"{param}.type", f"content part {kind!r} has no Messages counterpart")


def _image_block(url: str, param: str) -> dict[str, Any]:
    match = _DATA_URL.fullmatch(url)
    if match is None:
        if not url.startswith(("https://", "http://")):
            raise TranslationError(param, "must be an http(s) URL or a base64 data URL")
        return {"type": "image", "source": {"type": "url", "url": url}}
    if match["media"] not in _IMAGE_TYPES:
        raise Untranslatable(param, f"Messages takes images of types {sorted(_IMAGE_TYPES)}")
    return {"type": "image", "source": {"type": "base64", "media_type": match["media"], "data": match["data"]}}


def _chat_assistant_blocks(message: Mapping[str, Any], param: str) -> list[dict[str, Any]]:
    for name in ("function_call", "audio"):
        if message.get(name) is not None:
            raise Untranslatable(f"{param}.{name}", "has no Messages counterpart")
    content = message.get("content")
    blocks: list[dict[str, Any]] = []
    if isinstance(content, list):
        for j, part in enumerate(content):
            part = _object(part, f"{param}.content[{j}]")
            key = "refusal" if part.get("type") == "refusal" else "text"
            if part.get("type") not in ("text", "refusal"):
                raise Untranslatable(f"{param}.content[{j}].type", "assistant content is text or refusal parts")
            text = _string(part.get(key), f"{param}.content[{j}].{key}")
            if text:
                blocks.append({"type": "text", "text": text})
    elif content is not None and _string(content, f"{param}.content"):
        blocks.append({"type": "text", "text": content})
    if not blocks and isinstance(message.get("refusal"), str) and message["refusal"]:
        blocks.append({"type": "text", "text": message["refusal"]})
    calls = message.get("tool_calls")
    for k, call in enumerate(_list(calls, f"{param}.tool_calls") if calls is not None else []):
        blocks.append(_chat_tool_use(_object(call, f"{param}.tool_calls[{k}]"), f"{param}.tool_calls[{k}]"))
    return blocks


def _chat_tool_use(call: Mapping[str, Any], param: str) -> dict[str, Any]:
    function = _object(call.get("function"), f"{param}.function")
    arguments = _string(function.get("arguments", ""), f"{param}.function.arguments")
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise TranslationError(f"{param}.function.arguments", "must be a JSON object (Messages tool input)")
    return {"type": "tool_use", "id": _string(call.get("id"), f"{param}.id"),
            "name": _string(function.get("name"), f"{param}.function.name"), "input": parsed}


def _chat_tool_result(message: Mapping[str, Any], param: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result",
                             "tool_use_id": _string(message.get("tool_call_id"), f"{param}.tool_call_id")}
    text = "\n".join(_texts(message.get("content"), param))
    if text:
        block["content"] = text
    return block


# --- Anthropic Messages -> OpenAI Chat -------------------------------------------------------------------


def messages_request_to_chat(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages request as a Chat Completions request. A streamed one asks for the usage chunk
    (`stream_options.include_usage`), from which the final `message_delta` takes its usage."""
    _check_parameters(body, _MESSAGES_MAPPED, lambda n, v: n in DROPPED_MESSAGES, "OpenAI Chat Completions")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise TranslationError("max_tokens", "must be a positive integer (Messages requires it)")
    messages = _messages_system(body.get("system"))
    for i, message in enumerate(_list(body.get("messages"), "messages")):
        messages.extend(_messages_turn(_object(message, f"messages.{i}"), f"messages.{i}"))
    out: dict[str, Any] = {"model": _string(body.get("model"), "model"), "messages": messages,
                           "max_completion_tokens": max_tokens}
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None:
            out[name] = _number(body[name], name)
    if body.get("stop_sequences") is not None:
        out["stop"] = [_string(s, f"stop_sequences.{i}")
                       for i, s in enumerate(_list(body["stop_sequences"], "stop_sequences"))]
    if body.get("stream") is not None and _truthy(body["stream"]):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    if body.get("tools") is not None:
        tools = [_messages_tool(_object(t, f"tools.{i}"), f"tools.{i}")
                 for i, t in enumerate(_list(body["tools"], "tools"))]
        if tools:
            out["tools"] = tools
    if body.get("tool_choice") is not None:
        out.update(_messages_tool_choice(_object(body["tool_choice"], "tool_choice")))
    if body.get("metadata") is not None:
        user = _object(body["metadata"], "metadata").get("user_id")
        if user is not None:
            out["user"] = _string(user, "metadata.user_id")
    if body.get("output_config") is not None:
        out.update(_messages_output_config(_object(body["output_config"], "output_config")))
    return out


def _messages_system(system: Any) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    texts = []
    for i, block in enumerate(_list(system, "system")):
        block = _object(block, f"system.{i}")
        if block.get("type") != "text":
            raise Untranslatable(f"system.{i}.type", "system blocks are text")
        texts.append(_string(block.get("text"), f"system.{i}.text"))
    text = "\n\n".join(t for t in texts if t)
    return [{"role": "system", "content": text}] if text else []


def _messages_turn(message: Mapping[str, Any], param: str) -> list[dict[str, Any]]:
    """One Messages turn as Chat messages: a user turn's tool results become `tool` messages (first, right
    after the assistant's tool calls, as Chat requires), its other blocks one user message."""
    role = message.get("role")
    content = message.get("content")
    if role not in ("user", "assistant"):
        raise TranslationError(f"{param}.role", "must be user or assistant")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = [_object(b, f"{param}.content.{j}") for j, b in enumerate(_list(content, f"{param}.content"))]
    if role == "assistant":
        return [_messages_assistant(blocks, param)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if block.get("type") == "tool_result":
            out.append(_messages_tool_result(block, f"{param}.content.{j}"))
        else:
            part = _messages_user_part(block, f"{param}.content.{j}")
            if part is not None:
                parts.append(part)
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _messages_user_part(block: Mapping[str, Any], param: str) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":  # `cache_control` and `citations` are hints: dropped
        text = _string(block.get("text"), f"{param}.text")
        return {"type": "text", "text": text} if text else None
    source = _object(block.get("source"), f"{param}.source") if kind in ("image", "document") else {}
    if kind == "image":
        if source.get("type") == "base64":
            media = _string(source.get("media_type"), f"{param}.source.media_type")
            data = _string(source.get("data"), f"{param}.source.data")
            return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}
        if source.get("type") == "url":
            return {"type": "image_url", "image_url": {"url": _string(source.get("url"), f"{param}.source.url")}}
    if kind == "document":
        if source.get("type") == "base64" and source.get("media_type") == "application/pdf":
            data = _string(source.get("data"), f"{param}.source.data")
            return {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{data}",
                                             "filename": str(block.get("title") or "document.pdf")}}
        if source.get("type") == "text":
            return {"type": "text", "text": _string(source.get("data"), f"{param}.source.data")}
    raise Untranslatable(f"{param}.type" if kind not in ("image", "document") else f"{param}.source",
                         f"{kind!r} content has no OpenAI Chat counterpart")


def _messages_tool_result(block: Mapping[str, Any], param: str) -> dict[str, Any]:
    """A tool result as a `tool` message (`is_error` has no Chat counterpart: the content says what failed)."""
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for k, part in enumerate(_list(content, f"{param}.content")):
            part = _object(part, f"{param}.content.{k}")
            if part.get("type") != "text":
                raise Untranslatable(f"{param}.content.{k}.type", "Chat tool messages hold text only")
            texts.append(_string(part.get("text"), f"{param}.content.{k}.text"))
        text = "\n".join(texts)
    return {"role": "tool", "tool_call_id": _string(block.get("tool_use_id"), f"{param}.tool_use_id"),
            "content": text}


def _messages_assistant(blocks: list[Mapping[str, Any]], param: str) -> dict[str, Any]:
    """Text blocks joined, tool uses as `tool_calls`; thinking blocks of earlier turns are dropped (Anthropic
    documents them as optional to send back)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(_string(block.get("text"), f"{param}.content.{j}.text"))
        elif kind == "tool_use":
            calls.append({"id": _string(block.get("id"), f"{param}.content.{j}.id"), "type": "function",
                          "function": {"name": _string(block.get("name"), f"{param}.content.{j}.name"),
                                       "arguments": dumps(_object(block.get("input", {}),
                                                                  f"{param}.content.{j}.input"))}})
        elif kind not in ("thinking", "redacted_thinking"):
            raise Untranslatable(f"{param}.content.{j}.type", f"{kind!r} has no OpenAI Chat counterpart")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _messages_tool(tool: Mapping[str, Any], param: str) -> dict[str, Any]:
    if tool.get("type") not in (None, "custom"):
        raise Untranslatable(f"{param}.type", "server tools have no OpenAI Chat counterpart")
    function: dict[str, Any] = {"name": _string(tool.get("name"), f"{param}.name"),
                                "parameters": dict(_object(tool.get("input_schema"), f"{param}.input_schema"))}
    if tool.get("description") is not None:
        function["description"] = _string(tool["description"], f"{param}.description")
    if tool.get("strict") is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def _messages_tool_choice(choice: Mapping[str, Any]) -> dict[str, Any]:
    kind = choice.get("type")
    mapped: dict[str, Any]
    if kind in ("auto", "none"):
        mapped = {"tool_choice": kind}
    elif kind == "any":
        mapped = {"tool_choice": "required"}
    elif kind == "tool":
        mapped = {"tool_choice": {"type": "function",
                                  "function": {"name": _string(choice.get("name"), "tool_choice.name")}}}
    else:
        raise Untranslatable("tool_choice.type", "takes auto, any, tool or none")
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        mapped["parallel_tool_calls"] = False
    return mapped


def _messages_output_config(config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in config.items():
        if value is None:
            continue
        if name == "effort":
            if value not in ("low", "medium", "high", "xhigh", "max"):
                raise TranslationError("output_config.effort", "takes low, medium, high, xhigh or max")
            out["reasoning_effort"] = "xhigh" if value == "max" else value
        elif name == "format":
            fmt = _object(value, "output_config.format")
            if fmt.get("type") != "json_schema":
                raise Untranslatable("output_config.format.type", "only json_schema has a Chat counterpart")
            out["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "output", "strict": True,
                "schema": dict(_object(fmt.get("schema"), "output_config.format.schema"))}}
        else:
            raise Untranslatable(f"output_config.{name}", "has no OpenAI Chat counterpart")
    return out
