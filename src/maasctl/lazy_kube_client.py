"""Load kubernetes-asyncio's generated client packages lazily: a name is imported when it is first used.

Why: ``import kubernetes_asyncio`` runs the ``__init__`` of ``client``, ``client.api`` and ``client.models``,
which import ~60 API classes and ~700 generated models before the first request. maasctl uses a handful of them,
so a (re)started controller spent about a third of its start before the first list on imports it never needs.

How: for each package in ``LAZY_PACKAGES`` whose ``__init__`` is nothing but re-exports (``from <package>.<module>
import <Name>`` and ``import <package>.<module> as <name>``) plus a docstring and constant assignments, the
re-exports become a module ``__getattr__`` (PEP 562) that imports the named module on first access and keeps the
value. Anything else in such an ``__init__`` (a later library version that changes it) makes the package load as
usual, so a surprise costs time, never behaviour. Installed by ``maasctl/__init__`` before anything imports
kubernetes-asyncio; a process that imported it earlier keeps the eager packages.

The modules in ``LAZY_MODULES`` are imported by kubernetes-asyncio for a path maasctl does not take (its
``Configuration`` imports urllib3, ~30 ms, for one basic-auth helper): they load with the standard library's
``importlib.util.LazyLoader``, which runs a module on its first attribute access.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from collections.abc import Sequence
from typing import Any

LAZY_PACKAGES = frozenset({
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
})

LAZY_MODULES = frozenset({"urllib3"})

_FROM_IMPORT = re.compile(r"^from ([\w.]+) import (\w+)[ \t]*(?:#.*)?$", re.MULTILINE)
_IMPORT_AS = re.compile(r"^import ([\w.]+) as (\w+)[ \t]*(?:#.*)?$", re.MULTILINE)

# name -> (module to import, attribute of it, or None for the module itself)
ReExports = dict[str, tuple[str, str | None]]


def re_exports(package: str, source: str) -> tuple[ReExports, ast.Module] | None:
    """The package's re-exports and the rest of its ``__init__``, or None if that rest does anything else."""
    table: ReExports = {}
    for module, name in _FROM_IMPORT.findall(source):
        if module != "__future__":
            table[name] = (module, name)
    for module, name in _IMPORT_AS.findall(source):
        table[name] = (module, None)
    if any(not module.startswith(package + ".") for module, _ in table.values()):
        return None
    rest = _IMPORT_AS.sub("", _FROM_IMPORT.sub(lambda m: m[0] if m[1] == "__future__" else "", source))
    tree = ast.parse(rest)
    return (table, tree) if all(_is_inert(node) for node in tree.body) else None


def _is_inert(node: ast.stmt) -> bool:
    """A docstring, ``from __future__``, or an assignment of a constant or a list of constants (``__all__``)."""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.ImportFrom):
        return node.module == "__future__"
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        value = node.value
        if isinstance(value, (ast.List, ast.Tuple)):
            return all(isinstance(e, ast.Constant) for e in value.elts)
        return isinstance(value, ast.Constant)
    return False


class _LazyPackageLoader:
    """Executes the inert rest of the ``__init__`` and defers every re-export to first use."""

    def __init__(self, table: ReExports, rest: ast.Module, filename: str) -> None:
        self._table = table
        self._rest = rest
        self._filename = filename

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        exec(compile(self._rest, self._filename, "exec"), module.__dict__)  # the inert rest: constants
        table = self._table

        def __getattr__(name: str) -> Any:  # PEP 562
            target = table.get(name)
            if target is None:
                return _submodule(module, name)
            value: Any = importlib.import_module(target[0])
            if target[1] is not None:
                value = getattr(value, target[1])
            setattr(module, name, value)
            return value

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dict__.setdefault("__all__", list(table))


def _submodule(package: types.ModuleType, name: str) -> types.ModuleType:
    """``package.name`` for a submodule nobody imported yet, as the eager ``__init__`` would have set it."""
    full = f"{package.__name__}.{name}"
    if name.startswith("__"):  # a probe for a dunder (inspect, pickle, pytest): never a submodule
        raise AttributeError(f"module {package.__name__!r} has no attribute {name!r}")
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if exc.name != full:
            raise
        raise AttributeError(f"module {package.__name__!r} has no attribute {name!r}") from None


class _LazyPackageFinder:
    """A meta path finder that answers only for ``LAZY_PACKAGES`` and ``LAZY_MODULES`` and hands their loading
    to a lazy loader."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in LAZY_MODULES:
            return _loaded_on_first_use(importlib.machinery.PathFinder.find_spec(fullname, path))
        if fullname not in LAZY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if spec is None or not isinstance(loader, importlib.machinery.SourceFileLoader):
            return spec
        source = loader.get_source(fullname)
        parsed = re_exports(fullname, source) if source is not None else None
        if parsed is None:
            return spec
        spec.loader = _LazyPackageLoader(parsed[0], parsed[1], loader.get_filename(fullname))  # type: ignore[assignment]
        return spec


def _loaded_on_first_use(spec: importlib.machinery.ModuleSpec | None) -> importlib.machinery.ModuleSpec | None:
    if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
        spec.loader = importlib.util.LazyLoader(spec.loader)
    return spec


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once; packages already imported stay as they are."""
    if not any(isinstance(finder, _LazyPackageFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _LazyPackageFinder())
