"""connect() reads the proxy environment once and hands the API client a session that does not re-read it
(and stat ~/.netrc) on every request, while still honouring HTTPS_PROXY and NO_PROXY."""

from __future__ import annotations

from pathlib import Path

import pytest

from maasctl.runtime.connect import connect, proxy_from_environment

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
              "no_proxy")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-secret}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return str(path)


@pytest.mark.parametrize(("env", "url", "expected"), [
    ({}, "https://api.example:6443", None),
    ({"HTTPS_PROXY": "http://proxy:3128"}, "https://api.example:6443", "http://proxy:3128"),
    ({"https_proxy": "http://lower:3128"}, "https://api.example:6443", "http://lower:3128"),
    ({"HTTP_PROXY": "http://proxy:3128"}, "https://api.example:6443", None),
    ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "api.example"}, "https://api.example:6443", None),
    ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".example"}, "https://api.example:6443", None),
    ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "other"}, "https://api.example:6443", "http://proxy:3128"),
    ({"HTTPS_PROXY": "http://proxy:3128"}, "", None),
])
def test_proxy_from_environment(clean_env: pytest.MonkeyPatch, env: dict[str, str], url: str,
                                expected: str | None) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert proxy_from_environment(url) == expected


async def test_connect_session_does_not_trust_the_environment_per_request(clean_env: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    clean_env.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    api = await connect(kubeconfig(tmp_path, "https://api.example:6443"))
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert api.rest_client.proxy == "http://proxy.internal:3128"
        assert not api.rest_client.pool_manager.closed
    finally:
        await api.close()


async def test_connect_without_proxy(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    api = await connect(kubeconfig(tmp_path, "https://127.0.0.1:6443"))
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert not api.rest_client.proxy
    finally:
        await api.close()
