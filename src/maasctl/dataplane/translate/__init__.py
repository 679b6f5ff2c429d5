"""Translation between the OpenAI Chat Completions format (`openai-chat`) and Anthropic's Messages API
(`messages`): requests, whole answers, streamed answers and errors, both ways. Pure (no I/O, the clock is an
argument), so the local gateway and the payload processor can both call it; not wired into the data plane yet
(docs/providers.md).

Directions: `chat_*_to_messages` turns Chat into Messages (a request to a `messages` provider, an answer to an
Anthropic client), `messages_*_to_chat` the reverse. What does not translate raises `TranslationError` (400,
naming the parameter) or is dropped where the provider's format documents no counterpart: `DROPPED_CHAT`,
`DROPPED_MESSAGES`.
"""

from maasctl.dataplane.translate.common import (
    MalformedAnswer,
    TranslationError,
    Untranslatable,
    chat_usage_to_messages,
    messages_usage_to_chat,
)
from maasctl.dataplane.translate.errors import chat_error_to_messages, messages_error_body, messages_error_to_chat
from maasctl.dataplane.translate.requests import (
    DROPPED_CHAT,
    DROPPED_MESSAGES,
    chat_request_to_messages,
    messages_request_to_chat,
)
from maasctl.dataplane.translate.responses import chat_response_to_messages, messages_response_to_chat
from maasctl.dataplane.translate.sse import SseEvent, SseParser
from maasctl.dataplane.translate.streams import ChatStreamToMessages, MessagesStreamToChat

__all__ = [
    "DROPPED_CHAT",
    "DROPPED_MESSAGES",
    "ChatStreamToMessages",
    "MalformedAnswer",
    "MessagesStreamToChat",
    "SseEvent",
    "SseParser",
    "TranslationError",
    "Untranslatable",
    "chat_error_to_messages",
    "chat_request_to_messages",
    "chat_response_to_messages",
    "chat_usage_to_messages",
    "messages_error_body",
    "messages_error_to_chat",
    "messages_request_to_chat",
    "messages_response_to_chat",
    "messages_usage_to_chat",
]
