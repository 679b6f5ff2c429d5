"""The billing models in Python: seed examples parse, amounts are Decimals that dump back to the same strings,
and what the API server refuses the models refuse too (so the controller never trusts a bad object)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from maasctl.api import dump, parse
from maasctl.api.crdgen import crd
from maasctl.billing.api import KINDS, PriceBook, TenantAccount
from maasctl.billing.api.plan import Plan
from maasctl.billing.api.reservation import Reservation

from . import examples

KIND_BY_NAME = {kind.__name__: kind for kind in KINDS}


@pytest.mark.parametrize("name", sorted(examples.ALL))
def test_examples_parse_and_dump_back(name: str) -> None:
    obj = examples.example(name, "ns")
    model = parse(KIND_BY_NAME[obj["kind"]], obj)
    assert dump(model)["spec"] == examples.stored_spec(name)


def test_amounts_are_decimals_written_back_as_given() -> None:
    book = parse(PriceBook, examples.example("pricebook", "ns"))
    assert book.spec.skus[0].rates["cached_tokens"] == Decimal("0.625")
    assert isinstance(book.spec.skus[1].rates["gpu_seconds"], Decimal)
    assert dump(book)["spec"]["skus"][1]["rates"]["gpu_seconds"] == "0.001250"
    tenant = parse(TenantAccount, examples.example("tenant-prepaid", "ns"))
    assert tenant.spec.reload_policy is not None and tenant.spec.reload_policy.reload_amount == Decimal(25000)
    assert tenant.spec.grace_policy is not None and tenant.spec.grace_policy.grace_amount == Decimal("50")


def test_signed_balance_and_special_json_names() -> None:
    obj = examples.example("tenant-showback", "ns")
    obj["status"] = {"balance": "-12.50", "pendingReloadIntentID": "pi_1", "lastPSPCustomerSecretRef": "s"}
    tenant = parse(TenantAccount, obj)
    assert tenant.status is not None and tenant.status.balance == Decimal("-12.50")
    assert dump(tenant)["status"] == {"balance": "-12.50", "pendingReloadIntentID": "pi_1",
                                      "lastPSPCustomerSecretRef": "s"}


@pytest.mark.parametrize("rate", [2.5, "2.5.0", "-1", "1e3", "0.1234567", 3])
def test_bad_amounts_are_refused_in_python_too(rate: object) -> None:
    obj = examples.example("pricebook", "ns")
    obj["spec"]["skus"][0]["rates"]["prompt_tokens"] = rate
    with pytest.raises(ValidationError, match="rates values"):
        parse(PriceBook, obj)


def test_plan_defaults_and_reservation_class_alias() -> None:
    obj = examples.example("plan", "ns")
    del obj["spec"]["geoScopes"]
    assert parse(Plan, obj).spec.geo_scopes == ["*"]
    rsv = parse(Reservation, examples.example("reservation-guaranteed", "ns"))
    assert rsv.spec.class_ == "Guaranteed" and dump(rsv)["spec"]["class"] == "Guaranteed"


def test_printer_columns_as_the_seed_lists_them() -> None:
    def columns(kind: type) -> list[tuple[str, str, int]]:
        version = crd(kind)["spec"]["versions"][0]
        return [(c["name"], c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]

    assert columns(Plan) == [("TargetKind", ".spec.targetRef.kind", 1), ("TargetName", ".spec.targetRef.name", 1),
                             ("Age", ".metadata.creationTimestamp", 0)]
    assert [c[0] for c in columns(PriceBook)] == ["State", "Effective", "Currency", "Age"]
    assert [c[0] for c in columns(TenantAccount)] == ["State", "Mode", "Balance", "Age"]
    assert [c[0] for c in columns(Reservation)] == ["State", "Class", "SKU", "Count", "Age"]
    scopes = {kind.__name__: crd(kind)["spec"]["scope"] for kind in KINDS}
    assert scopes.pop("BillingConsole") == "Cluster" and set(scopes.values()) == {"Namespaced"}
