"""A model with several providers on the wire: one request's attempts (`dataplane.failover`), each with its
provider's key, format and model name, and the chosen answer as OpenAI Chat. Both fronts call it: the local
gateway's upstream stage in process (`server.Gateway`), and in a cluster the payload processor's provider relay
(`payload.relay`), which Envoy reaches through the model's route (docs/providers.md, "Several providers for one
model").

Per attempt: the Chat body the pipeline prepared, its `model` set to the provider's; for a Messages provider
translated (`gateway.formats.translate_request`, the same translation a single provider's request gets: what
cannot be translated passes the provider over); the headers the pipeline decided for the upstream, every caller
credential and client `anthropic-*` header removed again, the provider's key set in its scheme
(`contract.edge.provider_key_header`), `anthropic-version` for Messages, `accept-encoding: identity`. The chosen
answer of a Messages provider becomes Chat (`gateway.formats.AnswerTranslator`, with the usage chunk always
written: the response stages read and drop it as for any stream), so what comes back is a single OpenAI
provider's answer whichever provider served - the response stages (usage, rename, output guardrails, the door)
run on it as they always do. A failed attempt's answer is closed unread: it costs nothing.

Metrics (prometheus-client, labels bounded: the model's route, a provider name of its plan, a fixed outcome):
`maas_provider_attempts_total{route,provider,outcome}` (served, a status such as 503 or 429, unreachable,
timeout, no_key, untranslatable, open), `maas_provider_failovers_total{route,provider}` (a failure followed by
another attempt) and `maas_provider_breaker_state{route,provider}` (0 closed, 1 half-open, 2 open). Logs name
the route, the provider and the outcome: never a key, a header value or a body.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDict
from prometheus_client import Counter, Gauge
from yarl import URL

from maasctl.contract.edge import ANTHROPIC_VERSION, CREDENTIAL_HEADERS, provider_key_header
from maasctl.contract.errors import Refusal, error_body
from maasctl.contract.providers import PROVIDER_HEADER, RELAY_PATH, ProviderPlan, ProviderTarget
from maasctl.dataplane.body import InvalidBody, PreparedBody
from maasctl.dataplane.failover import AttemptFailed, Breakers, Outcome, attempt_order, run_attempts
from maasctl.dataplane.translate import TranslationError
from maasctl.dataplane.translate.common import dumps
from maasctl.gateway.formats import AnswerTranslator, translate_request
from maasctl.gateway.proxy import response_header_pairs

__all__ = ["ATTEMPTS", "BREAKER_STATE", "FAILOVERS", "ChatAnswer", "ProviderCaller", "relay_token"]

log = logging.getLogger("maasctl.gateway")

ATTEMPTS = Counter("maas_provider_attempts_total", "Requests sent to (or passed over for) a provider of a model "
                   "with several, by outcome", ["route", "provider", "outcome"])
FAILOVERS = Counter("maas_provider_failovers_total", "A provider failed a request and the next one was tried",
                    ["route", "provider"])
BREAKER_STATE = Gauge("maas_provider_breaker_state", "A provider's circuit breaker: 0 closed, 1 half-open, 2 open "
                      "(several worker processes: the most open of theirs)", ["route", "provider"],
                      multiprocess_mode="livemax")
_DROPPED = CREDENTIAL_HEADERS | {"host", "content-length", "content-type", "accept-encoding", "transfer-encoding"}


_PROCESS_SECRET = secrets.token_hex(32)


def relay_token(install_secret: str | None) -> str:
    """The token the payload processor sets on a relayed request and the relay demands: derived from a secret
    every processor replica of the install holds (the gateway token it presents to maas-api; the token itself
    never leaves the process), else the one a pool's parent drew for its workers (`GatewaySettings.relay_secret`:
    the post stage and the relay may be two workers), else this process's own random one (one replica of one
    process: the processor and its relay are the same process)."""
    secret = install_secret or _PROCESS_SECRET
    return hmac.new(secret.encode(), b"maasctl provider relay v1", hashlib.sha256).hexdigest()


@dataclass
class _Answer:
    """A provider's answer whose head has arrived."""

    provider: ProviderTarget
    response: aiohttp.ClientResponse

    @property
    def status(self) -> int:
        return self.response.status


class ChatAnswer:
    """The chosen provider's answer as OpenAI Chat: `status` and `headers` (final: a translated whole answer
    was read to its end first), then `chunks()`; `release()` in any case. A stream that breaks raises
    aiohttp.ClientError / TimeoutError from `chunks()`, as a single provider's would."""

    def __init__(self, provider: ProviderTarget, response: aiohttp.ClientResponse, status: int,
                 headers: list[tuple[str, str]], translator: AnswerTranslator | None, whole: bytes | None) -> None:
        self.provider = provider
        self.status = status
        self.headers = headers
        self._response = response
        self._translator = translator
        self._whole = whole

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._whole is not None:
            yield self._whole
            return
        async for chunk in self._response.content.iter_any():
            out = self._translator.feed(chunk) if self._translator is not None else chunk
            if out:
                yield out
        if self._translator is not None:
            tail = self._translator.close()
            if tail:
                yield tail

    def release(self) -> None:
        self._response.release()


class ProviderCaller:
    """The attempts of one process (its breakers, its upstream session). `keys(namespace, secret, field)` is
    the provider key from the data plane's Secret cache (None: missing)."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession], keys: Callable[[str, str, str], str | None],
                 breakers: Breakers, *, connect_timeout: float, scan_limit: int) -> None:
        self._session = session
        self._keys = keys
        self.breakers = breakers
        self._connect_timeout = connect_timeout
        self._scan_limit = scan_limit

    async def call(self, route: str, namespace: str, plan: ProviderPlan, body: bytes,
                   headers: Sequence[tuple[str, str]], *, ceiling: int, timeout: float | None
                   ) -> tuple[ChatAnswer | None, Refusal | None, ProviderTarget | None]:
        """Try the plan's providers with the Chat request `body` (the pipeline's, for the published model) and
        `headers` (the pipeline's upstream headers). Returns the chosen answer as Chat, else the refusal of
        the last failure; and the provider it came from (None: none could be tried)."""
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            return None, Refusal(400, "invalid_body", "a chat completion request is a JSON object"), None
        deadline = time.monotonic() + timeout if timeout else None
        base = [(k, v) for k, v in headers if k.lower() not in _DROPPED]

        async def send(p: ProviderTarget) -> _Answer:
            return await self._send(namespace, p, parsed, base, ceiling, deadline)

        async def discard(answer: _Answer) -> None:
            answer.response.close()

        outcome: Outcome[_Answer] = await run_attempts(
            attempt_order(plan), plan.max_attempts, lambda p: self.breakers.get(route, p.name), send, discard)
        self._observe(route, plan, outcome)
        if outcome.answer is None:
            return None, outcome.refusal, outcome.provider
        return await self._as_chat(outcome.answer), None, outcome.provider

    async def _send(self, namespace: str, p: ProviderTarget, parsed: dict[str, Any], base: list[tuple[str, str]],
                    ceiling: int, deadline: float | None) -> _Answer:
        key = None
        if p.secret is not None:
            key = self._keys(namespace, p.secret, p.secret_key)
            if key is None:
                raise AttemptFailed(Refusal(503, "no_upstream_key", "upstream credentials are not available"),
                                    counts=False, kind="no_key")
        content = dumps({**parsed, "model": p.target_model}).encode()
        out = list(base)
        if p.api_format == "messages":
            try:
                content = translate_request(PreparedBody(content), RELAY_PATH, ceiling).content
            except TranslationError as exc:
                raise AttemptFailed(exc.refusal(), counts=False, kind="untranslatable") from None
            except InvalidBody as exc:
                raise AttemptFailed(Refusal(400, "invalid_body", str(exc)), counts=False,
                                    kind="untranslatable") from None
            out = [(k, v) for k, v in out if not k.lower().startswith("anthropic-")]
            out.append(("anthropic-version", ANTHROPIC_VERSION))
        if key:
            out.append(provider_key_header(p.key_scheme, key))
        out += [("content-type", "application/json"), ("accept-encoding", "identity")]
        remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
        try:
            response = await self._session().request(
                "POST", URL(p.chat_url, encoded=True), headers=CIMultiDict(out), data=content,
                timeout=aiohttp.ClientTimeout(total=remaining, connect=self._connect_timeout), allow_redirects=False)
        except TimeoutError:
            raise AttemptFailed(Refusal(504, "upstream_timeout", "upstream request timeout"), counts=True,
                                kind="timeout") from None
        except aiohttp.ClientError as exc:
            log.warning("provider %s unreachable: %s", p.name, type(exc).__name__)
            raise AttemptFailed(Refusal(503, "upstream_unavailable", "upstream connect error"), counts=True,
                                kind="unreachable") from None
        return _Answer(p, response)

    async def _as_chat(self, answer: _Answer) -> ChatAnswer:
        """The answer as Chat: a Messages provider's translated (a whole answer read first: its status may
        change), an OpenAI provider's as it is."""
        response, p = answer.response, answer.provider
        raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
        raw = [(k, v) for k, v in raw if k.lower() != PROVIDER_HEADER]
        if p.api_format != "messages":
            return ChatAnswer(p, response, response.status, raw, None, None)
        translator = AnswerTranslator(response.status, raw, limit=self._scan_limit, created=int(time.time()))
        if translator.streaming:
            return ChatAnswer(p, response, translator.status,
                              response_header_pairs(translator.headers, body_changed=True), translator, None)
        try:
            async for chunk in response.content.iter_any():  # bounded: the translator keeps at most the limit
                translator.feed(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("provider %s answer broke: %s", p.name, type(exc).__name__)
            return ChatAnswer(p, response, 502, [("content-type", "application/json")], None, error_body(
                502, "the provider's answer broke off before its end", "upstream_malformed"))
        whole = translator.close()
        return ChatAnswer(p, response, translator.status, response_header_pairs(translator.headers, body_changed=True),
                          None, whole)

    def _observe(self, route: str, plan: ProviderPlan, outcome: Outcome[_Answer]) -> None:
        for name, what in outcome.attempts:
            ATTEMPTS.labels(route, name, what).inc()
        for name in outcome.failovers:
            FAILOVERS.labels(route, name).inc()
        for p in plan.providers:
            BREAKER_STATE.labels(route, p.name).set(int(self.breakers.get(route, p.name).state))
        if outcome.failovers:
            log.info("route %s: failed over from %s to %s", route, ", ".join(outcome.failovers),
                     outcome.provider.name if outcome.provider is not None else "none")
