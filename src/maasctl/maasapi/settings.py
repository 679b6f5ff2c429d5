"""Settings of maas-api: one object passed down; nothing here reads the environment by itself."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, SecretStr

# Used only when no pepper is configured (embedded/dev mode). Secrets carry 256 random bits, so the stored
# HMAC stays infeasible to invert even with a known pepper; production sets `key_pepper`.
DEFAULT_PEPPER = "maasctl-maasapi-default-pepper-v1"


class MaasApiSettings(BaseModel):
    """Configuration for one maas-api process (all replicas of a deployment share the database and pepper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = "sqlite+aiosqlite:///maas-api.db"
    key_pepper: SecretStr | None = None
    subscription_namespace: str = "models-as-a-service"
    # `namespace/name` of the controller's default Gateway: subscriptions without spec.gatewayRef are used
    # through it (and only through it: docs/tenant-gateways.md).
    default_gateway: str = "openshift-ingress/maas-default-gateway"
    max_expiration: timedelta = timedelta(days=90)
    default_expiration: timedelta | None = None  # None -> max_expiration
    ephemeral_max_expiration: timedelta = timedelta(hours=1)
    ephemeral_default_expiration: timedelta = timedelta(hours=1)
    revoked_retention: timedelta = timedelta(days=30)
    # An API key carries its owner's groups from mint time. They are refreshed whenever the owner uses a
    # Kubernetes token with maas-api (at most once a minute), and a key whose groups are older than this is
    # refused (`groups_stale`) until the owner signs in again: a key outlives a group membership change by at
    # most this long (docs/security.md).
    key_groups_max_age: timedelta = timedelta(hours=24)
    # Per user (the key's owner), counted in the database so every replica shares them: at most this many
    # active (unrevoked, unexpired) keys, and at most this many keys minted in any minute; a mint past either
    # is 429 with Retry-After (docs/security.md).
    max_active_keys_per_user: int = Field(default=100, ge=1)
    key_mints_per_minute: int = Field(default=30, ge=1)
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    max_labels: int = 50
    host: str = "127.0.0.1"
    port: int = 8080
    kubeconfig: str | None = None
    metrics_enabled: bool = True
    run_migrations: bool = True
    db_pool_size: int = Field(default=10, ge=1)
    token_cache_seconds: float = Field(default=5.0, ge=0.0)
    # PostgreSQL only: key rows read by validation are kept in memory, dropped the moment the database announces
    # a change (LISTEN/NOTIFY, maasapi.keycache) and served only while that announcement channel is up. The age
    # is a safety net on top (0 disables the cache: every validation reads the database).
    key_cache_max_age: float = Field(default=30.0, ge=0.0)
    key_cache_max_entries: int = Field(default=100_000, ge=1)
    model_probe_timeout: float = Field(default=2.0, gt=0.0)
    models_deadline: float = Field(default=5.0, gt=0.0)
    model_probe_ca_file: str | None = None  # CA bundle for probing https model endpoints (None: system CAs)
    # Origins (scheme://host[:port]) of the gateway: the only hosts /v1/models probes with the caller's
    # credentials (the first one stands in for any other origin a MaaSModelRef names).
    gateway_origins: tuple[str, ...] = ()
    # The gateway (Authorino's callbacks, the usage sender) authenticates to /internal/v1/* with one of these
    # shared bearer tokens (several allow rotation). None configured: every internal gateway call gets 401
    # (closed by default).
    gateway_tokens: tuple[SecretStr, ...] = ()
    # The key cleanup Job's identity (TokenReview user name): may revoke the keys of a subscription that is
    # being deleted, nothing else.
    key_cleanup_users: tuple[str, ...] = ("system:serviceaccount:opendatahub:maas-key-cleanup",)
    usage_max_batch_records: int = Field(default=1000, ge=1)  # the body is also bounded by max_body_bytes
    usage_raw_retention: timedelta = timedelta(days=90)  # raw records; rollups are what reports read
    usage_hourly_retention: timedelta | None = timedelta(days=400)  # None: keep; daily rollups are kept
    usage_metrics_per_user: bool = False  # per-user Prometheus labels (unbounded cardinality: opt in)
    usage_metrics_max_series: int = Field(default=1000, ge=1)
    usage_report_max_rows: int = Field(default=10_000, ge=1)

    def pepper_bytes(self) -> bytes:
        value = self.key_pepper.get_secret_value() if self.key_pepper else DEFAULT_PEPPER
        return value.encode()

    @property
    def effective_default_expiration(self) -> timedelta:
        return self.default_expiration or self.max_expiration
