"""Money is never a float: no float literal, no `float(...)`, no `float` annotation anywhere in the billing
package (the money paths and everything around them), and no model field of a billing kind is a float."""

from __future__ import annotations

import ast
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import maasctl.billing
from maasctl.billing.api import KINDS

PACKAGE = Path(maasctl.billing.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))


def float_uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float):
            found.append((node.lineno, f"float literal {node.value!r}"))
        elif isinstance(node, ast.Name) and node.id == "float":
            found.append((node.lineno, "the name float (call, annotation or isinstance)"))
        elif isinstance(node, ast.Attribute) and node.attr in ("float", "float_info"):
            found.append((node.lineno, f"attribute .{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value == "float":
            found.append((node.lineno, "the string 'float' (a string annotation?)"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found.append((node.lineno, "true division (int / int is a float)"))
    return found


def test_the_scan_sees_the_whole_package() -> None:
    names = {p.relative_to(PACKAGE).as_posix() for p in SOURCES}
    assert {"money.py", "api/pricebook.py", "api/plan.py", "api/tenant.py"} <= names


def test_the_scan_catches_floats() -> None:
    bad = "x: float = 1.5\ny = float('2')\nz = 1 / 3\n"
    assert len(float_uses(ast.parse(bad))) == 4


def test_no_float_in_the_billing_package() -> None:
    offenders = [f"{path.relative_to(PACKAGE)}:{line}: {what}"
                 for path in SOURCES for line, what in float_uses(ast.parse(path.read_text(), str(path)))]
    assert offenders == []


def leaf_types(model: type[BaseModel], seen: set[type[BaseModel]]) -> list[tuple[str, Any]]:
    if model in seen:
        return []
    seen.add(model)
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        stack = [info.annotation]
        while stack:
            tp = stack.pop()
            args = typing.get_args(tp)
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                out += [(f"{name}.{n}", t) for n, t in leaf_types(tp, seen)]
            elif args:
                stack.extend(a for a in args if a is not type(None))
            else:
                out.append((name, tp))
    return out


def test_no_model_field_is_a_float_and_amounts_are_decimals() -> None:
    leaves = [(f"{kind.__name__}.{name}", tp) for kind in KINDS for name, tp in leaf_types(kind, set())]
    assert not [name for name, tp in leaves if tp is float]
    decimals = {name for name, tp in leaves if tp is Decimal}
    assert {"PriceBook.spec.skus.rates", "PriceBook.spec.committed_use.monthly_price",
            "PriceBook.spec.volume_tiers.discount_pct", "TenantAccount.spec.reload_policy.reload_amount",
            "TenantAccount.status.balance", "Reservation.spec.monthly_price", "BudgetPolicy.spec.caps.amount",
            "BudgetPolicy.status.current_spend"} <= decimals
