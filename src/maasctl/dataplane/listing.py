"""The data plane's own answer to `GET <model path>/v1/models` on the route of an ExternalModel whose provider
cannot answer OpenAI's model listing (`contract.routing.answers_model_listing`: a Messages provider, or several
providers behind the relay).

maas-api lists a model when that request, sent with the caller's own credential, answers 2xx or 405; the route's
AuthPolicy decides first (401/403 for a caller who may not use the model). What answers after it must be true
for the route and tell nothing more than the route already does, so it is built here from the route alone:
OpenAI's list with the one model the route publishes (the name clients send), owned by the MaaSModelRef
(`namespace/name`, as maas-api's listing says), created when the route was. No provider is called: its model
names stay its own, its key is never used, and a provider outage does not hide a model a caller may use (the
reference lists by access, not by health). Computed once per route rule when the route table is built.
"""

from __future__ import annotations

from datetime import datetime

from maasctl.dataplane.translate.common import dumps

__all__ = ["model_list"]


def _epoch(timestamp: str) -> int:
    """A Kubernetes creationTimestamp (RFC 3339) as Unix seconds; 0 when absent or unreadable."""
    try:
        return max(0, int(datetime.fromisoformat(timestamp).timestamp()))
    except (ValueError, OverflowError, OSError):
        return 0


def model_list(published: str, owned_by: str, created: str) -> bytes:
    """OpenAI's `GET /v1/models` answer naming `published` only (`created`: the route's creationTimestamp)."""
    return dumps({"object": "list", "data": [
        {"id": published, "object": "model", "created": _epoch(created), "owned_by": owned_by}]}).encode()
