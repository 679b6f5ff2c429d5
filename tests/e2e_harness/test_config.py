"""`E2E_CLUSTER=external` configuration and token hooks: every problem is named, no token is ever shown."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from e2e.config import VARIABLES, ConfigError, ExternalConfig
from e2e.identities import IdentityError, TokenCommand, TokenFile, parse_group_map

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-token-value"


@pytest.fixture
def minimal(tmp_path: Path) -> dict[str, str]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    tokens = tmp_path / "tokens.env"
    tokens.write_text(f"export ALICE_TOKEN={SECRET}\n")
    return {"E2E_KUBECONFIG": str(kubeconfig), "E2E_GATEWAY_URL": "http://gw.example:8000/",
            "E2E_MAAS_API_URL": "https://gw.example/maas-api", "E2E_TOKENS_FILE": str(tokens),
            "E2E_MODEL_URL": "http://model.example:8000", "E2E_UPSTREAM_KEY": "upstream"}


def test_a_minimal_configuration_has_documented_defaults(minimal: dict[str, str]) -> None:
    config = ExternalConfig.from_env(minimal)
    assert config.gateway_url == "http://gw.example:8000"  # trailing slash dropped
    assert config.api_url == "https://gw.example/maas-api"
    assert isinstance(config.tokens, TokenFile)
    assert (config.settings.gateway_namespace, config.settings.gateway_name) == ("openshift-ingress",
                                                                                   "maas-default-gateway")
    assert config.settings.subscription_namespace == "models-as-a-service"
    assert config.data_plane == "auto" and config.timeout_scale is None and config.groups == {}
    assert config.model_requests_url is None and config.admin_token_file is None
    assert "upstream" not in repr(config)  # the upstream key stays out of reprs


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    env = {"E2E_KUBECONFIG": str(tmp_path / "missing"), "E2E_GATEWAY_URL": "gw.example:8000",
           "E2E_GROUPS": "premium-users", "E2E_TIMEOUT_SCALE": "-1", "E2E_DATA_PLANE": "envoy",
           "E2E_ADMIN_TOKEN_FILE": str(tmp_path / "nope")}
    with pytest.raises(ConfigError) as err:
        ExternalConfig.from_env(env)
    text = str(err.value)
    for expected in ("E2E_GATEWAY_URL must be an http(s) URL", "E2E_MAAS_API_URL is not set",
                     "E2E_MODEL_URL is not set", "E2E_UPSTREAM_KEY is not set", "no token hook", "kubeconfig",
                     "E2E_GROUPS entry", "E2E_TIMEOUT_SCALE", "E2E_DATA_PLANE", "E2E_ADMIN_TOKEN_FILE"):
        assert expected in text, expected


def test_one_token_hook_only(minimal: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="not both"):
        ExternalConfig.from_env({**minimal, "E2E_TOKEN_COMMAND": "echo x"})
    config = ExternalConfig.from_env({k: v for k, v in minimal.items() if k != "E2E_TOKENS_FILE"}
                                     | {"E2E_TOKEN_COMMAND": "kubectl create token -n users"})
    assert config.tokens == TokenCommand(("kubectl", "create", "token", "-n", "users"))


def test_group_map_names_only_the_journeys_groups() -> None:
    assert parse_group_map(" premium-users = g1 ,free-users=system:serviceaccounts:ns ") == {
        "premium-users": "g1", "free-users": "system:serviceaccounts:ns"}
    with pytest.raises(IdentityError, match="the journeys use premium-users, free-users"):
        parse_group_map("admins=g")


def test_token_file_reads_the_maasctl_dev_format(tmp_path: Path) -> None:
    path = tmp_path / "tokens.env"
    path.write_text("# comment\nexport ALICE_TOKEN=abc\nBOB_TOKEN='d e'\nCAROL_TOKEN=\"xyz\"\n")
    tokens = TokenFile(path)
    assert tokens.token("alice") == "abc" and tokens.token("carol") == "xyz"
    with pytest.raises(IdentityError, match="no BOB_TOKEN line"):  # two words are not a token
        tokens.token("bob")
    with pytest.raises(IdentityError, match="cannot read"):
        TokenFile(tmp_path / "absent").token("alice")


def test_token_command_gets_the_user_and_never_shows_its_output(tmp_path: Path) -> None:
    script = tmp_path / "hook.py"
    script.write_text("import sys; u = sys.argv[-1]\n"
              f"if u == 'alice': print('{SECRET}-' + u)\n"
              f"elif u == 'bob': print('{SECRET} extra')\n"
              "else: sys.stderr.write('no such user ' + u); sys.exit(3)\n")
    hook = TokenCommand((sys.executable, str(script)))
    assert hook.token("alice") == f"{SECRET}-alice"
    with pytest.raises(IdentityError) as err:
        hook.token("bob")
    assert "printed 2 words" in str(err.value) and SECRET not in str(err.value)
    with pytest.raises(IdentityError, match="exited 3: no such user carol"):
        hook.token("carol")
    with pytest.raises(IdentityError, match="did not run"):
        TokenCommand(("/nonexistent/hook",)).token("alice")


def test_docs_describe_every_variable() -> None:
    documented = set(re.findall(r"^\| `(E2E_[A-Z_]+)`", (REPO / "docs" / "e2e.md").read_text(), re.MULTILINE))
    assert documented == set(VARIABLES) | {"E2E_CLUSTER"}
