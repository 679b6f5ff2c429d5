"""Every public name listed in __all__ exists (pins the public surface of builders and policy)."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "maasctl.builders.authpolicy", "maasctl.builders.celcheck", "maasctl.builders.credentials",
    "maasctl.builders.gatewayauth",
    "maasctl.builders.httproute",
    "maasctl.builders.inferenceobjective", "maasctl.builders.names", "maasctl.builders.refs",
    "maasctl.builders.status", "maasctl.builders.trlp", "maasctl.builders.validation",
    "maasctl.contract.cel", "maasctl.contract.health", "maasctl.contract.labels", "maasctl.contract.quantities",
    "maasctl.contract.selection", "maasctl.contract.views", "maasctl.contract.windows",
]


@pytest.mark.parametrize("module_name", MODULES)
def test_all_names_exist(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert hasattr(module, name), f"{module_name}.{name}"


@pytest.mark.parametrize("package", ["maasctl.builders", "maasctl.contract"])
def test_packages_list_every_module(package: str) -> None:
    pkg = importlib.import_module(package)
    for name in pkg.__all__:
        importlib.import_module(f"{package}.{name}")
    assert sorted(pkg.__all__) == sorted(m.rsplit(".", 1)[1] for m in MODULES if m.startswith(package + "."))
