"""No credential in the guardrails engine's output: redaction installed inside the engine's own process.

Runs with the engine's Python (NeMo Guardrails' image or virtualenv), not maasctl's: standard library only.
The controller renders this file as the engine's server-level `config.py` (`builders.guardrails`), which the
NeMo Guardrails server executes at start-up (`init(app)`), before it serves a request.

Why: the engine copies a guard model's API key from its environment variable (`api_key_env_var`) into the
model's `parameters` of the loaded configuration, and a rail that raises makes it log a warning with that
configuration (NeMo Guardrails 0.24: a prompt over the template's `max_length` is enough). Every log record
and every write to stdout/stderr is therefore redacted here: the values of every environment variable whose
name says it holds a credential (`..._API_KEY`, `..._TOKEN`, `..._SECRET`, `..._PASSWORD`: the Deployment's
`GUARDRAILS_<ID>_<TYPE>_API_KEY` among them) and any quoted value of a key-like field (`'api_key': '...'`),
whatever put it there. A write longer than `MAX_WRITE_CHARS` is cut: one request must not be able to make the
engine write a configuration dump (or the caller's prompt) of hundreds of kilobytes per call.

`testenv.guardrails` pipes the local engine's output through `redact` too (defence in depth).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Final, TextIO

__all__ = ["MASK", "MAX_WRITE_CHARS", "bounded", "init", "install", "redact", "secret_values"]

MASK: Final = "[redacted]"
MAX_WRITE_CHARS: Final = 4096
MIN_SECRET_CHARS: Final = 4  # shorter values would redact ordinary words
_SECRET_NAME: Final = re.compile(r"(?:API_KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
# A quoted value of a key-like field, as a repr or a JSON dump prints it ('api_key': 'sk-...', "token": "...").
# Every alternative starts with a literal: the scan stays linear on long lines.
_SECRET_FIELD: Final = re.compile(
    r"""(?i)((?:api_?key|token|secret|password|authorization)['"]?\s{0,3}[:=]\s{0,3}(?:SecretStr\()?)"""
    r"""(['"])([^'"\n]{1,512})\2""")


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The credentials among `environ`'s values (longest first, so a key containing another is masked whole)."""
    values = {v for name, v in environ.items() if _SECRET_NAME.search(name) and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(values, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` without any of `secrets` and without the quoted value of any key-like field."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS and secret in text:
            text = text.replace(secret, MASK)
    return _SECRET_FIELD.sub(lambda m: m.group(0) if m.group(3) == MASK else f"{m.group(1)}{m.group(2)}{MASK}"
                             f"{m.group(2)}", text)


def bounded(text: str, secrets: tuple[str, ...], limit: int = MAX_WRITE_CHARS) -> str:
    """`text` redacted and cut to `limit` characters (a secret across the cut is masked before cutting)."""
    if len(text) <= limit:
        return redact(text, secrets)
    longest = len(secrets[0]) if secrets else 0
    end = "\n" if text.endswith("\n") else ""
    head = redact(text[: limit + longest + 512], secrets)[:limit]
    return f"{head}... [{len(text) - limit} more characters not written]{end}"


class _RedactingStream:
    """A text stream that redacts and bounds every write (the engine's stdout, stderr and log handlers)."""

    def __init__(self, stream: TextIO, secrets: tuple[str, ...]) -> None:
        self._stream = stream
        self._secrets = secrets

    def write(self, text: str) -> int:
        self._stream.write(bounded(text, self._secrets))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding... of the real stream
        return getattr(self._stream, name)


def install(environ: Mapping[str, str] | None = None) -> None:
    """Redact every write to stdout/stderr of this process from now on, log handlers' streams included (a
    record is written by its handler in one write, so a record is redacted and bounded as a whole)."""
    if isinstance(sys.stderr, _RedactingStream):
        return
    secrets = secret_values(os.environ if environ is None else environ)
    wrapped: dict[int, _RedactingStream] = {id(s): _RedactingStream(s, secrets) for s in (sys.stdout, sys.stderr)}
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not None and id(stream) not in wrapped:
            wrapped[id(stream)] = _RedactingStream(stream, secrets)
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in wrapped:
                handler.setStream(wrapped[id(stream)])
    sys.stdout, sys.stderr = wrapped[id(sys.stdout)], wrapped[id(sys.stderr)]


def init(app: Any) -> None:
    """The NeMo Guardrails server's hook for a server-level `config.py`."""
    install()
