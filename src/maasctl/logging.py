"""Structured logging: JSON in a cluster, console on a terminal, secrets redacted everywhere."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

# API keys (sk-oai-...), bearer tokens and anything under a secret-looking key never reach a log line.
_SECRET_PATTERNS = (
    re.compile(r"sk-oai-[A-Za-z0-9_\-]+"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=\-]+"),
)
_SECRET_KEYS = re.compile(r"(?i)(token|secret|password|api[_-]?key|authorization|credential)")
REDACTED = "[REDACTED]"


def redact_text(text: str) -> str:
    """Mask API keys and bearer tokens inside free text (error messages, URLs, bodies)."""
    text = _SECRET_PATTERNS[0].sub("sk-oai-" + REDACTED, text)
    return _SECRET_PATTERNS[1].sub(lambda m: m.group(1) + REDACTED, text)


def _redact_value(key: str, value: Any) -> Any:
    if _SECRET_KEYS.search(key) and not key.endswith(("_id", "_name", "_count")):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(key, v) for v in value]
    return value


def redact_processor(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key in list(event_dict):
        event_dict[key] = _redact_value(key, event_dict[key])
    return event_dict


class _CurrentStderr:
    """`sys.stderr` as it is when a line is written, not when logging was configured: an entry point run in
    process (tests) configures logging while `sys.stderr` is a capture that is closed afterwards, and every
    later line of that process would then fail with "I/O operation on closed file"."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(*, fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog and stdlib logging once, from the CLI (never on import)."""
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    renderer: Any = (
        structlog.dev.ConsoleRenderer() if fmt == "console" else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    # The runtime, gateway and libraries log through stdlib logging: route those records through the same
    # redaction and renderer, so no log line of the process can carry a key or token.
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact_processor,
            renderer,
        ],
    ))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(numeric, logging.WARNING))  # third-party libraries: warnings and up
    logging.getLogger("maasctl").setLevel(numeric)
