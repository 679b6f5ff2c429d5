"""`maasctl billing ledger show|credit|adjust|verify`: a tenant's entries and balance; audited manual entries.

Manual entries need a reason, an actor (default: $USER) and an id the operator chooses (the natural key: running
the same command twice records it once). Nothing is ever edited: a wrong credit is undone by an adjustment.
A manual entry is refused unless its tenant is a TenantAccount that exists (read with `--kubeconfig`, else the
in-cluster config, else `$KUBECONFIG` / ~/.kube/config): money posted to a mistyped tenant would sit in a wallet
nobody owns, and the ledger is append-only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.config import ConfigException

from maasctl.billing import money
from maasctl.billing.kinds import TENANT_ACCOUNT
from maasctl.billing.ledger import Ledger, adjustment, credit
from maasctl.billing.ledger.entries import Transaction
from maasctl.runtime import ApiError, Client, NotFound
from maasctl.runtime.connect import connect
from maasctl.settings import env_default

__all__ = ["register_ledger", "run_ledger"]


def register_ledger(sub: Any) -> None:
    ledger = sub.add_parser("ledger", help="a tenant's ledger entries and balance; manual credits and adjustments")
    ledger.add_argument("--ledger-url", default=env_default("billing_ledger_url", "") or None,
                        help="the ledger database (postgresql+asyncpg://... or sqlite+aiosqlite:///path)")
    cmds = ledger.add_subparsers(dest="ledger_command", required=True)
    show = cmds.add_parser("show", help="a tenant's balance and latest entries")
    show.add_argument("--tenant", required=True, help="namespace/name of the TenantAccount")
    show.add_argument("--limit", type=int, default=50)
    show.add_argument("-o", "--output", choices=["table", "json"], default="table")
    for name, what in (("credit", "add money to a tenant's wallet"),
                       ("adjust", "correct a tenant's wallet by a signed amount")):
        cmd = cmds.add_parser(name, help=what)
        cmd.add_argument("--tenant", required=True, help="namespace/name of the TenantAccount")
        cmd.add_argument("--amount", required=True, help='decimal string, e.g. "25.00" (adjust: may be negative)')
        cmd.add_argument("--reason", required=True, help="why (kept in the ledger for audit)")
        cmd.add_argument("--id", required=True, help="your id for this entry (idempotency: used once)")
        cmd.add_argument("--actor", default=os.environ.get("USER", ""), help="who (default: $USER)")
        cmd.add_argument("--currency", default="USD")
        cmd.add_argument("--kubeconfig", default=env_default("kubeconfig", "") or None,
                         help="where the TenantAccount is checked (default: in-cluster config, then $KUBECONFIG "
                              "or ~/.kube/config)")
    cmds.add_parser("verify", help="check that every transaction, and the ledger, balances")


def _manual(args: argparse.Namespace) -> Transaction:
    now = datetime.now(UTC)
    if args.ledger_command == "credit":
        return credit(args.id, args.tenant, now, money.parse(args.amount), reason=args.reason, actor=args.actor,
                      currency=args.currency)
    return adjustment(args.id, args.tenant, now, money.parse_signed(args.amount), reason=args.reason, actor=args.actor,
                      currency=args.currency)


async def tenant_problem(tenant: str, kubeconfig: str | None) -> str | None:
    """Why `tenant` (namespace/name) cannot take a manual entry, or None when its TenantAccount exists."""
    namespace, _, name = tenant.partition("/")
    if not namespace or not name or "/" in name:
        return f"--tenant must be namespace/name of a TenantAccount, not {tenant!r}"
    try:
        api = await connect(kubeconfig)
    except (ConfigException, OSError) as exc:
        return f"cannot check that TenantAccount {tenant} exists: no cluster access ({exc}); give --kubeconfig"
    try:
        await Client(api).get(TENANT_ACCOUNT, name, namespace)
    except NotFound:
        return (f"TenantAccount {tenant} does not exist (kubectl get tenantaccounts -n {namespace} lists the "
                "tenants there): nothing recorded")
    except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
        return f"cannot check that TenantAccount {tenant} exists: {type(exc).__name__}: {exc}"[:500]
    finally:
        await api.close()
    return None


async def run_ledger(args: argparse.Namespace) -> int:
    if not args.ledger_url:
        print("--ledger-url (or MAASCTL_BILLING_LEDGER_URL) is required", file=sys.stderr)
        return 2
    ledger = Ledger.from_url(args.ledger_url)
    try:
        await ledger.create_schema()
        if args.ledger_command == "verify":
            problems = await ledger.verify()
            for p in problems:
                print(p)
            print("the ledger balances" if not problems else f"{len(problems)} problem(s)")
            return 0 if not problems else 1
        if args.ledger_command in ("credit", "adjust"):
            try:
                tx = _manual(args)
            except (ValueError, money.MoneyError) as exc:
                print(f"refused: {exc}", file=sys.stderr)
                return 2
            problem = await tenant_problem(args.tenant, args.kubeconfig)
            if problem is not None:
                print(f"refused: {problem}", file=sys.stderr)
                return 2
            result = await ledger.post([tx])
            if result.conflicts:
                print(f"refused: id {args.id} was already used for a different entry", file=sys.stderr)
                return 1
            state = "recorded" if result.inserted else "already recorded"
            print(f"{tx.key} {state}; balance of {args.tenant}: {money.quantize(await ledger.balance(args.tenant))}")
            return 0
        balance = await ledger.balance(args.tenant)
        items = await ledger.entries(args.tenant, limit=args.limit)
        if args.output == "json":
            print(json.dumps({"tenant": args.tenant, "balance": str(balance), "entries": [
                {"id": e.id, "key": e.key, "kind": e.kind, "amount": str(e.amount), "currency": e.currency,
                 "occurredAt": e.occurred_at.isoformat(), "recordedAt": e.recorded_at.isoformat(),
                 "actor": e.actor, "reason": e.reason, "tokens": e.tokens, "details": e.details} for e in items]},
                default=str, indent=2))
            return 0
        print(f"tenant {args.tenant}  balance {balance}")
        print(f"{'ID':>8}  {'OCCURRED':20}  {'KIND':10}  {'AMOUNT':>16}  {'TOKENS':>9}  KEY / REASON")
        for e in items:
            what = e.key + (f"  ({e.reason}, by {e.actor})" if e.reason else "")
            book = e.details.get("priceBook")
            if book:
                what += f"  [{book}@{e.details.get('generation')} {e.details.get('sku', '')}]"
            print(f"{e.id:>8}  {e.occurred_at.strftime('%Y-%m-%dT%H:%M:%SZ'):20}  {e.kind:10}  {e.amount!s:>16}  "
                  f"{e.tokens:>9}  {what}")
        return 0
    finally:
        await ledger.close()
