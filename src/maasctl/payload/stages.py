"""What the processor drives: the data-plane pipeline's push-style API (DESIGN_33), as a typing Protocol.

The processor owns no stage. Each ext_proc stream is one exchange: the processor hands the pipeline what Envoy
sent (head, body, response head, response chunks) and turns what the pipeline answers (a refusal, the upstream
request, the edited response) into ext_proc responses. `role` is the filter's stage (`pre` or `post`): the
pipeline maps it onto its own stage tags, so which stage runs where is decided once, in the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from maasctl.contract.usage import Termination

__all__ = ["Headers", "Pipeline", "RefusalLike", "ResponsePass", "Termination", "UpstreamLike"]

Headers = Sequence[tuple[str, str]]
"""Header names lowercased, in arrival order, repeated names kept."""


class RefusalLike(Protocol):
    """A stage's refusal: answered to the caller as is (Envoy's immediate response)."""

    @property
    def status(self) -> int: ...
    @property
    def code(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def body(self) -> bytes: ...


class UpstreamLike(Protocol):
    """The request as the stages left it: what reaches the upstream (the processor sends the difference)."""

    @property
    def headers(self) -> Headers: ...
    @property
    def body(self) -> bytes: ...


class ResponsePass(Protocol):
    """The response side of one exchange: new headers, then each chunk edited, then a tail. `status` and
    `headers` are the client's head (the output stages may replace it while `whole` is True)."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def whole(self) -> bool: ...
    @property
    def termination(self) -> Termination: ...  # after `close`: "truncated" when the answer ended early
    async def feed(self, chunk: bytes) -> bytes: ...
    async def close(self) -> bytes: ...


class Pipeline(Protocol):
    """The stages of one data plane; `exchange` is called once per stream, `finish` at most once per exchange."""

    def exchange(self, method: str, raw_path: bytes, query: str, headers: Headers, scheme: str) -> Any: ...
    async def request_head(self, ex: Any, role: str) -> RefusalLike | None: ...
    async def request_body(self, ex: Any, body: bytes, role: str) -> RefusalLike | None: ...
    def upstream_request(self, ex: Any) -> UpstreamLike: ...
    def response(self, ex: Any, status: int, headers: Headers) -> ResponsePass: ...
    async def finish(self, ex: Any, status: int, termination: Termination) -> None: ...
