"""`maasctl console`: flags (each with a MAASCTL_CONSOLE_* fallback) -> ConsoleSettings -> serve.

Secrets (session key, OIDC client secret) are read from files, never taken on the command line."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from maasctl.console.billing import flags as billing_flags
from maasctl.console.settings import DEFAULT_SCOPES, ConsoleSettings, OidcSettings
from maasctl.settings import env_default


def _env(name: str, default: str = "") -> str:
    return env_default(f"console_{name}", default)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("console", help="run the MaaS web console")
    d = ConsoleSettings()
    p.add_argument("--host", default=_env("host", d.host))
    p.add_argument("--port", type=int, default=int(_env("port", str(d.port))))
    p.add_argument("--public-url", default=_env("public_url", "") or None,
                   help="URL browsers use to reach the console (default: http://HOST:PORT); https means Secure "
                        "cookies; the OIDC redirect URI is PUBLIC_URL/signin/oidc/callback")
    p.add_argument("--kubeconfig", default=_env("kubeconfig", "") or None,
                   help="the console's own credential (TokenReview); default: in-cluster service account")
    p.add_argument("--maas-api-url", default=_env("maas_api_url", d.maas_api_url))
    p.add_argument("--gateway-url", dest="gateway_urls", action="append", default=[],
                   help="origin of the MaaS gateway (repeatable; MAASCTL_CONSOLE_GATEWAY_URL: comma-separated); "
                        "the Models page offers a curl, which sends the user's key, only for models served there")
    p.add_argument("--default-gateway", default=_env("default_gateway", d.default_gateway),
                   help="namespace/name of the controller's default Gateway (where the billing Plans of "
                        "subscriptions without gatewayRef apply)")
    p.add_argument("--subscription-namespace", default=_env("subscription_namespace", d.subscription_namespace))
    p.add_argument("--model-namespace", default=_env("model_namespace", d.model_namespace),
                   help="namespace suggested when importing a model service")
    p.add_argument("--admin-group", dest="admin_groups", action="append", default=[],
                   help="group whose members see the administrator pages (repeatable; MAASCTL_CONSOLE_ADMIN_GROUP: "
                        "comma-separated; default maas-admins)")
    p.add_argument("--session-secret-file", default=_env("session_secret_file", "") or None,
                   help="file with the key signing session cookies (default: random per process)")
    p.add_argument("--redis-url", default=_env("redis_url", "") or None,
                   help="keep sessions in this Redis, shared by every replica (redis://[:PASSWORD@]HOST:PORT/DB; "
                        "needs --session-secret-file); default: in this process (one replica)")
    p.add_argument("--oidc-issuer-url", default=_env("oidc_issuer_url", "") or None)
    p.add_argument("--oidc-client-id", default=_env("oidc_client_id", "") or None)
    p.add_argument("--oidc-client-secret-file", default=_env("oidc_client_secret_file", "") or None)
    p.add_argument("--oidc-ca-file", default=_env("oidc_ca_file", "") or None,
                   help="CA bundle for the issuer's TLS certificate")
    p.add_argument("--oidc-scope", dest="oidc_scopes", action="append", default=[],
                   help="scope to request (repeatable; default: openid profile groups)")
    billing_flags.register(p)
    p.add_argument("--log-format", choices=["auto", "json", "console"], default=env_default("log_format", "auto"))
    p.add_argument("--log-level", default=env_default("log_level", "info"))


def _repeated(flags: list[str], env: str) -> tuple[str, ...]:
    """The repeated flag, else the comma-separated environment variable (a list has no single-value default)."""
    return tuple(flags) or tuple(u.strip() for u in _env(env).split(",") if u.strip())


def settings_from_args(args: argparse.Namespace) -> ConsoleSettings:
    oidc = None
    if args.oidc_issuer_url:
        if not args.oidc_client_id or not args.oidc_client_secret_file:
            raise SystemExit("--oidc-issuer-url needs --oidc-client-id and --oidc-client-secret-file")
        oidc = OidcSettings(issuer=args.oidc_issuer_url, client_id=args.oidc_client_id,
                            client_secret=Path(args.oidc_client_secret_file).read_text().strip(),
                            ca_file=args.oidc_ca_file,
                            scopes=tuple(args.oidc_scopes) or DEFAULT_SCOPES)
    secret = Path(args.session_secret_file).read_text().strip() if args.session_secret_file else ""
    if args.redis_url and not secret:
        raise SystemExit("--redis-url needs --session-secret-file (the same key on every replica)")
    return ConsoleSettings(
        host=args.host, port=args.port, public_url=args.public_url or f"http://{args.host}:{args.port}",
        kubeconfig=args.kubeconfig, maas_api_url=args.maas_api_url,
        gateway_urls=_repeated(args.gateway_urls, "gateway_url"),
        subscription_namespace=args.subscription_namespace, model_namespace=args.model_namespace,
        admin_groups=_repeated(args.admin_groups, "admin_group") or ConsoleSettings().admin_groups,
        session_secret=secret, oidc=oidc, redis_url=args.redis_url, default_gateway=args.default_gateway,
        billing=billing_flags.settings_from_args(args),
    )


def run(args: argparse.Namespace) -> int:
    from maasctl.console.app import serve_async
    from maasctl.logging import configure_logging

    configure_logging(fmt=args.log_format, level=args.log_level)
    try:
        asyncio.run(serve_async(settings_from_args(args)))
    except KeyboardInterrupt:
        return 130
    return 0
