"""Every generated manifest under `manifests/`: the CRDs of both operators (MaaS and billing) and the admission
policies, rendered by `api.crdgen`. The list of what is rendered lives here, at the top, because it spans
packages that must not know each other (`api` is the bottom layer; `billing.api` builds on it).
`hack/gen_crds.py` and `maasctl gen-crds` write it; a unit test compares it with the checked-in files.
"""

from __future__ import annotations

from pathlib import Path

from maasctl.api import admission, crdgen
from maasctl.billing.api import KINDS as BILLING_KINDS

__all__ = ["render_all", "stale_files", "write_all"]


def render_all(subscription_namespace: str | None = None) -> dict[str, str]:
    """Every generated manifest, as ``{path relative to manifests/: YAML text}``.

    ``subscription_namespace`` overrides the namespace the admission policy accepts subscriptions and auth
    policies in (the checked-in files use the default).
    """
    files = {crdgen.crd_file_name(kind): crdgen.to_yaml(crdgen.crd(kind)) for kind in (*crdgen.KINDS, *BILLING_KINDS)}
    docs = admission.manifests(subscription_namespace)
    files[f"{crdgen.ADMISSION_DIR}/{admission.FILE_NAME}"] = crdgen.to_yaml(*docs)
    files[f"{crdgen.FINALIZER_DIR}/{admission.FINALIZER_FILE_NAME}"] = crdgen.to_yaml(*admission.finalizer_manifests())
    return files


def write_all(manifests_dir: Path) -> list[Path]:
    """Write ``render_all()`` under ``manifests_dir``; return the files that changed."""
    changed = []
    for rel, text in render_all().items():
        path = manifests_dir / rel
        if path.exists() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        changed.append(path)
    return changed


def stale_files(manifests_dir: Path) -> list[str]:
    """Generated files that are missing or differ from ``render_all()`` (empty when up to date)."""
    stale = []
    for rel, text in render_all().items():
        path = manifests_dir / rel
        if not path.exists() or path.read_text() != text:
            stale.append(rel)
    return stale
