"""The checked-in OpenAPI document of maas-api (`openapi.json` next to this module).

Regenerate after changing the HTTP surface: `python -m maasctl.maasapi.openapi`; a test fails when the
checked-in file and the app disagree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources

DOCUMENT_PATH = Path(__file__).with_name("openapi.json")


def document() -> dict[str, Any]:
    app = create_app(MaasApiSettings(), StaticSources(), StaticAuthenticator({}))
    return app.openapi()


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    DOCUMENT_PATH.write_text(render())
    print(f"wrote {DOCUMENT_PATH}")


if __name__ == "__main__":
    main()
