"""No credential in the guardrails engine's output, with the REAL NeMo Guardrails server (issue 32 item 3).

The engine runs exactly the files `build_engine` renders (each configuration's `config.yml`, and the
server-level `config.py` that redacts), with its raw stdout/stderr in a log file (a pod log): no redaction
of ours between the engine and the file. The guard model is the test model, demanding the guard key.

The engine copies the key from its environment variable into the loaded configuration, and a rail that
raises makes it log a warning dumping that configuration: a broken prompt template, a prompt over the
template's `max_length`. Before the fix the key was in the log after one such request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from maasctl.builders.guardrails import EngineInput, build_engine
from maasctl.contract.guardrails import ConfigView, GuardModel, api_key_env_var
from maasctl.gateway.guardrails import engine_failure
from maasctl.gateway.server import HttpServer, start_http
from maasctl.testenv.controlplane import ManagedProcess, free_port
from maasctl.testenv.guardrails import RedactedProcess, engine_venv
from maasctl.testmodel import ModelServerConfig, create_app
from maasctl.tls import default_tls

GUARD_KEY = "sk-guard-6f1d2c9a8e7b"
SELF_CHECK = """\
rails:
  input: {{flows: [self check input]}}
  output: {{flows: [self check output]}}
prompts:
  - {{task: self_check_input, content: "User: {input} Block (Yes or No)?"}}
  - {{task: self_check_output, content: "Bot: {{{{ bot_response }}}} Block (Yes or No)?"}}
"""
CONFIGS = {
    "safety": SELF_CHECK.format(input="{{ user_input }}"),
    # a template the engine loads but cannot render: the rail raises at every check
    "broken": SELF_CHECK.format(input="{{ user_input | no_such_filter }}"),
}


@dataclass
class Engine:
    url: str
    log: Path
    raw: ManagedProcess = field(repr=False)

    async def check(self, config: str, text: str, rails: str = "input", answer: str | None = None) -> Any:
        messages = [{"role": "user", "content": text}]
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
        body = {"model": "", "messages": messages, "guardrails": {"config_id": config, "options": {
            "rails": [rails], "log": {"activated_rails": True, "internal_events": True}}}}
        async with httpx.AsyncClient(timeout=60, verify=default_tls()) as http:
            return await http.post(f"{self.url}/v1/chat/completions", json=body)


async def _ready(url: str, proc: ManagedProcess) -> None:
    async with httpx.AsyncClient(timeout=2, verify=default_tls()) as http:
        for _ in range(600):
            if not proc.alive():
                raise RuntimeError(f"engine exited:\n{proc.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/v1/health")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise RuntimeError("engine not ready")


def _render(root: Path, guard_url: str) -> tuple[list[str], dict[str, str]]:
    """Write the rendered ConfigMap where the volume would mount it; the engine's argv and Secret env."""
    views = tuple(ConfigView("ns", name, (GuardModel("main", "openai", "gpt-x", guard_url, "guard-key", "api-key"),),
                             text) for name, text in CONFIGS.items())
    configmap, deployment, _ = build_engine(EngineInput("ns", "engine:test", views))
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]
    for item in volume["configMap"]["items"]:
        path = root / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(configmap["data"][item["key"]])
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return command, {api_key_env_var(name, "main"): GUARD_KEY for name in CONFIGS}


@pytest.fixture(scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Engine]:
    venv = engine_venv()
    if venv is None:
        pytest.fail("the guardrails engine is not installed: run hack/setup-guardrails.sh (hack/setup.sh does)")
    guard: HttpServer = await start_http(create_app(ModelServerConfig(
        models=("gpt-x",), block_words=("FORBIDDEN",), require_bearer=GUARD_KEY)))
    root = tmp_path_factory.mktemp("engine")
    command, env = _render(root / "configs", f"{guard.url}/v1")
    port = free_port()
    argv = [str(venv / "bin" / command[0]), *command[1:]]
    argv[argv.index("--config") + 1] = str(root / "configs")
    argv[argv.index("--port") + 1] = str(port)
    proc = ManagedProcess("engine", argv, root / "engine.log", env={"HF_HUB_OFFLINE": "1", **env})
    proc.start()
    try:
        await _ready(f"http://127.0.0.1:{port}", proc)
        yield Engine(f"http://127.0.0.1:{port}", root / "engine.log", proc)
    finally:
        await asyncio.to_thread(proc.stop)
        await guard.stop()


class TestNoCredentialInTheEngineOutput:
    """Every way a caller's text can make a rail fail leaves the engine's raw output without the key."""

    @pytest.mark.parametrize(("config", "text", "rails", "answer"), [
        ("broken", "hello", "input", None),  # the rail raises: the engine logs its configuration
        ("broken", "FORBIDDEN", "input", None),
        ("safety", "a" * 17_000, "input", None),  # over the prompt's max_length (16,000)
        ("safety", "hi", "output", "b" * 17_000),
        ("safety", "FORBIDDEN", "input", None),  # decisions, for contrast
        ("safety", "hello", "input", None),
    ], ids=["raises", "raises-blocked-word", "over-length-input", "over-length-output", "blocked", "allowed"])
    async def test_the_key_is_never_written(self, engine: Engine, config: str, text: str, rails: str,
                                            answer: str | None) -> None:
        response = await engine.check(config, text, rails, answer)
        assert response.status_code == 200, response.text
        assert GUARD_KEY not in response.text
        log = engine.log.read_text(errors="replace")
        assert GUARD_KEY not in log
        assert "Logging error" not in log  # the redaction never breaks a record (uvicorn's formatters)

    async def test_a_failed_rail_is_told_apart_from_a_decision(self, engine: Engine) -> None:
        """What the gateway reads (`engine_failure`): a rail that raised is a failure, a block is not."""
        for config, text in (("broken", "hello"), ("safety", "a" * 17_000)):
            data = (await engine.check(config, text)).json()["guardrails"]["log"]
            assert engine_failure(data["activated_rails"], data["internal_events"]) is not None
            assert any(rail.get("stop") for rail in data["activated_rails"])  # what used to read as "blocked"
        for text in ("FORBIDDEN", "hello"):
            data = (await engine.check("safety", text)).json()["guardrails"]["log"]
            assert engine_failure(data["activated_rails"], data["internal_events"]) is None

    async def test_a_write_is_bounded(self, engine: Engine) -> None:
        """A 200 kB prompt that makes a rail fail cannot make the engine write hundreds of kilobytes."""
        before = engine.log.stat().st_size
        await engine.check("broken", "c" * 200_000)
        assert engine.log.stat().st_size - before < 60_000


class TestTheLocalRunnerMasksSecrets:
    """`RedactedProcess` (the local engine runner's process): the values it is given never reach its log."""

    @pytest.mark.parametrize("line", [
        f"key={GUARD_KEY}", f"{{'api_key': '{GUARD_KEY}'}}", f"two {GUARD_KEY}{GUARD_KEY} in one",
        f"Authorization: Bearer {GUARD_KEY}",
    ])
    async def test_lines_are_masked(self, tmp_path: Path, line: str) -> None:
        proc = RedactedProcess("echo", ["sh", "-c", f'printf "%s\\n" "{line}" >&2; echo done'], tmp_path / "out.log",
                               secrets=(GUARD_KEY,))
        proc.start()
        assert proc.popen is not None
        await asyncio.to_thread(proc.popen.wait, 10)
        await asyncio.to_thread(proc.stop)
        out = (tmp_path / "out.log").read_text()
        assert GUARD_KEY not in out and "[redacted]" in out and "done" in out
