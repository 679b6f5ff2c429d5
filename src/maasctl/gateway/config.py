"""Settings of the local data plane (`maasctl gateway`): one frozen object, built by the CLI and passed down.

Nothing in `maasctl.gateway` reads the environment; the CLI maps flags (with `MAASCTL_*` fallbacks) onto
these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from maasctl.contract.processor_stages import DEFAULT_BYPASS_ROUTES

__all__ = ["LOCAL_URL_ANNOTATION", "MAX_WORKERS", "GatewaySettings", "workers_problem"]

MAX_WORKERS: Final = 64

LOCAL_URL_ANNOTATION: Final = "maasctl.opendatahub.io/local-url"
"""On a Service (any type): the base URL (`http://127.0.0.1:8000`) the local gateway uses for it.

In a cluster a ClusterIP Service is reached through the cluster network; on a laptop it is not, so an
in-cluster model (e.g. the route KServe made for an LLMInferenceService) is pointed at a local process by
annotating its Service. The annotation wins over `externalName` as well.
"""


@dataclass(frozen=True, kw_only=True)
class GatewaySettings:
    """Everything the local gateway needs; defaults suit a laptop next to `maasctl run`.

    gateway_name / gateway_namespace: the Gateway whose HTTPRoutes are served (routes attached elsewhere
        are ignored, as another Gateway would serve them).
    maas_api_url: when set, replaces the scheme and authority of every AuthPolicy metadata callback URL
        (the controller writes the in-cluster URL; locally maas-api listens elsewhere). None: call the URLs
        as written.
    usage_url: base URL of maas-api for usage records (`POST <usage_url>/internal/v1/usage`); None: log them.
    maas_api_token: the gateway's credential on maas-api's internal endpoints: sent on usage batches and on
        the AuthPolicy callbacks that declare `sharedSecretRef` (Authorino reads it from that Secret; the
        local gateway from this file).
    usage_spool_dir: when set (with usage_url), every usage record is appended to a segment file in this
        directory before it counts as recorded, and a gateway started on it sends the records an earlier one
        did not deliver (`maasctl.gateway.spool`): a killed gateway loses no billing. One directory per
        gateway process (it is locked); in a cluster an emptyDir survives container restarts of the pod.
        Without `redis_url` the in-process counters are journaled there too (`counters.jsonl`,
        `maasctl.gateway.counter_journal`): a restarted gateway keeps its counts, 24-hour limits included.
    max_request_bytes: larger request bodies get 413 before anything else happens.
    max_response_scan_bytes: JSON answers up to this size are parsed whole for `usage`; larger ones by their
        last 64 KiB (`dataplane.jsonscan.JsonUsageScanner`): memory stays bounded whatever the answer's size.
    completion_ceiling: the completion tokens charged when usage cannot be read and the request set no
        `max_tokens` (`dataplane.charge.charge_for`).
    redis_url: where the token counters live when several gateway replicas share them (`redis://host:6379/0`);
        None keeps them in this process (one replica; across restarts only with `usage_spool_dir`).
    guardrails_url: when set, the guardrails engine URL used instead of the one the AuthPolicy exports (the
        controller writes the engine Service's in-cluster URL; locally the engine listens elsewhere).
    guardrails_stream_chunk_chars: streamed answers of guarded models are checked every this many characters
        (and at the end); 0 checks only at the end.
    guardrails_caller_in_flight: guarded requests one user may have in flight on this gateway (from the input
        check to the end of the answer); one more gets 429 `guardrails_busy`. 0 is unbounded.
    upstream_timeout: seconds per upstream request when the route sets no `timeouts.request`.
    callback_timeout: seconds per maas-api callback or TokenReview.
    token_review_ttl / token_review_negative_ttl: how long a TokenReview answer is reused (seconds).
    token_review_audiences_from_host: Authorino checks the request host as audience when an AuthPolicy
        sets none. API servers with static tokens reject that, so locally the default is the API server's
        own audiences (False); set True to mimic Authorino exactly.
    upstream_verify: TLS verification for https backends: True (system CAs), False, or a CA bundle path.
    admin_from_loopback_only: `/_gateway/simulate` answers only loopback clients.
    subscription_namespace: where the MaaS admin check is asked (`contract.admin`): simulating a user and groups
        takes an administrator's token.
    serve_routes_without_auth_policy: closed by default (False): a route no AuthPolicy covers (neither its
        own nor a Gateway-level one) answers 403. True mimics a bare Envoy, which serves it to anyone.
    payload_processor: `grpc://host:port` of a `maasctl payload-processor`: the gateway then plays Envoy +
        Authorino + Limitador only (role "envoy") and hands the processor stages over ext_proc
        (`maasctl.payload.front`), as a cluster does; None runs every stage in process.
    payload_processor_metrics_url: the processor's `/metrics`; `/_gateway/metrics` then serves its families
        (usage telemetry, guardrails: the processor records them) with the gateway's own.
    payload_processor_bypass_routes: HTTPRoutes (`namespace/name`) served without the processor, as the
        controller's per-route bypass renders them for Envoy (maas-api's own API).
    provider_breaker_failures / provider_breaker_cooldown: a model with several providers: a provider's
        circuit breaker opens after this many consecutive failures and lets a trial request through after
        this many seconds (`dataplane.failover`; per process).
    relay_port: `maasctl payload-processor` only: the provider relay's HTTP port (0: a free one; None: none).
    workers: worker processes serving the same ports (`maasctl.gateway.workers`); 1 runs everything in this
        process. More than one needs `redis_url` (`workers_problem`).
    relay_secret: set by a pool's parent for its workers when there is no `maas_api_token`: the secret the
        provider relay's token is derived from must be the same in every worker (never logged).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    kubeconfig: str | None = None
    gateway_name: str = "maas-default-gateway"
    gateway_namespace: str = "openshift-ingress"
    maas_api_url: str | None = None
    usage_url: str | None = None
    maas_api_token: str | None = None  # bearer token maas-api accepts from the gateway (never logged)
    usage_batch_size: int = 100
    usage_flush_seconds: float = 2.0
    usage_max_buffer: int = 10_000
    usage_spool_dir: str | None = None
    max_request_bytes: int = 10 * 1024 * 1024
    max_response_scan_bytes: int = 1024 * 1024
    completion_ceiling: int = 4096
    guardrails_url: str | None = None  # replaces the engine URL the AuthPolicy exports (local engine)
    guardrails_stream_chunk_chars: int = 400  # streamed answers: output rails run every this many characters
    guardrails_caller_in_flight: int = 4  # guarded requests one user may have in flight here (0: unbounded)
    redis_url: str | None = None
    upstream_timeout: float = 300.0
    connect_timeout: float = 10.0
    callback_timeout: float = 5.0
    token_review_ttl: float = 10.0
    token_review_negative_ttl: float = 2.0
    token_review_audiences_from_host: bool = False
    upstream_verify: bool | str = True
    upstream_max_connections: int = 200
    # An idle pooled connection is dropped before the model server drops it (uvicorn's and Node's default is 5 s,
    # ours is httpguard's): reusing one the server is closing that instant fails the request with a 503.
    upstream_keepalive_seconds: float = 4.0
    admin_from_loopback_only: bool = True
    subscription_namespace: str = "models-as-a-service"
    serve_routes_without_auth_policy: bool = False
    payload_processor: str | None = None  # grpc://host:port: run the "envoy" stages here, the rest there
    payload_processor_metrics_url: str | None = None  # its /metrics, served with ours on /_gateway/metrics
    payload_processor_bypass_routes: tuple[str, ...] = DEFAULT_BYPASS_ROUTES
    provider_breaker_failures: int = 5
    provider_breaker_cooldown: float = 30.0
    relay_port: int | None = None
    workers: int = 1
    relay_secret: str | None = field(default=None, repr=False)
    log_level: str = "info"  # uvicorn's
    logging: tuple[str, str] = ("auto", "info")  # the CLI's --log-format and --log-level: a pool's workers' too


def workers_problem(settings: GatewaySettings) -> str | None:
    """Why these settings cannot run `settings.workers` worker processes, or None. Each process has its own
    in-process counters, so N workers without a shared counter store would let every token and request limit
    through N times: more than one worker needs Redis."""
    if not 1 <= settings.workers <= MAX_WORKERS:
        return f"--workers must be between 1 and {MAX_WORKERS}, not {settings.workers}"
    if settings.workers > 1 and not settings.redis_url:
        return (f"--workers {settings.workers} needs --redis-url (MAASCTL_REDIS_URL): every worker process would "
                f"count in its own memory, and each token and request limit would let {settings.workers} times its "
                "amount through")
    return None
