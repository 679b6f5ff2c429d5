"""`maasctl keys revoke-subscription`: the command the subscription key-cleanup Job runs (seed 000, safe deletion).

It calls maas-api's subscription-scoped revocation endpoint with the pod's service-account token; only that
subscription's keys are revoked (soft delete: the validation path rejects them at once). The controller side
that creates the Jobs is `reconcilers.cleanup`. Every deleted subscription starts one of these processes, so
this module imports an HTTP client and nothing else (no Kubernetes client, no database driver).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from maasctl.settings import ControllerSettings, env_default

__all__ = ["REVOKE_PATH", "RevocationError", "register", "revoke_subscription_keys", "run"]

REVOKE_PATH: Final = "/internal/v1/subscriptions/{namespace}/{name}/api-keys"
SA_TOKEN_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class RevocationError(Exception):
    """maas-api did not confirm the revocation."""


def revoke_subscription_keys(
    maas_api_url: str, subscription: str, token: str, *, ca_file: str | None = None, timeout: float = 30.0
) -> int:
    """Revoke every API key bound to `subscription` (`<namespace>/<name>`); returns how many were revoked."""
    import httpx

    namespace, sep, name = subscription.partition("/")
    if not sep or not namespace or not name:
        raise RevocationError(f"--subscription must be <namespace>/<name>, not {subscription!r}")
    url = maas_api_url.rstrip("/") + REVOKE_PATH.format(namespace=namespace, name=name)
    verify: bool | str = ca_file if ca_file else True
    try:
        resp = httpx.delete(url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout, verify=verify)
    except httpx.HTTPError as exc:
        raise RevocationError(f"maas-api unreachable at {maas_api_url}: {exc!r}") from exc
    if resp.status_code != 200:
        raise RevocationError(f"maas-api answered {resp.status_code}: {resp.text[:300]}")
    body = resp.json()
    return int(body.get("revokedCount", body.get("revoked_count", 0)))


def register(subparsers: Any) -> argparse.ArgumentParser:
    keys: argparse.ArgumentParser = subparsers.add_parser(
        "keys", help="API key maintenance (run by the controller's Jobs)")
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    revoke = ksub.add_parser("revoke-subscription",
                             help="revoke every API key bound to one subscription (the deletion cleanup Job)")
    revoke.add_argument("--subscription", required=True, help="<namespace>/<name> of the MaaSSubscription")
    revoke.add_argument("--maas-api-url", default=env_default("maas_api_url", ControllerSettings().maas_api_url))
    revoke.add_argument("--token-file", default=env_default("maas_api_token_file", SA_TOKEN_FILE),
                        help="file holding the bearer token for maas-api (default: the pod's service account)")
    revoke.add_argument("--ca-file", default=env_default("maas_api_ca_file", "") or None,
                        help="CA bundle for an https maas-api URL")
    return keys


def run(args: argparse.Namespace) -> int:
    try:
        token = Path(args.token_file).read_text().strip()
        count = revoke_subscription_keys(args.maas_api_url, args.subscription, token, ca_file=args.ca_file)
    except (OSError, RevocationError) as exc:
        print(f"revoking the API keys of {args.subscription} failed: {exc}", file=sys.stderr)
        return 1
    print(f"revoked {count} API key(s) of subscription {args.subscription}")
    return 0
