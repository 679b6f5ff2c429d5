"""kubernetes-asyncio's generated packages load lazily under maasctl, and lazily means the same names, the same
objects: a process that imports maasctl sees every public name the eager package has (issue 39: a restarted
controller spent a third of its start importing ~700 models it never uses)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from maasctl.lazy_kube_client import LAZY_PACKAGES, re_exports

_NAMES = """
import importlib, json, sys
{setup}
out = {{}}
for package in {packages!r}:
    module = importlib.import_module(package)
    names = {{n for n in vars(module) if not n.startswith('_')}} | set(getattr(module, '__all__', ()))
    out[package] = sorted(names) if {list_names} else None
print(json.dumps({{'names': out, 'loaded': sorted(m for m in sys.modules if m.startswith('kubernetes_asyncio'))}}))
"""

_RESOLVE = """
import importlib, json
{setup}
resolved = {{}}
for package, names in {names!r}.items():
    module = importlib.import_module(package)
    for name in names:
        value = getattr(module, name)
        resolved[package + '.' + name] = getattr(value, '__module__', None) or value.__name__
print(json.dumps(resolved))
"""


def _run(code: str) -> Any:
    """The JSON a fresh interpreter prints last after running `code`."""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def test_importing_the_client_loads_none_of_its_models_or_apis() -> None:
    code = _NAMES.format(setup="import maasctl\nfrom kubernetes_asyncio import client, config, watch",
                         packages=sorted(LAZY_PACKAGES), list_names=False)
    loaded = set(_run(code)["loaded"])
    assert "kubernetes_asyncio.client" in loaded
    generated = ("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api.")
    assert not any(m.startswith(generated) for m in loaded)
    assert len(loaded) < 60, sorted(loaded)


def test_every_public_name_of_the_eager_packages_resolves_to_the_same_object_lazily() -> None:
    eager = _run(_NAMES.format(setup="", packages=sorted(LAZY_PACKAGES), list_names=True))["names"]
    assert len(eager["kubernetes_asyncio.client.models"]) > 500  # the real generated package, not an empty one
    lazy = _run(_RESOLVE.format(setup="import maasctl", names=eager))
    assert lazy == _run(_RESOLVE.format(setup="", names=eager))
    assert len(lazy) > 700


def test_a_model_deserialised_by_the_api_client_is_the_generated_class() -> None:
    code = ("import asyncio, json, types, maasctl\n"
            "from kubernetes_asyncio.client import ApiClient\n"
            "from kubernetes_asyncio.client.models.v1_object_meta import V1ObjectMeta\n"
            "async def main():\n"
            "    async with ApiClient() as api:\n"
            "        body = types.SimpleNamespace(data=json.dumps({'name': 'n', 'labels': {'a': 'b'}}))\n"
            "        return api.deserialize(body, 'V1ObjectMeta')\n"
            "meta = asyncio.run(main())\n"
            "assert type(meta) is V1ObjectMeta and meta.labels == {'a': 'b'}, meta\n"
            "print(json.dumps({'ok': True}))")
    assert _run(code) == {"ok": True}


def test_an_unknown_name_is_an_attribute_error() -> None:
    code = ("import json, maasctl\n"
            "from kubernetes_asyncio import client\n"
            "try:\n    client.NoSuchModel\nexcept AttributeError as exc:\n    print(json.dumps({'error': str(exc)}))")
    assert _run(code) == {"error": "module 'kubernetes_asyncio.client' has no attribute 'NoSuchModel'"}


def test_urllib3_runs_only_when_the_client_uses_it() -> None:
    """kubernetes-asyncio's Configuration imports urllib3 for its basic-auth header alone: a controller that
    never sends basic auth never runs urllib3, and one that does gets the real helper."""
    code = ("import json, sys, maasctl\n"
            "from kubernetes_asyncio.client import Configuration\n"
            "before = sorted(m for m in sys.modules if m.startswith('urllib3'))\n"
            "config = Configuration()\n"
            "config.username, config.password = 'ada', 'pw'\n"
            "token = config.get_basic_auth_token()\n"
            "import urllib3.util\n"
            "print(json.dumps({'before': before, 'token': token,\n"
            "                  'same': urllib3.util.make_headers is sys.modules['urllib3.util'].make_headers}))")
    assert _run(code) == {"before": ["urllib3"], "token": "Basic YWRhOnB3", "same": True}


PACKAGE = "lib.pkg"


@pytest.mark.parametrize("source", [
    '"""doc"""\nfrom __future__ import absolute_import\n__version__ = "1"\n'
    "from lib.pkg.a import A\nfrom lib.pkg.b import B  # noqa\nimport lib.pkg.sub as sub\n"
    "__all__ = ['A', 'B', 'sub']\n",
])
def test_a_package_of_re_exports_becomes_a_table(source: str) -> None:
    parsed = re_exports(PACKAGE, source)
    assert parsed is not None
    assert parsed[0] == {"A": ("lib.pkg.a", "A"), "B": ("lib.pkg.b", "B"), "sub": ("lib.pkg.sub", None)}


@pytest.mark.parametrize("source", [
    "from lib.pkg.a import A\nregister(A)\n",                      # a call: the package does work at import
    "from lib.pkg.a import A\nfrom other.mod import B\n",          # re-exports from outside the package
    "from lib.pkg.a import (\n    A,\n    B,\n)\n",                # a form the table does not read
    "from lib.pkg.a import *\n",                                   # a star import
    "from lib.pkg.a import A\nif A:\n    x = 1\n",                 # control flow
    "from lib.pkg.a import A\nDEFAULT = A()\n",                    # an assignment that runs code
    "from lib.pkg.a import A\ndef f():\n    pass\n",               # a definition
])
def test_a_package_that_does_anything_else_loads_as_usual(source: str) -> None:
    assert re_exports(PACKAGE, source) is None
