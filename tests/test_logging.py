"""Secrets never reach a log line, whether logged through structlog or stdlib logging."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from maasctl.logging import configure_logging

KEY = "sk-oai-abcdefghijklmnop_0123456789SECRETPART"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.payload.signature"


@pytest.fixture
def restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers, root.level = handlers, level
    structlog.reset_defaults()


def test_structlog_and_stdlib_records_are_redacted(capsys: pytest.CaptureFixture[str], restore_logging: object) -> None:
    configure_logging(fmt="json", level="info")
    structlog.get_logger("maasctl.test").info("minted", key=KEY, api_token=TOKEN, note=f"Authorization: Bearer {TOKEN}")
    logging.getLogger("maasctl.runtime.test").error("call failed: %s", f"Bearer {TOKEN} for {KEY}",
                                                    extra={"authorization": f"Bearer {TOKEN}"})
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2
    text = json.dumps(lines)
    assert KEY not in text and TOKEN not in text
    assert lines[0]["event"] == "minted" and "[REDACTED]" in lines[0]["note"]
    assert lines[1]["level"] == "error" and lines[1]["logger"] == "maasctl.runtime.test"
    assert lines[1]["authorization"] == "[REDACTED]" and "[REDACTED]" in lines[1]["event"]


def test_maasctl_info_logs_pass_but_library_info_logs_do_not(
    capsys: pytest.CaptureFixture[str], restore_logging: object
) -> None:
    configure_logging(fmt="json", level="info")
    logging.getLogger("maasctl.gateway.test").info("ours")
    logging.getLogger("aiohttp.test").info("theirs")
    err = capsys.readouterr().err
    assert "ours" in err and "theirs" not in err


def test_lines_go_to_the_stderr_of_the_moment_not_the_one_configured_with(
    capsys: pytest.CaptureFixture[str], restore_logging: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry point run in process configures logging while sys.stderr is a capture that closes afterwards:
    later lines of the process (a module logger cached on first use included) must not fail on it."""
    import io
    import sys

    closed = io.StringIO()
    monkeypatch.setattr(sys, "stderr", closed)
    configure_logging(fmt="json", level="info")
    cached = structlog.get_logger("maasctl.test.cached")
    cached.info("first")
    monkeypatch.undo()
    closed.close()
    cached.info("after the capture closed")
    logging.getLogger("maasctl.runtime.test").warning("stdlib too")
    err = capsys.readouterr().err
    assert "after the capture closed" in err and "stdlib too" in err
