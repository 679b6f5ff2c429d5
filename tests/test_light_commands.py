"""Processes the suite and a cluster start often stay light: `maasctl` parses its command line without the
Kubernetes client, the database drivers or the web stack, so the key-cleanup Job (`maasctl keys
revoke-subscription`, one per deleted subscription) costs an HTTP client's import, not the whole product's; and
the test model imports the `anthropic` SDK only when an Anthropic request arrives (issue 39: the suite is
CPU-bound, and these imports were seconds of CPU per process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "alembic", "asyncpg", "kubernetes_asyncio", "aiohttp", "fastapi", "starlette", "uvicorn",
         "pydantic", "anthropic", "openai", "stripe", "prometheus_client", "structlog", "celpy")


def loaded_after(code: str) -> set[str]:
    """The top-level packages of HEAVY a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.splitlines()[-1])) & set(HEAVY)


@pytest.mark.parametrize("argv", [["--help"], ["keys", "revoke-subscription", "--help"],
                                  ["billing", "ledger", "--help"], ["billing", "rerate", "--help"],
                                  ["subscription", "render", "--help"], ["usage", "--help"]])
def test_parsing_any_command_line_imports_nothing_heavy(argv: list[str]) -> None:
    code = ("from maasctl.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass")
    assert loaded_after(code) == set()


def test_the_key_cleanup_job_imports_only_an_http_client() -> None:
    code = ("from maasctl.cli import main\n"
            "import tempfile, pathlib\n"
            "token = pathlib.Path(tempfile.mkdtemp()) / 'token'\n"
            "token.write_text('t')\n"
            "rc = main(['keys', 'revoke-subscription', '--subscription', 'ns/s', '--maas-api-url',"
            " 'http://127.0.0.1:9', '--token-file', str(token)])\n"
            "assert rc == 1, rc")  # nothing listens on port 9: refused, and said so
    assert loaded_after(code) == set()


def test_the_test_model_imports_the_anthropic_sdk_only_for_an_anthropic_request() -> None:
    start = ("from fastapi.testclient import TestClient\n"
             "from maasctl.testmodel import ModelServerConfig, create_app\n"
             "client = TestClient(create_app(ModelServerConfig(models=('m',))))\n"
             "assert client.post('/v1/chat/completions', json={'model': 'm', 'messages': []}).status_code == 200\n")
    assert "anthropic" not in loaded_after(start)
    anthropic_call = ("r = client.post('/v1/messages', headers={'anthropic-version': '2023-06-01'},"
                      " json={'model': 'm', 'max_tokens': 5, 'messages': [{'role': 'user', 'content': 'hi'}]})\n"
                      "assert r.status_code == 200 and r.json()['type'] == 'message', r.text")
    assert "anthropic" in loaded_after(start + anthropic_call)
