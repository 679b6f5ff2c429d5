"""`maasctl subscription`: write a MaaSSubscription the way administrators think about limits (seed 004).

    maasctl subscription render premium --model llm/granite --limit "100M per Hour" --limit "1000M per Day" \\
        --group premium-users [--user alice] [--priority 10] [--unlimited llm/tiny] [--apply]

Limits are `<tokens> per <window>` or `<tokens>/<window>`: tokens like `100M`, `1.5B`, `250k`, `5000`; windows
`Minute`, `Hour`, `Day` (or the CRD's own `1m`, `24h`). Every `--limit` applies to every `--model`. The CRD
keeps plain integers; the parsing rules and bounds are `contract.quantities` (the console uses the same).
`render` prints the object as YAML; `--apply` also applies it (server-side) with the kubeconfig's user, so
admission (schema, CEL, the subscription-namespace policy) checks it like any `kubectl apply`.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any

import yaml

__all__ = ["parse_tier", "register", "render", "run"]

_TIER = re.compile(r"^\s*(?P<tokens>[^/]+?)\s*(?:/|\s+per\s+|\s+tokens\s+per\s+)\s*(?P<window>.+?)\s*$", re.I)


class SubscriptionCliError(Exception):
    """A problem to print on stderr (exit code 1)."""


def parse_tier(text: str) -> dict[str, Any]:
    """`100M per Hour` -> `{"limit": 100000000, "window": "1h"}`."""
    # imported here, like every command's work: `maasctl` parses its command line without the API types
    from maasctl.contract.quantities import InvalidQuantityError, parse_limit, parse_window_name
    from maasctl.contract.windows import InvalidWindowError

    match = _TIER.match(text.replace("tokens per", "per"))
    if match is None:
        raise SubscriptionCliError(f"{text!r}: write a limit as '<tokens> per <window>', e.g. '100M per Hour'")
    try:
        return {"limit": parse_limit(match["tokens"]), "window": parse_window_name(match["window"])}
    except (InvalidQuantityError, InvalidWindowError) as exc:
        raise SubscriptionCliError(str(exc)) from exc


def _ref(text: str) -> dict[str, str]:
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name:
        raise SubscriptionCliError(f"{text!r}: a model is <namespace>/<MaaSModelRef name>")
    return {"namespace": namespace, "name": name}


def render(args: argparse.Namespace) -> dict[str, Any]:
    """The MaaSSubscription described by the command line."""
    from maasctl.api import API_VERSION

    tiers = [parse_tier(t) for t in args.limit or ()]
    if args.model and not tiers:
        raise SubscriptionCliError("--model needs at least one --limit (or use --unlimited)")
    refs: list[dict[str, Any]] = [{**_ref(m), "tokenRateLimits": tiers} for m in args.model or ()]
    refs += [{**_ref(m), "unlimited": True} for m in args.unlimited or ()]
    if not refs:
        raise SubscriptionCliError("name at least one --model or --unlimited model")
    if not args.user and not args.group:
        raise SubscriptionCliError("name at least one --user or --group (use --user '*' for everyone)")
    owner: dict[str, Any] = {}
    if args.group:
        owner["groups"] = [{"name": g} for g in args.group]
    if args.user:
        owner["users"] = list(args.user)
    spec: dict[str, Any] = {"owner": owner, "modelRefs": refs}
    if args.priority is not None:
        spec["priority"] = args.priority
    return {"apiVersion": API_VERSION, "kind": "MaaSSubscription",
            "metadata": {"name": args.name, "namespace": args.namespace}, "spec": spec}


async def _apply(obj: dict[str, Any], kubeconfig: str | None) -> None:
    from maasctl.runtime import Client
    from maasctl.runtime.connect import connect

    api = await connect(kubeconfig)
    try:
        await Client(api).apply(obj, field_manager="maasctl-cli")
    finally:
        await api.close()


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "subscription", help="write MaaSSubscriptions with limits like '100M per Hour'")
    sub = parser.add_subparsers(dest="subscription_command", required=True)
    r = sub.add_parser("render", help="print (and with --apply, apply) a MaaSSubscription")
    r.add_argument("name")
    r.add_argument("--namespace", default="models-as-a-service", help="the subscription namespace")
    r.add_argument("--model", action="append", help="<namespace>/<MaaSModelRef> with the --limit tiers")
    r.add_argument("--unlimited", action="append", help="<namespace>/<MaaSModelRef> without a token budget")
    r.add_argument("--limit", action="append", help="'<tokens> per <window>', e.g. '100M per Hour' (repeatable)")
    r.add_argument("--user", action="append", help="user entitled to it ('*' = every authenticated user)")
    r.add_argument("--group", action="append", help="group entitled to it")
    r.add_argument("--priority", type=int, default=None, help="higher wins among a user's subscriptions")
    r.add_argument("--apply", action="store_true", help="apply it with the kubeconfig's user")
    r.add_argument("--kubeconfig", default=None)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        obj = render(args)
    except SubscriptionCliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(yaml.safe_dump(obj, sort_keys=False), end="")
    if args.apply:
        asyncio.run(_apply(obj, args.kubeconfig))
    return 0
