"""Load one guardrail configuration with the real engine (NVIDIA NeMo Guardrails), without serving it.

Runs with the engine's Python (its own virtualenv or image), not maasctl's: standard library only, and
`nemoguardrails` imported at run time. The controller runs it (`--guardrails-check-command`) before a
configuration is deployed; a configuration it cannot load is reported in the GuardrailConfig's status.

    stdin:  {"name": "<config id>", "config_yaml": "...", "rails_co": "...", "env": ["GUARDRAILS_X_API_KEY"]}
    stdout: {"ok": true} | {"ok": false, "error": "<what the engine said>"}

The API key variables are set to a placeholder: loading checks that they exist, never calls a model. Hub
downloads are switched off (HF_HUB_OFFLINE), so a configuration needing one fails here instead of at run time.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def check(request: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    for name in request.get("env") or ():
        os.environ.setdefault(str(name), "placeholder")
    rails = importlib.import_module("nemoguardrails")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / str(request.get("name") or "config")
        folder.mkdir()
        (folder / "config.yml").write_text(str(request.get("config_yaml") or ""))
        if request.get("rails_co"):
            (folder / "rails.co").write_text(str(request["rails_co"]))
        try:
            config = rails.RailsConfig.from_path(str(folder))
            rails.LLMRails(config)
        except Exception as exc:  # the engine's own error, whatever its type, is the answer
            message = " ".join(f"{type(exc).__name__}: {exc}".replace(str(folder) + "/", "").split())
            return {"ok": False, "error": message[:900]}
    return {"ok": True}


def main() -> int:
    try:
        request = json.loads(sys.stdin.read())
    except ValueError as exc:
        print(json.dumps({"ok": False, "error": f"bad request: {exc}"}))
        return 2
    print(json.dumps(check(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
