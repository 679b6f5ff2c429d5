"""The console's settings: one frozen object built from flags (`maasctl console`), passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

from maasctl.console.billing.settings import BillingPagesSettings

DEFAULT_SCOPES = ("openid", "profile", "groups")


@dataclass(frozen=True, kw_only=True)
class OidcSettings:
    """An OpenID provider for the authorization-code flow with PKCE.

    The Kubernetes API server must trust the same issuer and client id (`--oidc-issuer-url`,
    `--oidc-client-id`): the ID token is then the user's credential for the API server and for maas-api.
    """

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    groups_claim: str = "groups"
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    ca_file: str | None = None  # CA bundle for the issuer's TLS certificate (default: system CAs)


@dataclass(frozen=True, kw_only=True)
class ConsoleSettings:
    """Everything `maasctl console` needs. `public_url` is where browsers reach the console (OIDC redirect
    URI, Secure cookies when https). `gateway_urls` are the MaaS gateway origins: the Models page offers a
    ready-to-paste curl (which sends the user's API key) only for a model served on one of them, never for a host a
    model owner wrote (`endpointOverride`); none configured means no command at all.

    Sessions live in this process, or in Redis (`redis_url`) shared by every replica (then `session_secret`
    is required: every replica signs cookies and seals sessions with it). They come in two pools so that
    traffic nobody signed in for cannot push a user out: anonymous ones (sign-in form, OIDC request in flight)
    are short-lived and evict only each other; signed-in ones are bounded in total (`max_sessions`) and per
    user."""

    host: str = "127.0.0.1"
    port: int = 8095
    public_url: str = "http://127.0.0.1:8095"
    kubeconfig: str | None = None
    maas_api_url: str = "http://maas-api.opendatahub.svc.cluster.local:8080"
    subscription_namespace: str = "models-as-a-service"
    model_namespace: str = "llm"  # default namespace offered when importing a model service
    admin_groups: tuple[str, ...] = ("maas-admins",)
    session_secret: str = field(default="", repr=False)  # signs session cookies; empty: random per process
    session_ttl_seconds: int = 8 * 3600
    max_sessions: int = 10_000  # signed-in sessions
    max_sessions_per_user: int = 20
    max_anonymous_sessions: int = 10_000
    anonymous_session_ttl_seconds: int = 600
    gateway_urls: tuple[str, ...] = ()
    # `namespace/name` of the controller's default Gateway (subscriptions without gatewayRef are used through
    # it): where a subscription's billing Plan applies, on the administrators' view.
    default_gateway: str = "openshift-ingress/maas-default-gateway"
    oidc: OidcSettings | None = None
    redis_url: str | None = field(default=None, repr=False)  # may hold a password
    billing: BillingPagesSettings = field(default_factory=BillingPagesSettings)  # docs/billing-console.md

    @property
    def secure_cookies(self) -> bool:
        return self.public_url.startswith("https://")
