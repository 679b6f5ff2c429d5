"""Regenerate manifests/crds and manifests/admission from the pydantic models in src/maasctl/api.

Usage: python hack/gen_crds.py [--check]   (--check exits 1 and lists stale files instead of writing)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from maasctl import manifests

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only report files that are out of date")
    args = parser.parse_args(argv)
    if args.check:
        stale = manifests.stale_files(MANIFESTS)
        for rel in stale:
            print(f"out of date: manifests/{rel}", file=sys.stderr)
        return 1 if stale else 0
    for path in manifests.write_all(MANIFESTS):
        print(f"wrote {path.relative_to(MANIFESTS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
