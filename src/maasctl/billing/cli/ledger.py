"""`maasctl billing ledger show|credit|adjust|verify`: a tenant's entries and balance; audited manual entries.
`maasctl billing rerate`: re-rate a tenant's period with a corrected PriceBook, by adjustment entries.

Manual entries need a reason, an actor (default: $USER) and an id the operator chooses (the natural key: running
the same command twice records it once). Nothing is ever edited: a wrong credit is undone by an adjustment.
A manual entry is refused unless its tenant is a TenantAccount that exists (read with `--kubeconfig`, else the
in-cluster config, else `$KUBECONFIG` / ~/.kube/config): money posted to a mistyped tenant would sit in a wallet
nobody owns, and the ledger is append-only.
The commands' flags are in `billing.py` (parsing the command line imports no database driver).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import aiohttp
from kubernetes_asyncio.config import ConfigException

from maasctl.billing import money
from maasctl.billing.api.kinds import TENANT_ACCOUNT
from maasctl.billing.ledger import Ledger, adjustment, credit
from maasctl.billing.ledger.entries import Transaction
from maasctl.runtime import ApiError, Client, NotFound
from maasctl.runtime.connect import connect

if TYPE_CHECKING:
    from maasctl.billing.rules.rating import Book

__all__ = ["run_ledger", "run_rerate"]



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



def _when(text: str) -> datetime:
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no timezone (e.g. 2026-11-01T00:00:00Z)")
    return when.astimezone(UTC)


def _parse_book(obj: Any, where: str) -> Book:
    from pydantic import ValidationError

    from maasctl.api import parse
    from maasctl.billing.api import PriceBook
    from maasctl.billing.rules.rating import Book

    try:
        model = parse(PriceBook, obj)
    except (ValidationError, TypeError, AttributeError) as exc:
        raise ValueError(f"{where} is not a PriceBook: {str(exc)[:500]}") from exc
    return Book(str(model.metadata.name), int(model.metadata.generation or 0), model.spec)


def _book_file(path: str) -> Book:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            obj = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path} is not a PriceBook: {str(exc)[:500]}") from exc
    return _parse_book(obj, path)


def _cost_files(paths: list[str]) -> tuple[dict[str, dict[str, Decimal]], dict[str, str]]:
    """Cost data by Secret name from Secret manifests (`data` base64, or `stringData`), in the cost Secret's
    format (docs/billing.md, "Pass-through"). Errors name the file and the key, never a value."""
    import yaml

    from maasctl.billing.controller.reconcilers.costs import decode
    from maasctl.billing.rules import rating

    costs: dict[str, dict[str, Decimal]] = {}
    units: dict[str, str] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                obj = yaml.safe_load(f)
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            plain = (obj.get("stringData") or {}) if isinstance(obj, dict) else None
            if not isinstance(meta, dict) or not meta.get("name") or not isinstance(obj.get("data") or {}, dict) \
                    or not isinstance(plain, dict):
                raise rating.CostDataError("is not a Secret with metadata.name and data or stringData")
            name = str(meta["name"])
            data = {**decode(obj), **{str(k): str(v) for k, v in plain.items()}}
            costs[name] = rating.cost_data(data)
            unit = rating.cost_unit(data)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"--cost-file {path} cannot be read: {type(exc).__name__}") from exc
        except rating.CostDataError as exc:
            raise ValueError(f"--cost-file {path} {exc}") from exc
        if unit is not None:
            units[name] = unit
    return costs, units


async def _book_in_cluster(kubeconfig: str | None, namespace: str, name: str) -> Book:
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio import config as k8s_config

    from maasctl.billing.api import GROUP, VERSION, PriceBook
    from maasctl.runtime.connect import connect

    try:
        api = await connect(kubeconfig)
    except (OSError, k8s_config.ConfigException) as exc:
        raise ValueError(f"cannot connect to the cluster: {str(exc)[:300]}") from exc
    try:
        obj = await k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PriceBook.crd.plural, name)
    except k8s.ApiException as exc:
        raise ValueError(f"cannot read PriceBook {namespace}/{name}: {exc.status} {exc.reason}") from exc
    finally:
        await api.close()
    return _parse_book(obj, f"PriceBook {namespace}/{name}")


async def run_rerate(args: argparse.Namespace) -> int:
    from maasctl.billing.controller.rerate import rerate
    from maasctl.billing.controller.usage_source import UsageReader

    if not args.ledger_url or not args.usage_database_url:
        print("--ledger-url and --usage-database-url (or MAASCTL_BILLING_LEDGER_URL, "
              "MAASCTL_BILLING_USAGE_DATABASE_URL) are required", file=sys.stderr)
        return 2
    try:
        since, until = _when(args.since), _when(args.until)
        if not args.reason.strip() or not args.actor.strip():
            raise ValueError("a re-rating needs a reason and an actor")
        namespace, _, name = args.tenant.partition("/")
        if not namespace or not name:
            raise ValueError(f"--tenant {args.tenant!r} is not namespace/name")
        book = (await _book_in_cluster(args.kubeconfig, namespace, args.price_book) if args.price_book
                else _book_file(args.price_book_file))
        costs, cost_units = _cost_files(args.cost_file)
    except ValueError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    ledger = Ledger.from_url(args.ledger_url)
    reader = UsageReader.from_url(args.usage_database_url)
    try:
        await ledger.create_schema()
        try:
            report = await rerate(ledger, reader, args.tenant, book, since, until, reason=args.reason,
                                  actor=args.actor, geo=args.geo, committed_tier=args.committed_tier,
                                  dry_run=args.dry_run, costs=costs, cost_units=cost_units)
        except ValueError as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return 2
        state = "dry run, nothing posted" if args.dry_run else (
            f"{len(report.inserted)} adjustment(s) posted" if report.inserted else
            "nothing to post" if not report.entries else "already posted")
        balance = money.quantize(await ledger.balance(args.tenant))
        if args.output == "json":
            print(json.dumps({"tenant": args.tenant, "priceBook": book.name, "generation": book.generation,
                              "from": since.isoformat(), "to": until.isoformat(), "records": report.records,
                              "changed": report.changed, "unchanged": report.unchanged, "delta": str(report.delta),
                              "unpriced": report.unpriced, "missing": report.missing,
                              "fees": {"charged": report.fees, "changed": report.fees_changed,
                                       "delta": str(report.fee_delta), "unpriced": report.fees_unpriced},
                              "entries": [e.key for e in report.entries], "inserted": report.inserted,
                              "conflicts": report.conflicts, "dryRun": args.dry_run, "balance": str(balance)},
                             indent=2))
        else:
            print(f"tenant {args.tenant}  {since.isoformat()} .. {until.isoformat()}  with {book.name}@"
                  f"{book.generation}")
            print(f"{report.records} charged record(s): {report.changed} re-rated, {report.unchanged} unchanged, "
                  f"{len(report.unpriced)} not priced by the corrected book, {len(report.missing)} no longer in "
                  f"maas-api; charges change by {report.delta}; {state}")
            if report.fees:
                print(f"{report.fees} committed-use fee(s): {report.fees_changed} re-rated, "
                      f"{len(report.fees_unpriced)} not priced by the corrected book; fees change by "
                      f"{report.fee_delta}")
            for rid, why in [*report.unpriced.items(), *report.fees_unpriced.items()][:10]:
                print(f"  not re-rated {rid}: {why}")
            for tx in report.entries:
                print(f"  {tx.key}")
            print(f"balance of {args.tenant}: {balance}")
        if report.conflicts:
            print("refused: an adjustment with the same key and different content (actor or reason) exists",
                  file=sys.stderr)
            return 1
        return 0
    finally:
        await reader.close()
        await ledger.close()
